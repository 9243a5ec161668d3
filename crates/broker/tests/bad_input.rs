//! Malformed packets and protocol violations: the offending connection gets the reason code
//! the spec names (5.0) or is closed (3.1.1); other clients carry on; the error is counted.

mod common;

use common::*;

/// A PUBLISH built by hand: first byte, then the body (remaining length computed, < 128).
fn raw(first: u8, body: &[u8]) -> Vec<u8> {
    assert!(body.len() < 128);
    let mut v = vec![first, body.len() as u8];
    v.extend_from_slice(body);
    v
}

/// Connects an observer and a 5.0 client, sends `bytes` from the latter, and checks: DISCONNECT
/// with one of `codes`, the close, the counter, and that the observer still works.
fn v5_rejects(bytes: &[u8], codes: &[u8]) {
    let b = start_broker();
    let mut observer = Client::v5(b.mqtt, "observer");
    observer.sub("still/works", QoS::AtLeastOnce);
    let mut bad = Client::v5(b.mqtt, "bad");
    bad.send_raw(bytes);
    let d = bad.expect_disconnect(codes);
    assert!(
        wait_for(WAIT, || protocol_errors(&b, d.code) >= 1),
        "protocol_errors has no entry for 0x{:02x}: {:?}",
        d.code,
        b.metrics().protocol_errors
    );
    let mut publ = Client::v5(b.mqtt, "pub");
    observer.assert_receives_from(&mut publ, "still/works");
    observer.ping();
}

/// The same for 3.1.1: the connection is closed without any packet.
fn v311_rejects(bytes: &[u8]) {
    let b = start_broker();
    let mut observer = Client::v311(b.mqtt, "observer");
    observer.sub("still/works", QoS::AtLeastOnce);
    let mut bad = Client::v311(b.mqtt, "bad");
    bad.send_raw(bytes);
    bad.expect_closed_silently();
    assert!(
        wait_for(WAIT, || b
            .metrics()
            .protocol_errors
            .iter()
            .map(|(_, n)| n)
            .sum::<u64>()
            >= 1),
        "no protocol error counted: {:?}",
        b.metrics()
    );
    wait_closed(&b, "protocol_error", 1);
    let mut publ = Client::v311(b.mqtt, "pub");
    observer.assert_receives_from(&mut publ, "still/works");
}

const SUBSCRIBE_BAD_FLAGS: &[u8] = &[0x80, 0x07, 0x00, 0x01, 0x00, 0x00, 0x01, b'a', 0x00];
const SUBSCRIBE_BAD_FLAGS_311: &[u8] = &[0x80, 0x06, 0x00, 0x01, 0x00, 0x01, b'a', 0x00];
const FIVE_BYTE_REMAINING_LENGTH: &[u8] = &[0x30, 0xff, 0xff, 0xff, 0xff, 0x7f];

#[test]
fn v5_subscribe_with_reserved_flag_bits_is_malformed() {
    v5_rejects(SUBSCRIBE_BAD_FLAGS, &[0x81]);
}

#[test]
fn v311_subscribe_with_reserved_flag_bits_closes_the_connection() {
    v311_rejects(SUBSCRIBE_BAD_FLAGS_311);
}

#[test]
fn v5_five_byte_remaining_length_is_malformed() {
    v5_rejects(FIVE_BYTE_REMAINING_LENGTH, &[0x81]);
}

#[test]
fn v311_five_byte_remaining_length_closes_the_connection() {
    v311_rejects(FIVE_BYTE_REMAINING_LENGTH);
}

#[test]
fn v5_invalid_utf8_topic_is_malformed() {
    // PUBLISH QoS 0, topic 0xC3 0x28 (invalid UTF-8), no properties, payload "x".
    v5_rejects(&raw(0x30, &[0x00, 0x02, 0xc3, 0x28, 0x00, b'x']), &[0x81]);
}

#[test]
fn v311_invalid_utf8_topic_closes_the_connection() {
    v311_rejects(&raw(0x30, &[0x00, 0x02, 0xc3, 0x28, b'x']));
}

#[test]
fn v5_qos1_publish_with_packet_id_zero_is_refused() {
    // PUBLISH QoS 1 "a", packet id 0.
    v5_rejects(
        &raw(0x32, &[0x00, 0x01, b'a', 0x00, 0x00, 0x00, b'x']),
        &[0x81, 0x82],
    );
}

#[test]
fn v311_qos1_publish_with_packet_id_zero_closes_the_connection() {
    v311_rejects(&raw(0x32, &[0x00, 0x01, b'a', 0x00, 0x00, b'x']));
}

#[test]
fn v5_second_connect_is_a_protocol_error() {
    v5_rejects(
        &encode(&Packet::Connect(connect_packet(V5, "again")), V5),
        &[0x82],
    );
}

#[test]
fn v311_second_connect_closes_the_connection() {
    v311_rejects(&encode(
        &Packet::Connect(connect_packet(V311, "again")),
        V311,
    ));
}

#[test]
fn v5_publish_with_qos_3_is_malformed() {
    v5_rejects(
        &raw(0x36, &[0x00, 0x01, b'a', 0x00, 0x01, 0x00, b'x']),
        &[0x81],
    );
}

#[test]
fn v5_dup_on_qos0_is_malformed() {
    v5_rejects(&raw(0x38, &[0x00, 0x01, b'a', 0x00, b'x']), &[0x81]);
}

#[test]
fn v5_reserved_packet_type_is_malformed() {
    v5_rejects(&[0x00, 0x00], &[0x81]);
}

#[test]
fn v5_publish_to_a_wildcard_topic_is_refused() {
    v5_rejects(
        &raw(0x30, &[0x00, 0x03, b'a', b'/', b'+', 0x00, b'x']),
        &[0x90, 0x81, 0x82],
    );
}

#[test]
fn v5_body_shorter_than_its_fields_is_malformed() {
    // PUBLISH announcing a 10-byte topic inside a 4-byte body.
    v5_rejects(&raw(0x30, &[0x00, 0x0a, b'a', b'b']), &[0x81]);
}

#[test]
fn v5_unknown_property_is_malformed() {
    // PUBLISH QoS 0 "a", properties [0x7f 0x00].
    v5_rejects(
        &raw(0x30, &[0x00, 0x01, b'a', 0x02, 0x7f, 0x00, b'x']),
        &[0x81],
    );
}

#[test]
fn v5_duplicate_property_is_a_protocol_error() {
    // Two Message Expiry Intervals.
    v5_rejects(
        &raw(
            0x30,
            &[
                0x00, 0x01, b'a', 0x0a, 0x02, 0, 0, 0, 1, 0x02, 0, 0, 0, 2, b'x',
            ],
        ),
        &[0x82],
    );
}

#[test]
fn v5_client_publish_with_subscription_identifier_is_a_protocol_error() {
    // [MQTT-3.3.4-6]: a PUBLISH from a client must not carry a Subscription Identifier.
    v5_rejects(
        &raw(0x30, &[0x00, 0x01, b'a', 0x02, 0x0b, 0x01, b'x']),
        &[0x82],
    );
}

#[test]
fn v5_subscribe_option_reserved_bits_are_malformed() {
    v5_rejects(
        &[0x82, 0x07, 0x00, 0x01, 0x00, 0x00, 0x01, b'a', 0xc0],
        &[0x81],
    );
}

#[test]
fn v5_subscribe_without_filters_is_a_protocol_error() {
    v5_rejects(&[0x82, 0x03, 0x00, 0x01, 0x00], &[0x82, 0x81]);
}

#[test]
fn malformed_connect_is_refused() {
    let b = start_broker();
    let mut observer = Client::v5(b.mqtt, "observer");
    // 5.0 CONNECT with the reserved flag bit set [MQTT-3.1.2-3].
    let mut c = Client::open(b.mqtt, V5);
    c.send_raw(&[
        0x10, 0x0e, 0x00, 0x04, b'M', b'Q', b'T', b'T', 0x05, 0x03, 0x00, 0x3c, 0x00, 0x00, 0x01,
        b'z',
    ]);
    match c.next(WAIT) {
        Next::Packet(Packet::ConnAck(a)) => assert_eq!(a.code, 0x81, "{a:?}"),
        Next::Closed => {}
        other => panic!("expected CONNACK 0x81 or a close, got {other:?}"),
    }
    c.wait_closed(WAIT);
    observer.ping();
}

#[test]
fn garbage_instead_of_connect_is_closed() {
    let b = start_broker();
    let mut observer = Client::v311(b.mqtt, "observer");
    let mut c = Client::open(b.mqtt, V311);
    c.send_raw(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n");
    assert!(matches!(
        c.next(WAIT),
        Next::Closed | Next::Packet(Packet::ConnAck(_))
    ));
    c.wait_closed(WAIT);
    observer.ping();
    assert_eq!(b.metrics().connections, 1);
}

#[test]
fn bad_input_leaves_sessions_and_retained_messages_alone() {
    let b = start_broker();
    let mut publ = Client::v5(b.mqtt, "pub");
    publ.publish_retained("keep/r", "kept", QoS::AtLeastOnce);
    let (mut sub, _) = Client::connect(b.mqtt, V5, "persistent", |c| {
        c.clean_start = false;
        c.properties.session_expiry_interval = Some(60);
    });
    sub.sub("keep/q", QoS::AtLeastOnce);
    let _ = sub.recv_publish_within(QUIET);
    sub.disconnect();
    // A burst of bad connections.
    for bytes in [SUBSCRIBE_BAD_FLAGS, FIVE_BYTE_REMAINING_LENGTH] {
        let mut bad = Client::v5(b.mqtt, "bad");
        bad.send_raw(bytes);
        bad.wait_closed(WAIT);
    }
    publ.publish("keep/q", "queued", QoS::AtLeastOnce);
    let (mut sub, ack) = Client::connect(b.mqtt, V5, "persistent", |c| {
        c.clean_start = false;
        c.properties.session_expiry_interval = Some(60);
    });
    assert!(ack.session_present);
    assert_eq!(&sub.recv_publish_acked().payload[..], b"queued");
    let mut late = Client::v5(b.mqtt, "late");
    late.sub("keep/r", QoS::AtMostOnce);
    assert_eq!(&late.recv_publish().payload[..], b"kept");
}
