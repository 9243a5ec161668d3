//! Encoding: [`Packet::encode`] and [`Packet::encoded_len`].
//!
//! The encoder trusts its input: it writes what the packet holds and does not validate it
//! (that is the decoder's job on the other side). A caller must keep within what the wire
//! format can represent: strings and binary data of at most 65,535 bytes, a packet of at most
//! [`crate::MAX_REMAINING_LENGTH`] bytes after the fixed header, Subscription Identifiers in
//! 1..=268,435,455. Debug builds assert these; release builds write a packet the peer will
//! reject, but `encoded_len` still equals the bytes written.
//!
//! Where the protocol has no room for a field it is dropped: before 5.0 properties are never
//! written, and neither are the reason codes of PUBACK-family packets, UNSUBACK and
//! DISCONNECT. In 5.0 the shortest form the specification allows is used.

use bytes::BufMut;

use crate::cursor::{put_prefixed, put_vbi, vbi_len};
use crate::property_codec::{properties_len, put_properties};
use crate::{Connect, Packet, Properties, Protocol, QoS, SubOptions};

/// How much of the optional "reason code, properties" tail of a 5.0 PUBACK-family, DISCONNECT
/// or AUTH packet is written (5.0 §3.4.2.1, §3.14.2.1, §3.15.2.1).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Tail {
    /// Code 0 and no properties: nothing.
    None,
    /// No properties: the code alone.
    Code,
    /// The code and the property list.
    Full,
}

impl Tail {
    fn of(code: u8, properties: &Properties) -> Tail {
        match (code, properties.is_empty()) {
            (0, true) => Tail::None,
            (_, true) => Tail::Code,
            _ => Tail::Full,
        }
    }

    fn len(self, properties: &Properties) -> usize {
        match self {
            Tail::None => 0,
            Tail::Code => 1,
            Tail::Full => 1 + properties_len(properties),
        }
    }

    fn put<B: BufMut>(self, out: &mut B, code: u8, properties: &Properties) {
        if self != Tail::None {
            out.put_u8(code);
        }
        if self == Tail::Full {
            put_properties(out, properties);
        }
    }
}

/// Bytes of a string or binary field with its two-byte length.
fn prefixed_len(data: &[u8]) -> usize {
    2 + data.len()
}

/// Bytes of a property list if `v5`, nothing otherwise.
fn props_len(v5: bool, properties: &Properties) -> usize {
    if v5 {
        properties_len(properties)
    } else {
        0
    }
}

fn put_props<B: BufMut>(out: &mut B, v5: bool, properties: &Properties) {
    if v5 {
        put_properties(out, properties);
    }
}

/// The Subscription Options byte (5.0 §3.8.3.1); before 5.0 only the QoS bits exist.
fn options_byte(o: &SubOptions, v5: bool) -> u8 {
    let qos = o.qos as u8;
    if !v5 {
        return qos;
    }
    qos | u8::from(o.no_local) << 2
        | u8::from(o.retain_as_published) << 3
        | (o.retain_handling & 0x03) << 4
}

fn protocol_name(protocol: Protocol) -> &'static [u8] {
    match protocol {
        Protocol::V3_1 => b"MQIsdp",
        Protocol::V3_1_1 | Protocol::V5 => b"MQTT",
    }
}

fn connect_len(p: &Connect) -> usize {
    let v5 = p.protocol.is_v5();
    let mut n = prefixed_len(protocol_name(p.protocol)) + 1 + 1 + 2; // name, level, flags, keep alive
    n += props_len(v5, &p.properties);
    n += prefixed_len(p.client_id.as_bytes());
    if let Some(will) = &p.will {
        n += props_len(v5, &will.properties)
            + prefixed_len(will.topic.as_bytes())
            + prefixed_len(&will.payload);
    }
    n += p
        .username
        .as_ref()
        .map_or(0, |u| prefixed_len(u.as_bytes()));
    n += p.password.as_ref().map_or(0, |pw| prefixed_len(pw));
    n
}

fn put_connect<B: BufMut>(out: &mut B, p: &Connect) {
    let v5 = p.protocol.is_v5();
    put_prefixed(out, protocol_name(p.protocol));
    out.put_u8(p.protocol.level());
    // Connect Flags (5.0 §3.1.2.3): bit 0 reserved, 1 clean start, 2 will, 3-4 will QoS,
    // 5 will retain, 6 password, 7 user name.
    let mut flags = u8::from(p.clean_start) << 1;
    if let Some(will) = &p.will {
        flags |= 0x04 | (will.qos as u8) << 3 | u8::from(will.retain) << 5;
    }
    flags |= u8::from(p.password.is_some()) << 6 | u8::from(p.username.is_some()) << 7;
    out.put_u8(flags);
    out.put_u16(p.keep_alive);
    put_props(out, v5, &p.properties);
    put_prefixed(out, p.client_id.as_bytes());
    if let Some(will) = &p.will {
        put_props(out, v5, &will.properties);
        put_prefixed(out, will.topic.as_bytes());
        put_prefixed(out, &will.payload);
    }
    if let Some(username) = &p.username {
        put_prefixed(out, username.as_bytes());
    }
    if let Some(password) = &p.password {
        put_prefixed(out, password);
    }
}

impl Packet {
    /// The protocol a packet is written in: CONNECT carries its own.
    fn wire_protocol(&self, protocol: Protocol) -> Protocol {
        match self {
            Packet::Connect(c) => c.protocol,
            _ => protocol,
        }
    }

    /// The first byte of the fixed header: type and flags (5.0 §2.1.3).
    fn first_byte(&self) -> u8 {
        let flags = match self {
            Packet::Publish(p) => u8::from(p.dup) << 3 | (p.qos as u8) << 1 | u8::from(p.retain),
            Packet::PubRel(_) | Packet::Subscribe(_) | Packet::Unsubscribe(_) => 0b0010,
            _ => 0,
        };
        self.type_id() << 4 | flags
    }

    /// The remaining length: bytes after the fixed header.
    fn body_len(&self, protocol: Protocol) -> usize {
        let v5 = protocol.is_v5();
        match self {
            Packet::Connect(p) => connect_len(p),
            Packet::ConnAck(p) => 2 + props_len(v5, &p.properties),
            Packet::Publish(p) => {
                let id = if p.qos == QoS::AtMostOnce { 0 } else { 2 };
                prefixed_len(p.topic.as_bytes())
                    + id
                    + props_len(v5, &p.properties)
                    + p.payload.len()
            }
            Packet::PubAck(p) | Packet::PubRec(p) | Packet::PubRel(p) | Packet::PubComp(p) => {
                if v5 {
                    2 + Tail::of(p.code, &p.properties).len(&p.properties)
                } else {
                    2
                }
            }
            Packet::Subscribe(p) => {
                2 + props_len(v5, &p.properties)
                    + p.filters
                        .iter()
                        .map(|f| prefixed_len(f.filter.as_bytes()) + 1)
                        .sum::<usize>()
            }
            Packet::SubAck(p) => 2 + props_len(v5, &p.properties) + p.codes.len(),
            Packet::Unsubscribe(p) => {
                2 + props_len(v5, &p.properties)
                    + p.filters
                        .iter()
                        .map(|f| prefixed_len(f.as_bytes()))
                        .sum::<usize>()
            }
            Packet::UnsubAck(p) if v5 => 2 + properties_len(&p.properties) + p.codes.len(),
            Packet::UnsubAck(_) => 2,
            Packet::PingReq | Packet::PingResp => 0,
            Packet::Disconnect(p) if v5 => Tail::of(p.code, &p.properties).len(&p.properties),
            Packet::Disconnect(_) => 0,
            // AUTH exists only in 5.0 and is always written in its 5.0 form.
            Packet::Auth(p) => Tail::of(p.code, &p.properties).len(&p.properties),
        }
    }

    /// Bytes [`Packet::encode`] writes for this packet under `protocol`.
    pub fn encoded_len(&self, protocol: Protocol) -> usize {
        let body = self.body_len(self.wire_protocol(protocol));
        1 + vbi_len(body) + body
    }

    /// Writes the packet, fixed header included, as `protocol` says (except CONNECT, written
    /// in its own [`Connect::protocol`]).
    pub fn encode<B: BufMut>(&self, protocol: Protocol, out: &mut B) {
        let protocol = self.wire_protocol(protocol);
        let v5 = protocol.is_v5();
        out.put_u8(self.first_byte());
        put_vbi(out, self.body_len(protocol));
        match self {
            Packet::Connect(p) => put_connect(out, p),
            Packet::ConnAck(p) => {
                out.put_u8(u8::from(p.session_present));
                out.put_u8(p.code);
                put_props(out, v5, &p.properties);
            }
            Packet::Publish(p) => {
                put_prefixed(out, p.topic.as_bytes());
                if p.qos != QoS::AtMostOnce {
                    out.put_u16(p.packet_id);
                }
                put_props(out, v5, &p.properties);
                out.put_slice(&p.payload);
            }
            Packet::PubAck(p) | Packet::PubRec(p) | Packet::PubRel(p) | Packet::PubComp(p) => {
                out.put_u16(p.packet_id);
                if v5 {
                    Tail::of(p.code, &p.properties).put(out, p.code, &p.properties);
                }
            }
            Packet::Subscribe(p) => {
                out.put_u16(p.packet_id);
                put_props(out, v5, &p.properties);
                for f in &p.filters {
                    put_prefixed(out, f.filter.as_bytes());
                    out.put_u8(options_byte(&f.options, v5));
                }
            }
            Packet::SubAck(p) => {
                out.put_u16(p.packet_id);
                put_props(out, v5, &p.properties);
                out.put_slice(&p.codes);
            }
            Packet::Unsubscribe(p) => {
                out.put_u16(p.packet_id);
                put_props(out, v5, &p.properties);
                for f in &p.filters {
                    put_prefixed(out, f.as_bytes());
                }
            }
            Packet::UnsubAck(p) => {
                out.put_u16(p.packet_id);
                if v5 {
                    put_properties(out, &p.properties);
                    out.put_slice(&p.codes);
                }
            }
            Packet::PingReq | Packet::PingResp => {}
            Packet::Disconnect(p) => {
                if v5 {
                    Tail::of(p.code, &p.properties).put(out, p.code, &p.properties);
                }
            }
            Packet::Auth(p) => Tail::of(p.code, &p.properties).put(out, p.code, &p.properties),
        }
    }
}

#[cfg(test)]
mod tests;
