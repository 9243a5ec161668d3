//! Unit tests for decoding CONNECT and CONNACK.

use super::tests::{connect_body, dec, frame, malformed, protocol_err, topic_err, V3, V5};
use super::*;

// ---- CONNECT ----

#[test]
fn connect_decodes_whatever_the_connection_protocol() {
    for p in [Protocol::V3_1, V3, V5] {
        let Packet::Connect(c) =
            dec(0x10, &connect_body(b"MQTT", 4, 0x02, &[0, 1, b'c']), p).unwrap()
        else {
            panic!("not a CONNECT")
        };
        assert_eq!((c.protocol, c.clean_start, c.keep_alive), (V3, true, 60));
        assert_eq!(c.client_id, "c");
    }
    let Packet::Connect(c) = dec(0x10, &connect_body(b"MQIsdp", 3, 0, &[0, 1, b'c']), V5).unwrap()
    else {
        panic!("not a CONNECT")
    };
    assert_eq!(c.protocol, Protocol::V3_1);
    let Packet::Connect(c) = dec(0x10, &connect_body(b"MQTT", 5, 0, &[0, 0, 0]), V3).unwrap()
    else {
        panic!("not a CONNECT")
    };
    assert_eq!(c.protocol, V5);
}

#[test]
fn connect_unsupported_protocol() {
    // Whatever follows the level is not looked at.
    for (name, level) in [
        (&b"MQTT"[..], 3),
        (b"MQTT", 6),
        (b"MQIsdp", 4),
        (b"MQTX", 4),
        (b"", 4),
    ] {
        let body = connect_body(name, level, 0xff, &[0xff, 0xff, 0xff]);
        assert_eq!(dec(0x10, &body, V3), Err(DecodeError::UnsupportedProtocol));
    }
    // Too short to hold a name and a level: malformed, not unsupported.
    assert!(malformed(dec(0x10, &[0, 4, b'M', b'Q', b'T', b'T'], V3)));
    assert!(malformed(dec(0x10, &[0, 9, b'M'], V3)));
}

#[test]
fn connect_reserved_flag() {
    assert!(malformed(dec(
        0x10,
        &connect_body(b"MQTT", 4, 0x03, &[0, 0]),
        V3
    )));
    assert!(malformed(dec(
        0x10,
        &connect_body(b"MQTT", 5, 0x03, &[0, 0, 0]),
        V5
    )));
}

#[test]
fn connect_will_flag_rules() {
    // Will QoS 1 without the will flag.
    assert!(malformed(dec(
        0x10,
        &connect_body(b"MQTT", 4, 0x08, &[0, 0]),
        V3
    )));
    // Will retain without the will flag.
    assert!(malformed(dec(
        0x10,
        &connect_body(b"MQTT", 4, 0x20, &[0, 0]),
        V3
    )));
    // Will QoS 3.
    let will = [0, 0, 0, 1, b't', 0, 0];
    assert!(malformed(dec(
        0x10,
        &connect_body(b"MQTT", 4, 0x1c, &will),
        V3
    )));
    // Will QoS 2 with retain is fine.
    let Packet::Connect(c) = dec(0x10, &connect_body(b"MQTT", 4, 0x34, &will), V3).unwrap() else {
        panic!()
    };
    let w = c.will.unwrap();
    assert_eq!(
        (w.topic.as_str(), w.qos, w.retain),
        ("t", QoS::ExactlyOnce, true)
    );
}

#[test]
fn connect_will_topic_must_be_a_topic_name() {
    let will = [0, 0, 0, 1, b'#', 0, 0];
    assert!(topic_err(dec(
        0x10,
        &connect_body(b"MQTT", 4, 0x04, &will),
        V3
    )));
    let will = [0, 0, 0, 0, 0, 0];
    assert!(topic_err(dec(
        0x10,
        &connect_body(b"MQTT", 4, 0x04, &will),
        V3
    )));
}

#[test]
fn connect_password_without_username() {
    let rest = [0, 0, 0, 2, b'p', b'w'];
    assert!(malformed(dec(
        0x10,
        &connect_body(b"MQTT", 4, 0x40, &rest),
        V3
    )));
    assert!(malformed(dec(
        0x10,
        &connect_body(b"MQIsdp", 3, 0x40, &rest),
        V3
    )));
    // Allowed in 5.0 (after the empty property list).
    let rest5 = [0, 0, 0, 0, 2, b'p', b'w'];
    let Packet::Connect(c) = dec(0x10, &connect_body(b"MQTT", 5, 0x40, &rest5), V5).unwrap() else {
        panic!()
    };
    assert_eq!(
        (c.username, c.password.as_deref()),
        (None, Some(&b"pw"[..]))
    );
}

#[test]
fn connect_client_id_string_rules() {
    assert!(malformed(dec(
        0x10,
        &connect_body(b"MQTT", 4, 0, &[0, 1, 0]),
        V3
    )));
    assert!(malformed(dec(
        0x10,
        &connect_body(b"MQTT", 4, 0, &[0, 1, 0xc3]),
        V3
    )));
    assert!(malformed(dec(
        0x10,
        &connect_body(b"MQTT", 4, 0, &[0, 5, b'a']),
        V3
    )));
    // Missing username announced by the flags.
    assert!(malformed(dec(
        0x10,
        &connect_body(b"MQTT", 4, 0x80, &[0, 0]),
        V3
    )));
}

#[test]
fn connect_trailing_bytes() {
    assert!(malformed(dec(
        0x10,
        &connect_body(b"MQTT", 4, 0, &[0, 0, 0]),
        V3
    )));
}

#[test]
fn connect_properties_only_in_v5() {
    // The same bytes are a property length in 5.0 but trailing garbage in 3.1.1.
    let v5 = connect_body(b"MQTT", 5, 0, &[3, 0x21, 0, 10, 0, 0]);
    let Packet::Connect(c) = dec(0x10, &v5, V5).unwrap() else {
        panic!()
    };
    assert_eq!(c.properties.receive_maximum, Some(10));
    let v3 = connect_body(b"MQTT", 4, 0, &[3, 0x21, 0, 10, 0, 0]);
    assert!(malformed(dec(0x10, &v3, V3)));
    // Will properties are checked against the will's own list.
    let will = [0, 0, 0, 2, 0x11, 0, 0, 1, b't', 0, 0];
    assert!(protocol_err(dec(
        0x10,
        &connect_body(b"MQTT", 5, 0x04, &will),
        V5
    )));
}

#[test]
fn connect_auth_data_needs_a_method() {
    let body = connect_body(b"MQTT", 5, 0, &[4, 0x16, 0, 1, 9, 0, 0]);
    assert!(protocol_err(dec(0x10, &body, V5)));
}

// ---- CONNACK ----

#[test]
fn connack_forms() {
    let Packet::ConnAck(a) = dec(0x20, &[1, 0], V3).unwrap() else {
        panic!()
    };
    assert!(a.session_present && a.code == 0);
    assert!(malformed(dec(0x20, &[2, 0], V3)));
    assert!(malformed(dec(0x20, &[0, 0, 0], V3)));
    // 5.0 always has a property length.
    assert!(malformed(dec(0x20, &[0, 0], V5)));
    assert!(dec(0x20, &[0, 0x80, 0], V5).is_ok());
    assert!(protocol_err(dec(0x20, &[0, 0, 3, 0x23, 0, 1], V5)));
}

#[test]
fn connect_payloads_are_slices_of_the_frame() {
    // Will payload "wp", user "u", password "pw".
    let rest = [
        0, 0, 0, 1, b't', 0, 2, b'w', b'p', 0, 1, b'u', 0, 2, b'p', b'w',
    ];
    let f = frame(0x10, &connect_body(b"MQTT", 4, 0xc4, &rest));
    let Packet::Connect(c) = decode(f.clone(), V3).unwrap() else {
        panic!()
    };
    assert_eq!(c.password.unwrap().as_ptr(), f[f.len() - 2..].as_ptr());
    assert_eq!(c.will.unwrap().payload.as_ptr(), f[f.len() - 9..].as_ptr());
    assert_eq!(c.username.as_deref(), Some("u"));
}
