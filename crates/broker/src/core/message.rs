//! An application message as the broker holds it, and its encoding into PUBLISH packets.
//!
//! A message is decoded once and shared (`Arc<Message>`) by every queue it sits in. Encoding
//! for a subscriber writes straight into that subscriber's outbox: the properties that travel
//! unchanged (payload format, content type, response topic, correlation data, user properties)
//! are serialised once when the message is created; per subscriber only the packet id, flags,
//! remaining expiry, topic alias and subscription identifiers are written.

use std::sync::Arc;
use std::time::Instant;

use ballast_codec::{Properties, Protocol, Publish, QoS};
use bytes::{BufMut, Bytes};

#[derive(Debug, Clone)]
pub struct Message {
    pub topic: Arc<str>,
    pub payload: Bytes,
    pub qos: QoS,
    pub retain: bool,
    /// The MQTT 5 properties forwarded to subscribers, already encoded (no length prefix).
    pub props: Bytes,
    /// When the message expiry interval runs out, if it has one.
    pub expires_at: Option<Instant>,
    /// Session id of the publisher (for no-local); 0 for messages the broker makes itself.
    pub origin: u64,
}

impl Message {
    /// Builds a message from a decoded PUBLISH (topic already resolved from any alias).
    ///
    /// The payload is copied into an allocation of its own: the decoded one points into the
    /// connection's read buffer, which a long-lived message must not pin.
    pub fn from_publish(p: &Publish, topic: Arc<str>, origin: u64, now: Instant) -> Message {
        Message {
            topic,
            payload: Bytes::copy_from_slice(&p.payload),
            qos: p.qos,
            retain: p.retain,
            props: encode_forwarded(&p.properties),
            expires_at: p
                .properties
                .message_expiry_interval
                .map(|s| now + std::time::Duration::from_secs(s as u64)),
            origin,
        }
    }

    /// A message the broker makes itself (will, `$SYS`).
    pub fn new(topic: &str, payload: Bytes, qos: QoS, retain: bool) -> Message {
        Message {
            topic: topic.into(),
            payload,
            qos,
            retain,
            props: Bytes::new(),
            expires_at: None,
            origin: 0,
        }
    }

    /// A message read back from the store after a restart.
    pub fn from_stored(m: &ballast_store::StoredMessage, now: Instant) -> Message {
        Message {
            topic: m.topic.clone(),
            payload: m.payload.clone(),
            qos: QoS::from_u8(m.qos).unwrap_or(QoS::AtLeastOnce),
            retain: m.retain,
            props: m.props.clone(),
            expires_at: m
                .expires_at_ms
                .map(|ms| super::journal::from_unix_ms(ms, now)),
            origin: 0,
        }
    }

    pub fn is_expired(&self, now: Instant) -> bool {
        self.expires_at.is_some_and(|t| t <= now)
    }

    /// Seconds left before expiry, rounded up, as sent in Message Expiry Interval.
    pub fn remaining_expiry(&self, now: Instant) -> Option<u32> {
        self.expires_at.map(|t| {
            let left = t.saturating_duration_since(now).as_millis();
            left.div_ceil(1000).min(u32::MAX as u128) as u32
        })
    }

    /// Bytes this message counts against a session's queued-bytes limit.
    pub fn cost(&self) -> usize {
        self.payload.len() + self.topic.len() + self.props.len()
    }
}

/// The per-delivery part of a PUBLISH.
pub struct Delivery<'a> {
    pub qos: QoS,
    pub retain: bool,
    pub dup: bool,
    pub packet_id: u16,
    /// Topic alias to send; with `alias_only` the topic itself is left out.
    pub alias: Option<u16>,
    pub alias_only: bool,
    pub subscription_ids: &'a [u32],
}

fn varint_len(v: usize) -> usize {
    match v {
        0..=127 => 1,
        128..=16_383 => 2,
        16_384..=2_097_151 => 3,
        _ => 4,
    }
}

fn put_varint(out: &mut Vec<u8>, mut v: usize) {
    loop {
        let mut b = (v % 128) as u8;
        v /= 128;
        if v > 0 {
            b |= 0x80;
        }
        out.push(b);
        if v == 0 {
            break;
        }
    }
}

fn props_len(msg: &Message, d: &Delivery, expiry: Option<u32>) -> usize {
    let mut n = msg.props.len();
    if expiry.is_some() {
        n += 5;
    }
    if d.alias.is_some() {
        n += 3;
    }
    for id in d.subscription_ids {
        n += 1 + varint_len(*id as usize);
    }
    n
}

/// Size of the PUBLISH that `encode_publish` would write.
pub fn publish_len(proto: Protocol, msg: &Message, d: &Delivery, now: Instant) -> usize {
    let rem = remaining_len(proto, msg, d, msg.remaining_expiry(now));
    1 + varint_len(rem) + rem
}

fn remaining_len(proto: Protocol, msg: &Message, d: &Delivery, expiry: Option<u32>) -> usize {
    let topic = if d.alias_only { 0 } else { msg.topic.len() };
    let mut n = 2 + topic + msg.payload.len();
    if d.qos != QoS::AtMostOnce {
        n += 2;
    }
    if proto.is_v5() {
        let p = props_len(msg, d, expiry);
        n += varint_len(p) + p;
    }
    n
}

/// Writes a PUBLISH for `msg` into `out`; returns the number of bytes written.
pub fn encode_publish(
    out: &mut Vec<u8>,
    proto: Protocol,
    msg: &Message,
    d: &Delivery,
    now: Instant,
) -> usize {
    let expiry = msg.remaining_expiry(now);
    let rem = remaining_len(proto, msg, d, expiry);
    let start = out.len();
    out.reserve(1 + 4 + rem);
    let mut first = 0x30 | ((d.qos as u8) << 1);
    if d.dup {
        first |= 0x08;
    }
    if d.retain {
        first |= 0x01;
    }
    out.push(first);
    put_varint(out, rem);
    let topic: &[u8] = if d.alias_only {
        b""
    } else {
        msg.topic.as_bytes()
    };
    out.put_u16(topic.len() as u16);
    out.extend_from_slice(topic);
    if d.qos != QoS::AtMostOnce {
        out.put_u16(d.packet_id);
    }
    if proto.is_v5() {
        put_varint(out, props_len(msg, d, expiry));
        out.extend_from_slice(&msg.props);
        if let Some(e) = expiry {
            out.push(0x02);
            out.put_u32(e);
        }
        if let Some(a) = d.alias {
            out.push(0x23);
            out.put_u16(a);
        }
        for id in d.subscription_ids {
            out.push(0x0B);
            put_varint(out, *id as usize);
        }
    }
    out.extend_from_slice(&msg.payload);
    out.len() - start
}

/// Encodes the properties a subscriber receives unchanged [MQTT-3.3.2-4, -15, -16, -17].
fn encode_forwarded(p: &Properties) -> Bytes {
    if p.payload_format_indicator.is_none()
        && p.content_type.is_none()
        && p.response_topic.is_none()
        && p.correlation_data.is_none()
        && p.user_properties.is_empty()
    {
        return Bytes::new();
    }
    let mut out = Vec::new();
    let put_str = |out: &mut Vec<u8>, s: &[u8]| {
        out.put_u16(s.len() as u16);
        out.extend_from_slice(s);
    };
    if let Some(v) = p.payload_format_indicator {
        out.push(0x01);
        out.push(v);
    }
    if let Some(v) = &p.content_type {
        out.push(0x03);
        put_str(&mut out, v.as_bytes());
    }
    if let Some(v) = &p.response_topic {
        out.push(0x08);
        put_str(&mut out, v.as_bytes());
    }
    if let Some(v) = &p.correlation_data {
        out.push(0x09);
        put_str(&mut out, v);
    }
    for (k, v) in &p.user_properties {
        out.push(0x26);
        put_str(&mut out, k.as_bytes());
        put_str(&mut out, v.as_bytes());
    }
    Bytes::from(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use ballast_codec::{decode, Packet};

    fn roundtrip(proto: Protocol, msg: &Message, d: &Delivery) -> Publish {
        let now = Instant::now();
        let mut out = Vec::new();
        let n = encode_publish(&mut out, proto, msg, d, now);
        assert_eq!(n, out.len());
        assert_eq!(n, publish_len(proto, msg, d, now));
        match decode(Bytes::from(out), proto).expect("decodes") {
            Packet::Publish(p) => p,
            other => panic!("not a publish: {other:?}"),
        }
    }

    #[test]
    fn v5_publish_carries_forwarded_and_per_delivery_properties() {
        let now = Instant::now();
        let mut props = Properties {
            content_type: Some("text/plain".into()),
            response_topic: Some("reply/to".into()),
            correlation_data: Some(Bytes::from_static(b"\x00\x01")),
            payload_format_indicator: Some(1),
            message_expiry_interval: Some(30),
            ..Properties::default()
        };
        props.user_properties = vec![("k".into(), "1".into()), ("k".into(), "2".into())];
        let p = Publish {
            dup: false,
            qos: QoS::AtLeastOnce,
            retain: true,
            topic: "a/b".into(),
            packet_id: 7,
            payload: Bytes::from_static(b"hello"),
            properties: props.clone(),
        };
        let msg = Message::from_publish(&p, "a/b".into(), 1, now);
        let d = Delivery {
            qos: QoS::AtLeastOnce,
            retain: false,
            dup: true,
            packet_id: 9,
            alias: Some(3),
            alias_only: false,
            subscription_ids: &[5, 300],
        };
        let got = roundtrip(Protocol::V5, &msg, &d);
        assert_eq!(got.topic, "a/b");
        assert_eq!(got.packet_id, 9);
        assert!(got.dup);
        assert!(!got.retain);
        assert_eq!(&got.payload[..], b"hello");
        assert_eq!(got.properties.content_type, props.content_type);
        assert_eq!(got.properties.response_topic, props.response_topic);
        assert_eq!(got.properties.correlation_data, props.correlation_data);
        assert_eq!(got.properties.user_properties, props.user_properties);
        assert_eq!(got.properties.message_expiry_interval, Some(30));
        assert_eq!(got.properties.topic_alias, Some(3));
        assert_eq!(got.properties.subscription_identifiers, vec![5, 300]);
    }

    #[test]
    fn v311_publish_has_no_properties() {
        let msg = Message::new("t", Bytes::from_static(b"x"), QoS::AtMostOnce, false);
        let d = Delivery {
            qos: QoS::AtMostOnce,
            retain: true,
            dup: false,
            packet_id: 0,
            alias: None,
            alias_only: false,
            subscription_ids: &[],
        };
        let got = roundtrip(Protocol::V3_1_1, &msg, &d);
        assert_eq!(got.topic, "t");
        assert!(got.retain);
        assert!(got.properties.is_empty());
    }
}
