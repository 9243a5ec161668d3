//! Unit tests for the property rules.

use bytes::Bytes;

use super::*;

/// Reads `list` (property bytes without the length prefix) in `ctx`.
fn read(ctx: PropCtx, list: &[u8]) -> Result<Properties, DecodeError> {
    let mut buf = Vec::new();
    put_vbi(&mut buf, list.len());
    buf.extend_from_slice(list);
    let mut c = Cursor::new(Bytes::from(buf));
    let p = read_properties(&mut c, ctx)?;
    assert!(c.is_empty());
    Ok(p)
}

fn is_protocol<T: std::fmt::Debug>(r: Result<T, DecodeError>) -> bool {
    matches!(r, Err(DecodeError::Protocol(_)))
}

fn is_malformed<T: std::fmt::Debug>(r: Result<T, DecodeError>) -> bool {
    matches!(r, Err(DecodeError::Malformed(_)))
}

#[test]
fn unknown_identifier_is_malformed() {
    assert!(is_malformed(read(PropCtx::Connect, &[0x04, 0])));
    assert!(is_malformed(read(PropCtx::Connect, &[0x7f, 0])));
    // A two-byte identifier (0x80 0x01 = 128) is no property either.
    assert!(is_malformed(read(PropCtx::Connect, &[0x80, 0x01, 0])));
}

#[test]
fn property_not_allowed_is_protocol_error() {
    assert!(is_protocol(read(
        PropCtx::Connect,
        &[TOPIC_ALIAS as u8, 0, 1]
    )));
    assert!(is_protocol(read(
        PropCtx::Connect,
        &[WILL_DELAY_INTERVAL as u8, 0, 0, 0, 1]
    )));
    assert!(read(PropCtx::Will, &[WILL_DELAY_INTERVAL as u8, 0, 0, 0, 1]).is_ok());
    assert!(is_protocol(read(
        PropCtx::Will,
        &[SESSION_EXPIRY_INTERVAL as u8, 0, 0, 0, 1]
    )));
    assert!(is_protocol(read(
        PropCtx::Unsubscribe,
        &[REASON_STRING as u8, 0, 0]
    )));
    assert!(is_protocol(read(
        PropCtx::Subscribe,
        &[TOPIC_ALIAS as u8, 0, 1]
    )));
    assert!(is_protocol(read(
        PropCtx::PubAck,
        &[SERVER_REFERENCE as u8, 0, 0]
    )));
    assert!(is_protocol(read(
        PropCtx::Auth,
        &[SESSION_EXPIRY_INTERVAL as u8, 0, 0, 0, 1]
    )));
}

#[test]
fn duplicates_are_protocol_errors_except_repeatable_ones() {
    let twice = [REASON_STRING as u8, 0, 0, REASON_STRING as u8, 0, 0];
    assert!(is_protocol(read(PropCtx::PubAck, &twice)));
    let user = [
        USER_PROPERTY as u8,
        0,
        1,
        b'k',
        0,
        0,
        USER_PROPERTY as u8,
        0,
        1,
        b'k',
        0,
        0,
    ];
    let p = read(PropCtx::PubAck, &user).unwrap();
    assert_eq!(p.user_properties, vec![("k".into(), "".into()); 2]);
    let ids = [
        SUBSCRIPTION_IDENTIFIER as u8,
        1,
        SUBSCRIPTION_IDENTIFIER as u8,
        0x80,
        0x01,
    ];
    let p = read(PropCtx::Publish, &ids).unwrap();
    assert_eq!(p.subscription_identifiers, vec![1, 128]);
    // [MQTT-3.8.2.1.2] only one Subscription Identifier in SUBSCRIBE.
    assert!(is_protocol(read(PropCtx::Subscribe, &ids)));
}

#[test]
fn zero_values_are_protocol_errors() {
    assert!(is_protocol(read(
        PropCtx::Connect,
        &[RECEIVE_MAXIMUM as u8, 0, 0]
    )));
    assert!(is_protocol(read(
        PropCtx::Connect,
        &[MAXIMUM_PACKET_SIZE as u8, 0, 0, 0, 0]
    )));
    assert!(is_protocol(read(
        PropCtx::Publish,
        &[TOPIC_ALIAS as u8, 0, 0]
    )));
    assert!(is_protocol(read(
        PropCtx::Subscribe,
        &[SUBSCRIPTION_IDENTIFIER as u8, 0]
    )));
    assert!(read(PropCtx::Connect, &[RECEIVE_MAXIMUM as u8, 0, 1]).is_ok());
}

#[test]
fn booleans_other_than_0_or_1_are_protocol_errors() {
    let cases = [
        (PropCtx::Publish, PAYLOAD_FORMAT_INDICATOR),
        (PropCtx::Connect, REQUEST_PROBLEM_INFORMATION),
        (PropCtx::Connect, REQUEST_RESPONSE_INFORMATION),
        (PropCtx::ConnAck, MAXIMUM_QOS),
        (PropCtx::ConnAck, RETAIN_AVAILABLE),
        (PropCtx::ConnAck, WILDCARD_SUBSCRIPTION_AVAILABLE),
        (PropCtx::ConnAck, SUBSCRIPTION_IDENTIFIER_AVAILABLE),
        (PropCtx::ConnAck, SHARED_SUBSCRIPTION_AVAILABLE),
    ];
    for (ctx, id) in cases {
        assert!(read(ctx, &[id as u8, 1]).is_ok(), "{id:#x}");
        assert!(is_protocol(read(ctx, &[id as u8, 2])), "{id:#x}");
    }
}

#[test]
fn lengths_past_the_end_are_malformed() {
    // Property length 5 with only 2 bytes following.
    let mut c = Cursor::new(Bytes::from_static(&[5, REASON_STRING as u8, 0]));
    assert!(is_malformed(read_properties(&mut c, PropCtx::PubAck)));
    // A string whose length runs past the property list.
    assert!(is_malformed(read(
        PropCtx::PubAck,
        &[REASON_STRING as u8, 0, 5, b'a']
    )));
    // A value cut short.
    assert!(is_malformed(read(
        PropCtx::Publish,
        &[MESSAGE_EXPIRY_INTERVAL as u8, 0, 0]
    )));
    // A property length of five bytes.
    let mut c = Cursor::new(Bytes::from_static(&[0x80, 0x80, 0x80, 0x80, 0x01]));
    assert!(is_malformed(read_properties(&mut c, PropCtx::PubAck)));
}

#[test]
fn response_topic_must_not_contain_wildcards() {
    let r = read(
        PropCtx::Publish,
        &[RESPONSE_TOPIC as u8, 0, 3, b'a', b'/', b'+'],
    );
    assert!(matches!(r, Err(DecodeError::Topic(_))));
}

#[test]
fn strings_are_checked() {
    let r = read(PropCtx::PubAck, &[REASON_STRING as u8, 0, 1, 0]);
    assert!(is_malformed(r));
    let r = read(PropCtx::PubAck, &[REASON_STRING as u8, 0, 1, 0xff]);
    assert!(is_malformed(r));
}

#[test]
fn connack_properties_round_trip() {
    let p = Properties {
        session_expiry_interval: Some(30),
        assigned_client_identifier: Some("auto-1".into()),
        server_keep_alive: Some(60),
        authentication_method: Some("SCRAM".into()),
        authentication_data: Some(Bytes::from_static(b"\x00\x01")),
        response_information: Some("r/".into()),
        server_reference: Some("other:1883".into()),
        reason_string: Some("ok".into()),
        receive_maximum: Some(10),
        topic_alias_maximum: Some(5),
        maximum_qos: Some(1),
        retain_available: Some(0),
        user_properties: vec![("a".into(), "b".into()), ("a".into(), "c".into())],
        maximum_packet_size: Some(1 << 20),
        wildcard_subscription_available: Some(1),
        subscription_identifier_available: Some(0),
        shared_subscription_available: Some(1),
        ..Properties::default()
    };
    let mut buf = Vec::new();
    put_properties(&mut buf, &p);
    assert_eq!(buf.len(), properties_len(&p));
    let mut c = Cursor::new(Bytes::from(buf));
    assert_eq!(read_properties(&mut c, PropCtx::ConnAck).unwrap(), p);
    assert!(c.is_empty());
}

#[test]
fn empty_properties_are_one_zero_byte() {
    let mut buf = Vec::new();
    put_properties(&mut buf, &Properties::default());
    assert_eq!(buf, [0]);
    assert_eq!(properties_len(&Properties::default()), 1);
}
