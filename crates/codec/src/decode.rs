//! Decoding: [`check`] for the fixed header, [`decode`] for a whole packet.
//!
//! Decoding is strict: everything a receiver is required to reject is rejected, with the
//! [`DecodeError`] variant that maps to the right 5.0 reason code (Malformed Packet 0x81 for
//! broken encodings, Protocol Error 0x82 for well-formed packets that break a rule, Topic Name
//! Invalid 0x90 for topic rules). Nothing here panics or overflows on any input: reads go
//! through the bounds-checked [`Cursor`].

use bytes::Bytes;

use crate::cursor::{parse_vbi, Cursor};
use crate::property_codec::{read_properties, PropCtx};
use crate::topic::{parse_shared, validate_topic_filter, validate_topic_name};
use crate::Protocol;
use crate::{
    Auth, ConnAck, Connect, DecodeError, Disconnect, Packet, Properties, PubAck, Publish, QoS,
    SubAck, SubOptions, Subscribe, SubscribeFilter, UnsubAck, Unsubscribe, Will,
};

/// The fixed header of a packet (5.0 §2.1, 3.1.1 §2.2).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FrameHeader {
    /// Packet type in the high nibble, flags in the low nibble.
    pub first_byte: u8,
    /// Bytes the fixed header takes: 1 plus 1..=4 for the remaining length.
    pub header_len: usize,
    /// The remaining length: bytes of the packet after the fixed header.
    pub remaining_len: usize,
}

impl FrameHeader {
    /// The control packet type, 1..=15.
    pub fn packet_type(&self) -> u8 {
        self.first_byte >> 4
    }

    /// Bytes of the whole packet, fixed header included.
    pub fn total_len(&self) -> usize {
        // header_len <= 5 and remaining_len <= MAX_REMAINING_LENGTH: no overflow.
        self.header_len + self.remaining_len
    }
}

/// Reads the fixed header at the start of `buf`.
///
/// - `Ok(None)`: `buf` ends inside the fixed header; read more. Whether the body is complete
///   is for the caller to see, comparing [`FrameHeader::total_len`] with what it holds.
/// - `Err(Malformed)`: packet type 0 (reserved), or a remaining length longer than four bytes
///   or not in its shortest form [MQTT-1.5.5-1].
/// - `Err(TooLarge)`: the whole packet would exceed `max_packet_size` bytes. This is decided
///   from the header alone, so an oversized packet is refused before its body is buffered
///   (5.0 §3.1.2.11.4: the size is of the whole packet, fixed header included).
pub fn check(buf: &[u8], max_packet_size: usize) -> Result<Option<FrameHeader>, DecodeError> {
    let Some(&first_byte) = buf.first() else {
        return Ok(None);
    };
    if first_byte >> 4 == 0 {
        return Err(DecodeError::Malformed("reserved packet type 0"));
    }
    let Some((remaining, len)) = parse_vbi(buf.get(1..).unwrap_or_default())? else {
        return Ok(None);
    };
    let header = FrameHeader {
        first_byte,
        header_len: 1 + len,
        remaining_len: remaining as usize,
    };
    if header.total_len() > max_packet_size {
        return Err(DecodeError::TooLarge {
            size: header.total_len(),
            max: max_packet_size,
        });
    }
    Ok(Some(header))
}

/// Decodes one packet. `frame` must hold exactly one complete packet, fixed header included.
///
/// `protocol` is the version negotiated on the connection; CONNECT is decoded whatever it is,
/// since it carries its own protocol name and level (use [`Connect::protocol`] afterwards).
/// A CONNECT whose name and level are not "MQIsdp"/3, "MQTT"/4 or "MQTT"/5 gives
/// [`DecodeError::UnsupportedProtocol`] before anything after the level is looked at, so a
/// server can answer with CONNACK 0x84 (5.0) or return code 0x01 (3.1.1) [MQTT-3.1.2-2].
///
/// Both directions are decoded (a client decodes CONNACK, SUBACK, ...). Rules that depend on
/// the direction or on connection state (a client sending Subscription Identifiers in
/// PUBLISH, topic alias ranges, ...) are for the caller.
pub fn decode(frame: Bytes, protocol: Protocol) -> Result<Packet, DecodeError> {
    let header =
        check(&frame, usize::MAX)?.ok_or(DecodeError::Malformed("incomplete fixed header"))?;
    if header.total_len() != frame.len() {
        return Err(DecodeError::Malformed(
            "remaining length does not match the frame",
        ));
    }
    let flags = header.first_byte & 0x0f;
    let mut c = Cursor::new(frame.slice(header.header_len..));
    let v5 = protocol.is_v5();
    // Reserved flag values per packet type (5.0 §2.1.3, 3.1.1 §2.2.2): "If invalid flags are
    // received it is a Malformed Packet" [MQTT-2.2.2-2]. PUBLISH's flags are checked by
    // `publish`.
    let allowed = match header.packet_type() {
        3 => true,
        // PUBREL, SUBSCRIBE, UNSUBSCRIBE. MQTT 3.1 (§2.1) set DUP when one was resent, as
        // it did for PUBLISH; 3.1.1 made the flags fixed.
        6 | 8 | 10 if protocol == Protocol::V3_1 => flags & !0b1000 == 0b0010,
        6 | 8 | 10 => flags == 0b0010,
        _ => flags == 0,
    };
    if !allowed {
        return Err(DecodeError::Malformed("invalid fixed header flags"));
    }
    let packet = match header.packet_type() {
        1 => Packet::Connect(connect(&mut c)?),
        2 => Packet::ConnAck(connack(&mut c, v5)?),
        3 => Packet::Publish(publish(&mut c, flags, v5)?),
        4 => Packet::PubAck(pub_ack(&mut c, v5)?),
        5 => Packet::PubRec(pub_ack(&mut c, v5)?),
        6 => Packet::PubRel(pub_ack(&mut c, v5)?),
        7 => Packet::PubComp(pub_ack(&mut c, v5)?),
        8 => Packet::Subscribe(subscribe(&mut c, v5)?),
        9 => Packet::SubAck(suback(&mut c, v5)?),
        10 => Packet::Unsubscribe(unsubscribe(&mut c, v5)?),
        11 => Packet::UnsubAck(unsuback(&mut c, v5)?),
        12 => Packet::PingReq,
        13 => Packet::PingResp,
        14 => {
            let (code, properties) = code_and_properties(&mut c, v5, PropCtx::Disconnect)?;
            Packet::Disconnect(Disconnect { code, properties })
        }
        // Type 15 is reserved before 5.0 (3.1.1 §2.2.1: "Forbidden").
        15 if !v5 => return Err(DecodeError::Protocol("AUTH before MQTT 5.0")),
        15 => {
            let (code, properties) = code_and_properties(&mut c, v5, PropCtx::Auth)?;
            Packet::Auth(Auth { code, properties })
        }
        _ => return Err(DecodeError::Malformed("reserved packet type 0")),
    };
    // Every field has been read; anything left means the lengths do not add up (this is also
    // what rejects a body on PINGREQ, PINGRESP and 3.1.1 DISCONNECT, and more than two bytes
    // in a 3.1.1 PUBACK or UNSUBACK).
    c.finish("unexpected bytes after the last field")?;
    Ok(packet)
}

/// A Packet Identifier, which is never 0 [MQTT-2.3.1-1] (5.0 §2.2.1).
fn packet_id(c: &mut Cursor) -> Result<u16, DecodeError> {
    match c.u16()? {
        0 => Err(DecodeError::Protocol("packet identifier 0")),
        id => Ok(id),
    }
}

fn properties(c: &mut Cursor, v5: bool, ctx: PropCtx) -> Result<Properties, DecodeError> {
    if v5 {
        read_properties(c, ctx)
    } else {
        Ok(Properties::default())
    }
}

/// CONNECT (5.0 §3.1, 3.1.1 §3.1).
fn connect(c: &mut Cursor) -> Result<Connect, DecodeError> {
    let name = c.binary()?;
    let level = c.u8()?;
    let protocol = match (&name[..], level) {
        (b"MQIsdp", 3) => Protocol::V3_1,
        (b"MQTT", 4) => Protocol::V3_1_1,
        (b"MQTT", 5) => Protocol::V5,
        _ => return Err(DecodeError::UnsupportedProtocol),
    };
    let v5 = protocol.is_v5();

    let flags = c.u8()?;
    // [MQTT-3.1.2-3] The Server MUST validate that the reserved flag is 0.
    if flags & 0x01 != 0 {
        return Err(DecodeError::Malformed("CONNECT reserved flag set"));
    }
    let clean_start = flags & 0x02 != 0;
    let will_flag = flags & 0x04 != 0;
    let will_qos = (flags >> 3) & 0x03;
    let will_retain = flags & 0x20 != 0;
    let password_flag = flags & 0x40 != 0;
    let username_flag = flags & 0x80 != 0;
    // 5.0 §3.1.2.6-7, 3.1.1 §3.1.2.6-7: with the Will Flag 0, Will QoS and Will Retain are 0.
    if !will_flag && (will_qos != 0 || will_retain) {
        return Err(DecodeError::Malformed(
            "will QoS or retain set without a will",
        ));
    }
    let will_qos = QoS::from_u8(will_qos).ok_or(DecodeError::Malformed("will QoS 3"))?;
    // [MQTT-3.1.2-22] (3.1.1): without a User Name there is no Password. 5.0 §3.1.2.9 lifted
    // this rule.
    if !v5 && password_flag && !username_flag {
        return Err(DecodeError::Malformed("password without user name"));
    }
    let keep_alive = c.u16()?;
    let properties = properties(c, v5, PropCtx::Connect)?;
    // 5.0 §3.1.2.11.10: "It is a Protocol Error to include Authentication Data if there is no
    // Authentication Method."
    if properties.authentication_data.is_some() && properties.authentication_method.is_none() {
        return Err(DecodeError::Protocol(
            "authentication data without a method",
        ));
    }

    // Payload (§3.1.3): client id, will properties, will topic, will payload, user name,
    // password, each present as the flags say.
    let client_id = c.string()?;
    let will = if will_flag {
        let properties = self::properties(c, v5, PropCtx::Will)?;
        let topic = c.string()?;
        validate_topic_name(&topic)?;
        let payload = c.binary()?;
        Some(Will {
            topic,
            payload,
            qos: will_qos,
            retain: will_retain,
            properties,
        })
    } else {
        None
    };
    let username = if username_flag {
        Some(c.string()?)
    } else {
        None
    };
    let password = if password_flag {
        Some(c.binary()?)
    } else {
        None
    };
    Ok(Connect {
        protocol,
        clean_start,
        keep_alive,
        client_id,
        will,
        username,
        password,
        properties,
    })
}

/// CONNACK (5.0 §3.2, 3.1.1 §3.2).
fn connack(c: &mut Cursor, v5: bool) -> Result<ConnAck, DecodeError> {
    let ack_flags = c.u8()?;
    // 5.0 §3.2.2.1: bits 7-1 are reserved and set to 0 (3.1.1 [MQTT-3.2.2-1] likewise).
    if ack_flags & 0xfe != 0 {
        return Err(DecodeError::Malformed("CONNACK reserved flags set"));
    }
    let code = c.u8()?;
    let properties = properties(c, v5, PropCtx::ConnAck)?;
    Ok(ConnAck {
        session_present: ack_flags & 0x01 != 0,
        code,
        properties,
    })
}

/// PUBLISH (5.0 §3.3, 3.1.1 §3.3).
fn publish(c: &mut Cursor, flags: u8, v5: bool) -> Result<Publish, DecodeError> {
    let dup = flags & 0x08 != 0;
    let retain = flags & 0x01 != 0;
    // [MQTT-3.3.1-4] A PUBLISH packet MUST NOT have both QoS bits set to 1.
    let qos = QoS::from_u8((flags >> 1) & 0x03).ok_or(DecodeError::Malformed("PUBLISH QoS 3"))?;
    // [MQTT-3.3.1-2] The DUP flag MUST be set to 0 for all QoS 0 messages.
    if dup && qos == QoS::AtMostOnce {
        return Err(DecodeError::Malformed("DUP set on a QoS 0 PUBLISH"));
    }
    let topic = c.string()?;
    let packet_id = if qos == QoS::AtMostOnce {
        0
    } else {
        packet_id(c)?
    };
    let properties = properties(c, v5, PropCtx::Publish)?;
    if topic.is_empty() && v5 {
        // 5.0 §3.3.2.3.4: "It is a Protocol Error if the Topic Name is zero length and there
        // is no Topic Alias."
        if properties.topic_alias.is_none() {
            return Err(DecodeError::Protocol(
                "empty topic name without a topic alias",
            ));
        }
    } else {
        // [MQTT-3.3.2-2] no wildcards; 3.1.1 [MQTT-4.7.3-1] not empty.
        validate_topic_name(&topic)?;
    }
    Ok(Publish {
        dup,
        qos,
        retain,
        topic,
        packet_id,
        // The payload is whatever is left (5.0 §3.3.3), possibly nothing.
        payload: c.rest(),
        properties,
    })
}

/// PUBACK, PUBREC, PUBREL, PUBCOMP (5.0 §3.4-3.7, 3.1.1 §3.4-3.7).
///
/// 3.1.1 has only the packet id (remaining length 2). In 5.0 the reason code may be left out
/// when it is 0 and there are no properties (remaining length 2), and the property length may
/// be left out when there are none (remaining length 3) (5.0 §3.4.2.1).
fn pub_ack(c: &mut Cursor, v5: bool) -> Result<PubAck, DecodeError> {
    let packet_id = packet_id(c)?;
    let (code, properties) = if v5 {
        code_and_properties(c, true, PropCtx::PubAck)?
    } else {
        (0, Properties::default())
    };
    Ok(PubAck {
        packet_id,
        code,
        properties,
    })
}

/// The optional reason code and properties that close PUBACK-family, DISCONNECT and AUTH
/// packets in 5.0: absent means code 0 (5.0 §3.4.2.1, §3.14.2.1, §3.15.2.1); a code without
/// a property length means no properties. Before 5.0 there is nothing to read.
fn code_and_properties(
    c: &mut Cursor,
    v5: bool,
    ctx: PropCtx,
) -> Result<(u8, Properties), DecodeError> {
    if !v5 || c.is_empty() {
        return Ok((0, Properties::default()));
    }
    let code = c.u8()?;
    if c.is_empty() {
        return Ok((code, Properties::default()));
    }
    Ok((code, read_properties(c, ctx)?))
}

/// Subscription Options (5.0 §3.8.3.1) or, before 5.0, the Requested QoS byte (3.1.1 §3.8.3).
fn sub_options(o: u8, v5: bool) -> Result<SubOptions, DecodeError> {
    if !v5 {
        // 3.1.1 [MQTT-3-8.3-4]: reserved bits (7-2) set or QoS 3 make the packet malformed;
        // so the whole byte must be 0, 1 or 2.
        let qos = QoS::from_u8(o).ok_or(DecodeError::Malformed(
            "reserved subscription option bits set or QoS 3",
        ))?;
        return Ok(SubOptions {
            qos,
            ..SubOptions::default()
        });
    }
    // [MQTT-3.8.3-5] Reserved bits 6 and 7 non-zero: malformed.
    if o & 0xc0 != 0 {
        return Err(DecodeError::Malformed(
            "reserved subscription option bits set",
        ));
    }
    // 5.0 §3.8.3.1: "It is a Protocol Error if the Maximum QoS field has the value 3" and
    // "It is a Protocol Error to send a Retain Handling value of 3".
    let qos = QoS::from_u8(o & 0x03).ok_or(DecodeError::Protocol("subscription QoS 3"))?;
    let retain_handling = (o >> 4) & 0x03;
    if retain_handling == 3 {
        return Err(DecodeError::Protocol("retain handling 3"));
    }
    Ok(SubOptions {
        qos,
        no_local: o & 0x04 != 0,
        retain_as_published: o & 0x08 != 0,
        retain_handling,
    })
}

/// SUBSCRIBE (5.0 §3.8, 3.1.1 §3.8).
fn subscribe(c: &mut Cursor, v5: bool) -> Result<Subscribe, DecodeError> {
    let packet_id = packet_id(c)?;
    let properties = properties(c, v5, PropCtx::Subscribe)?;
    let mut filters = Vec::new();
    while !c.is_empty() {
        let filter = c.string()?;
        let options = sub_options(c.u8()?, v5)?;
        validate_topic_filter(&filter)?;
        // [MQTT-3.8.3-4] It is a Protocol Error to set No Local on a Shared Subscription.
        if options.no_local && parse_shared(&filter).is_some() {
            return Err(DecodeError::Protocol("no local on a shared subscription"));
        }
        filters.push(SubscribeFilter { filter, options });
    }
    // [MQTT-3.8.3-3] (3.1.1), 5.0 §3.8.3: a SUBSCRIBE with no payload is a Protocol Error.
    if filters.is_empty() {
        return Err(DecodeError::Protocol("SUBSCRIBE without topic filters"));
    }
    Ok(Subscribe {
        packet_id,
        filters,
        properties,
    })
}

/// The list of one-byte codes that fills the rest of SUBACK and 5.0 UNSUBACK: one per topic
/// filter of the request, which had at least one.
fn codes(c: &mut Cursor) -> Result<Vec<u8>, DecodeError> {
    let codes = c.rest().to_vec();
    if codes.is_empty() {
        return Err(DecodeError::Protocol(
            "acknowledgement without reason codes",
        ));
    }
    Ok(codes)
}

/// SUBACK (5.0 §3.9, 3.1.1 §3.9).
fn suback(c: &mut Cursor, v5: bool) -> Result<SubAck, DecodeError> {
    let packet_id = packet_id(c)?;
    let properties = properties(c, v5, PropCtx::SubAck)?;
    Ok(SubAck {
        packet_id,
        codes: codes(c)?,
        properties,
    })
}

/// UNSUBSCRIBE (5.0 §3.10, 3.1.1 §3.10).
fn unsubscribe(c: &mut Cursor, v5: bool) -> Result<Unsubscribe, DecodeError> {
    let packet_id = packet_id(c)?;
    let properties = properties(c, v5, PropCtx::Unsubscribe)?;
    let mut filters = Vec::new();
    while !c.is_empty() {
        let filter = c.string()?;
        validate_topic_filter(&filter)?;
        filters.push(filter);
    }
    // [MQTT-3.10.3-2] The Payload of an UNSUBSCRIBE packet MUST contain at least one filter.
    if filters.is_empty() {
        return Err(DecodeError::Protocol("UNSUBSCRIBE without topic filters"));
    }
    Ok(Unsubscribe {
        packet_id,
        filters,
        properties,
    })
}

/// UNSUBACK (5.0 §3.11, 3.1.1 §3.11: only the packet id).
fn unsuback(c: &mut Cursor, v5: bool) -> Result<UnsubAck, DecodeError> {
    let packet_id = packet_id(c)?;
    if !v5 {
        return Ok(UnsubAck {
            packet_id,
            codes: Vec::new(),
            properties: Properties::default(),
        });
    }
    let properties = read_properties(c, PropCtx::UnsubAck)?;
    Ok(UnsubAck {
        packet_id,
        codes: codes(c)?,
        properties,
    })
}

#[cfg(test)]
mod connect_tests;
#[cfg(test)]
mod tests;
