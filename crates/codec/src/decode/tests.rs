//! Unit tests for `check` and `decode`: one test per validation rule, each built from bytes
//! that break only that rule.

use bytes::Bytes;

use super::*;
use crate::cursor::put_vbi;

pub(super) const V3: Protocol = Protocol::V3_1_1;
pub(super) const V5: Protocol = Protocol::V5;

/// A packet with first byte `first` and body `body`.
pub(super) fn frame(first: u8, body: &[u8]) -> Bytes {
    let mut out = vec![first];
    put_vbi(&mut out, body.len());
    out.extend_from_slice(body);
    Bytes::from(out)
}

pub(super) fn dec(first: u8, body: &[u8], p: Protocol) -> Result<Packet, DecodeError> {
    decode(frame(first, body), p)
}

pub(super) fn malformed(r: Result<Packet, DecodeError>) -> bool {
    matches!(r, Err(DecodeError::Malformed(_)))
}

pub(super) fn protocol_err(r: Result<Packet, DecodeError>) -> bool {
    matches!(r, Err(DecodeError::Protocol(_)))
}

pub(super) fn topic_err(r: Result<Packet, DecodeError>) -> bool {
    matches!(r, Err(DecodeError::Topic(_)))
}

/// A CONNECT body: protocol name, level, flags, keep alive 60, then `rest`.
pub(super) fn connect_body(name: &[u8], level: u8, flags: u8, rest: &[u8]) -> Vec<u8> {
    let mut b = vec![0, name.len() as u8];
    b.extend_from_slice(name);
    b.extend_from_slice(&[level, flags, 0, 60]);
    b.extend_from_slice(rest);
    b
}

// ---- check ----

#[test]
fn check_needs_more_bytes_only_inside_the_header() {
    assert_eq!(check(&[], 100), Ok(None));
    assert_eq!(check(&[0x30], 100), Ok(None));
    assert_eq!(check(&[0x30, 0x80], 100), Ok(None));
    assert_eq!(check(&[0x30, 0xff, 0xff, 0xff], 1 << 30), Ok(None));
    // The body is not there yet, but the header is complete.
    let h = check(&[0x30, 0x80, 0x01], 1000).unwrap().unwrap();
    assert_eq!(
        (h.first_byte, h.header_len, h.remaining_len),
        (0x30, 3, 128)
    );
    assert_eq!((h.packet_type(), h.total_len()), (3, 131));
}

#[test]
fn check_rejects_packet_type_0() {
    assert!(matches!(
        check(&[0x00], 100),
        Err(DecodeError::Malformed(_))
    ));
    assert!(matches!(
        check(&[0x0f, 0], 100),
        Err(DecodeError::Malformed(_))
    ));
}

#[test]
fn check_rejects_a_fifth_length_byte() {
    let r = check(&[0x30, 0xff, 0xff, 0xff, 0xff], usize::MAX);
    assert!(matches!(r, Err(DecodeError::Malformed(_))));
}

#[test]
fn check_rejects_non_minimal_lengths() {
    assert!(matches!(
        check(&[0x30, 0x80, 0x00], 100),
        Err(DecodeError::Malformed(_))
    ));
    assert!(matches!(
        check(&[0xc0, 0x80, 0x80, 0x00], 100),
        Err(DecodeError::Malformed(_))
    ));
}

#[test]
fn check_rejects_too_large_from_the_header_alone() {
    let r = check(&[0x30, 0xff, 0xff, 0xff, 0x7f], 1 << 20);
    assert_eq!(
        r,
        Err(DecodeError::TooLarge {
            size: 5 + 268_435_455,
            max: 1 << 20
        })
    );
    // Exactly at the limit (header + body) is fine, one over is not.
    assert!(check(&[0x30, 10], 12).unwrap().is_some());
    assert_eq!(
        check(&[0x30, 10], 11),
        Err(DecodeError::TooLarge { size: 12, max: 11 })
    );
}

// ---- framing and fixed header flags ----

#[test]
fn frame_must_match_remaining_length() {
    assert!(malformed(decode(
        Bytes::from_static(&[0xc0, 0x00, 0x00]),
        V3
    )));
    assert!(malformed(decode(
        Bytes::from_static(&[0x30, 0x05, 0x00]),
        V3
    )));
    assert!(malformed(decode(Bytes::from_static(&[0x30]), V3)));
    assert!(malformed(decode(Bytes::new(), V3)));
}

#[test]
fn reserved_fixed_header_flags() {
    // PUBREL, SUBSCRIBE, UNSUBSCRIBE need 0b0010.
    assert!(malformed(dec(0x60, &[0, 1], V3)));
    assert!(dec(0x62, &[0, 1], V3).is_ok());
    assert!(malformed(dec(0x80, &[0, 1, 0, 1, b'a', 0], V3)));
    assert!(dec(0x82, &[0, 1, 0, 1, b'a', 0], V3).is_ok());
    assert!(malformed(dec(0xa0, &[0, 1, 0, 1, b'a'], V3)));
    assert!(dec(0xa2, &[0, 1, 0, 1, b'a'], V3).is_ok());
    // Every other type needs 0.
    assert!(malformed(dec(0xc1, &[], V3)));
    assert!(malformed(dec(0xd8, &[], V3)));
    assert!(malformed(dec(0xe2, &[], V3)));
    assert!(malformed(dec(0x42, &[0, 1], V3)));
    assert!(malformed(dec(0x21, &[0, 0], V3)));
    assert!(malformed(dec(0xf1, &[], V5)));
    // MQTT 3.1 allowed DUP on a resent PUBREL, SUBSCRIBE or UNSUBSCRIBE.
    assert!(dec(0x6a, &[0, 1], Protocol::V3_1).is_ok());
    assert!(dec(0xaa, &[0, 1, 0, 1, b'a'], Protocol::V3_1).is_ok());
    assert!(malformed(dec(0x6a, &[0, 1], V3)));
    assert!(malformed(dec(0x6a, &[0, 1], V5)));
    assert!(malformed(dec(0x68, &[0, 1], Protocol::V3_1)));
    let connect = connect_body(b"MQTT", 4, 0x02, &[0, 0]);
    assert!(malformed(dec(0x12, &connect, V3)));
}

// ---- PUBLISH ----

#[test]
fn publish_qos_3_is_malformed() {
    assert!(malformed(dec(0x36, &[0, 1, b'a', 0, 1], V3)));
}

#[test]
fn publish_dup_with_qos_0_is_malformed() {
    assert!(malformed(dec(0x38, &[0, 1, b'a'], V3)));
    assert!(dec(0x3a, &[0, 1, b'a', 0, 1], V3).is_ok());
}

#[test]
fn publish_packet_id_0() {
    assert!(protocol_err(dec(0x32, &[0, 1, b'a', 0, 0], V3)));
    assert!(protocol_err(dec(0x34, &[0, 1, b'a', 0, 0, 0], V5)));
}

#[test]
fn publish_topic_rules() {
    assert!(topic_err(dec(0x30, &[0, 3, b'a', b'/', b'+'], V3)));
    assert!(topic_err(dec(0x30, &[0, 1, b'#', 0], V5)));
    // Empty topic: invalid in 3.1.1, a protocol error in 5.0 without a topic alias.
    assert!(topic_err(dec(0x30, &[0, 0], V3)));
    assert!(protocol_err(dec(0x30, &[0, 0, 0], V5)));
    let Packet::Publish(p) = dec(0x30, &[0, 0, 3, 0x23, 0, 7], V5).unwrap() else {
        panic!()
    };
    assert_eq!((p.topic.as_str(), p.properties.topic_alias), ("", Some(7)));
    assert!(malformed(dec(0x30, &[0, 2, b'a', 0], V3)));
}

#[test]
fn publish_fields_and_zero_copy_payload() {
    let f = frame(0x3b, &[0, 3, b'a', b'/', b'b', 0x12, 0x34, b'h', b'i']);
    let Packet::Publish(p) = decode(f.clone(), V3).unwrap() else {
        panic!()
    };
    assert!(p.dup && p.retain && p.qos == QoS::AtLeastOnce);
    assert_eq!(
        (p.topic.as_str(), p.packet_id, &p.payload[..]),
        ("a/b", 0x1234, &b"hi"[..])
    );
    assert_eq!(p.payload.as_ptr(), f[f.len() - 2..].as_ptr());
    // 3.1.1 reads no properties: a zero byte after the topic is payload.
    let Packet::Publish(p) = dec(0x30, &[0, 1, b'a', 0], V3).unwrap() else {
        panic!()
    };
    assert_eq!(&p.payload[..], &[0]);
    let Packet::Publish(p) = dec(0x30, &[0, 1, b'a', 0], V5).unwrap() else {
        panic!()
    };
    assert!(p.payload.is_empty());
}

#[test]
fn publish_property_rules() {
    // Property not allowed in PUBLISH.
    assert!(protocol_err(dec(
        0x30,
        &[0, 1, b'a', 5, 0x11, 0, 0, 0, 1],
        V5
    )));
    // Property length past the end.
    assert!(malformed(dec(0x30, &[0, 1, b'a', 9, 0x23, 0, 1], V5)));
    // Correlation data is a slice of the frame.
    let f = frame(0x30, &[0, 1, b'a', 4, 0x09, 0, 1, 0xaa]);
    let Packet::Publish(p) = decode(f.clone(), V5).unwrap() else {
        panic!()
    };
    assert_eq!(
        p.properties.correlation_data.unwrap().as_ptr(),
        f[f.len() - 1..].as_ptr()
    );
}

// ---- PUBACK family ----

#[test]
fn puback_v3_is_exactly_two_bytes() {
    for first in [0x40, 0x50, 0x62, 0x70] {
        assert!(dec(first, &[0, 1], V3).is_ok());
        assert!(malformed(dec(first, &[0, 1, 0], V3)));
        assert!(malformed(dec(first, &[0], V3)));
        assert!(protocol_err(dec(first, &[0, 0], V3)));
    }
}

#[test]
fn puback_v5_short_forms() {
    let ack = |body: &[u8]| match dec(0x40, body, V5) {
        Ok(Packet::PubAck(a)) => a,
        other => panic!("{other:?}"),
    };
    assert_eq!(ack(&[0, 1]).code, 0);
    assert_eq!(ack(&[0, 1, 0x10]).code, 0x10);
    let a = ack(&[0, 1, 0x80, 4, 0x1f, 0, 1, b'x']);
    assert_eq!(
        (a.code, a.properties.reason_string.as_deref()),
        (0x80, Some("x"))
    );
    assert!(malformed(dec(0x40, &[0, 1, 0, 0, 0], V5)));
    assert!(protocol_err(dec(0x40, &[0, 0, 0], V5)));
    assert!(protocol_err(dec(0x40, &[0, 1, 0, 3, 0x23, 0, 1], V5)));
}

// ---- SUBSCRIBE / SUBACK ----

#[test]
fn subscribe_needs_filters() {
    assert!(protocol_err(dec(0x82, &[0, 1], V3)));
    assert!(protocol_err(dec(0x82, &[0, 1, 0], V5)));
}

#[test]
fn subscribe_packet_id_0() {
    assert!(protocol_err(dec(0x82, &[0, 0, 0, 1, b'a', 0], V3)));
}

#[test]
fn subscribe_options_v3() {
    assert!(dec(0x82, &[0, 1, 0, 1, b'a', 2], V3).is_ok());
    assert!(malformed(dec(0x82, &[0, 1, 0, 1, b'a', 3], V3)));
    assert!(malformed(dec(0x82, &[0, 1, 0, 1, b'a', 0x04], V3)));
    assert!(malformed(dec(0x82, &[0, 1, 0, 1, b'a', 0x80], V3)));
    // Options byte missing.
    assert!(malformed(dec(0x82, &[0, 1, 0, 1, b'a'], V3)));
}

#[test]
fn subscribe_options_v5() {
    let Packet::Subscribe(s) = dec(0x82, &[0, 1, 0, 0, 1, b'a', 0x2e], V5).unwrap() else {
        panic!()
    };
    let o = s.filters[0].options;
    assert_eq!(
        (o.qos, o.no_local, o.retain_as_published, o.retain_handling),
        (QoS::ExactlyOnce, true, true, 2)
    );
    assert!(malformed(dec(0x82, &[0, 1, 0, 0, 1, b'a', 0x40], V5)));
    assert!(malformed(dec(0x82, &[0, 1, 0, 0, 1, b'a', 0x80], V5)));
    assert!(protocol_err(dec(0x82, &[0, 1, 0, 0, 1, b'a', 0x30], V5)));
    assert!(protocol_err(dec(0x82, &[0, 1, 0, 0, 1, b'a', 0x03], V5)));
}

#[test]
fn subscribe_no_local_on_shared_subscription() {
    let mut body = vec![0, 1, 0, 0, 10];
    body.extend_from_slice(b"$share/g/a");
    body.push(0x04);
    assert!(protocol_err(dec(0x82, &body, V5)));
    *body.last_mut().unwrap() = 0;
    assert!(dec(0x82, &body, V5).is_ok());
}

#[test]
fn subscribe_filter_rules() {
    assert!(topic_err(dec(0x82, &[0, 1, 0, 2, b'a', b'#', 0], V3)));
    assert!(topic_err(dec(0x82, &[0, 1, 0, 0, 0], V3)));
    assert!(malformed(dec(0x82, &[0, 1, 0, 1, 0xff, 0], V3)));
}

#[test]
fn subscribe_subscription_identifier() {
    let Packet::Subscribe(s) = dec(0x82, &[0, 1, 2, 0x0b, 5, 0, 1, b'a', 0], V5).unwrap() else {
        panic!()
    };
    assert_eq!(s.properties.subscription_identifiers, vec![5]);
    assert!(protocol_err(dec(
        0x82,
        &[0, 1, 2, 0x0b, 0, 0, 1, b'a', 0],
        V5
    )));
    assert!(protocol_err(dec(
        0x82,
        &[0, 1, 4, 0x0b, 1, 0x0b, 2, 0, 1, b'a', 0],
        V5
    )));
}

#[test]
fn suback_rules() {
    let Packet::SubAck(s) = dec(0x90, &[0, 1, 0, 1, 0x80], V3).unwrap() else {
        panic!()
    };
    assert_eq!(s.codes, vec![0, 1, 0x80]);
    assert!(protocol_err(dec(0x90, &[0, 1], V3)));
    assert!(protocol_err(dec(0x90, &[0, 1, 0], V5)));
    assert!(protocol_err(dec(0x90, &[0, 0, 0], V3)));
}

// ---- UNSUBSCRIBE / UNSUBACK ----

#[test]
fn unsubscribe_rules() {
    assert!(protocol_err(dec(0xa2, &[0, 1], V3)));
    assert!(protocol_err(dec(0xa2, &[0, 1, 0], V5)));
    assert!(protocol_err(dec(0xa2, &[0, 0, 0, 1, b'a'], V3)));
    assert!(topic_err(dec(0xa2, &[0, 1, 0, 2, b'+', b'a'], V3)));
    assert!(malformed(dec(0xa2, &[0, 1, 0, 2, b'a'], V3)));
    assert!(protocol_err(dec(0xa2, &[0, 1, 2, 0x0b, 1, 0, 1, b'a'], V5)));
}

#[test]
fn unsuback_forms() {
    let Packet::UnsubAck(u) = dec(0xb0, &[0, 1], V3).unwrap() else {
        panic!()
    };
    assert!(u.codes.is_empty());
    // 3.1.1 UNSUBACK has no codes.
    assert!(malformed(dec(0xb0, &[0, 1, 0], V3)));
    let Packet::UnsubAck(u) = dec(0xb0, &[0, 1, 0, 0x11, 0], V5).unwrap() else {
        panic!()
    };
    assert_eq!(u.codes, vec![0x11, 0]);
    assert!(protocol_err(dec(0xb0, &[0, 1, 0], V5)));
    assert!(malformed(dec(0xb0, &[0, 1], V5)));
}

// ---- PINGREQ, PINGRESP, DISCONNECT, AUTH ----

#[test]
fn ping_has_no_body() {
    assert_eq!(dec(0xc0, &[], V3), Ok(Packet::PingReq));
    assert_eq!(dec(0xd0, &[], V5), Ok(Packet::PingResp));
    assert!(malformed(dec(0xc0, &[0], V3)));
    assert!(malformed(dec(0xd0, &[0], V5)));
}

#[test]
fn disconnect_forms() {
    assert_eq!(
        dec(0xe0, &[], V3),
        Ok(Packet::Disconnect(Disconnect::default()))
    );
    assert!(malformed(dec(0xe0, &[0], V3)));
    assert_eq!(
        dec(0xe0, &[], V5),
        Ok(Packet::Disconnect(Disconnect::default()))
    );
    let Packet::Disconnect(d) = dec(0xe0, &[0x04], V5).unwrap() else {
        panic!()
    };
    assert_eq!(d.code, 4);
    let Packet::Disconnect(d) = dec(0xe0, &[0x8e, 5, 0x11, 0, 0, 0, 9], V5).unwrap() else {
        panic!()
    };
    assert_eq!(
        (d.code, d.properties.session_expiry_interval),
        (0x8e, Some(9))
    );
    assert!(protocol_err(dec(0xe0, &[0, 3, 0x23, 0, 1], V5)));
    assert!(malformed(dec(0xe0, &[0, 0, 0], V5)));
}

#[test]
fn auth_only_in_v5() {
    assert!(protocol_err(dec(0xf0, &[], V3)));
    assert!(protocol_err(dec(0xf0, &[], Protocol::V3_1)));
    assert_eq!(dec(0xf0, &[], V5), Ok(Packet::Auth(Auth::default())));
    let f = frame(0xf0, &[0x18, 9, 0x15, 0, 1, b'm', 0x16, 0, 2, 1, 2]);
    let Packet::Auth(a) = decode(f.clone(), V5).unwrap() else {
        panic!()
    };
    assert_eq!(
        (a.code, a.properties.authentication_method.as_deref()),
        (0x18, Some("m"))
    );
    let data = a.properties.authentication_data.unwrap();
    assert_eq!(data.as_ptr(), f[f.len() - 2..].as_ptr());
    assert!(protocol_err(dec(0xf0, &[0x18, 2, 0x0b, 1], V5)));
}
