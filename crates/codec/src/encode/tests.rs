//! Unit tests for encoding: exact bytes for each packet type and protocol, the short forms,
//! and what is dropped before 5.0.

use bytes::Bytes;

use crate::*;

const V3: Protocol = Protocol::V3_1_1;
const V5: Protocol = Protocol::V5;

/// Encodes `p`, checks `encoded_len`, and returns the bytes.
fn enc(p: &Packet, protocol: Protocol) -> Vec<u8> {
    let mut out = Vec::new();
    p.encode(protocol, &mut out);
    assert_eq!(out.len(), p.encoded_len(protocol), "encoded_len of {p:?}");
    out
}

fn reason(s: &str) -> Properties {
    Properties {
        reason_string: Some(s.into()),
        ..Properties::default()
    }
}

fn ack(code: u8, properties: Properties) -> PubAck {
    PubAck {
        packet_id: 0x0102,
        code,
        properties,
    }
}

#[test]
fn connect_uses_its_own_protocol() {
    let c = Connect {
        protocol: Protocol::V3_1,
        clean_start: true,
        keep_alive: 10,
        client_id: "c".into(),
        will: Some(Will {
            topic: "w".into(),
            payload: Bytes::from_static(b"x"),
            qos: QoS::ExactlyOnce,
            retain: true,
            properties: Properties::default(),
        }),
        username: Some("u".into()),
        password: Some(Bytes::from_static(b"p")),
        properties: Properties::default(),
    };
    let expected = [
        0x10, 27, 0, 6, b'M', b'Q', b'I', b's', b'd', b'p', 3, 0xf6, 0, 10, 0, 1, b'c', 0, 1, b'w',
        0, 1, b'x', 0, 1, b'u', 0, 1, b'p',
    ];
    // The protocol argument is ignored for CONNECT.
    assert_eq!(enc(&Packet::Connect(c.clone()), V5), expected);
    let c5 = Connect {
        protocol: V5,
        will: None,
        username: None,
        password: None,
        ..c
    };
    assert_eq!(
        enc(&Packet::Connect(c5), V3),
        [0x10, 14, 0, 4, b'M', b'Q', b'T', b'T', 5, 0x02, 0, 10, 0, 0, 1, b'c']
    );
}

#[test]
fn connack_v3_drops_properties() {
    let a = Packet::ConnAck(ConnAck {
        session_present: true,
        code: 0,
        properties: reason("r"),
    });
    assert_eq!(enc(&a, V3), [0x20, 2, 1, 0]);
    assert_eq!(enc(&a, V5), [0x20, 7, 1, 0, 4, 0x1f, 0, 1, b'r']);
}

#[test]
fn publish_header_flags_and_packet_id() {
    let mut p = Publish {
        dup: false,
        qos: QoS::AtMostOnce,
        retain: true,
        topic: "t".into(),
        packet_id: 0,
        payload: Bytes::from_static(b"hi"),
        properties: Properties::default(),
    };
    assert_eq!(
        enc(&Packet::Publish(p.clone()), V3),
        [0x31, 5, 0, 1, b't', b'h', b'i']
    );
    assert_eq!(
        enc(&Packet::Publish(p.clone()), V5),
        [0x31, 6, 0, 1, b't', 0, b'h', b'i']
    );
    p.dup = true;
    p.qos = QoS::ExactlyOnce;
    p.retain = false;
    p.packet_id = 7;
    assert_eq!(
        enc(&Packet::Publish(p), V3),
        [0x3c, 7, 0, 1, b't', 0, 7, b'h', b'i']
    );
}

#[test]
fn puback_family_forms() {
    let types = [
        (0x40, Packet::PubAck as fn(PubAck) -> Packet),
        (0x50, Packet::PubRec),
        (0x62, Packet::PubRel),
        (0x70, Packet::PubComp),
    ];
    for (first, make) in types {
        // 3.1.1: the packet id only, whatever the code and properties.
        assert_eq!(enc(&make(ack(0x80, reason("r"))), V3), [first, 2, 1, 2]);
        // 5.0: shortest form.
        assert_eq!(
            enc(&make(ack(0, Properties::default())), V5),
            [first, 2, 1, 2]
        );
        assert_eq!(
            enc(&make(ack(0x10, Properties::default())), V5),
            [first, 3, 1, 2, 0x10]
        );
        assert_eq!(
            enc(&make(ack(0, reason("r"))), V5),
            [first, 8, 1, 2, 0, 4, 0x1f, 0, 1, b'r']
        );
    }
}

#[test]
fn subscribe_options_per_protocol() {
    let s = Packet::Subscribe(Subscribe {
        packet_id: 1,
        filters: vec![SubscribeFilter {
            filter: "a/#".into(),
            options: SubOptions {
                qos: QoS::AtLeastOnce,
                no_local: true,
                retain_as_published: true,
                retain_handling: 2,
            },
        }],
        properties: Properties {
            subscription_identifiers: vec![300],
            ..Properties::default()
        },
    });
    assert_eq!(enc(&s, V3), [0x82, 8, 0, 1, 0, 3, b'a', b'/', b'#', 0x01]);
    assert_eq!(
        enc(&s, V5),
        [0x82, 12, 0, 1, 3, 0x0b, 0xac, 0x02, 0, 3, b'a', b'/', b'#', 0x2d]
    );
}

#[test]
fn suback_and_unsuback() {
    let s = Packet::SubAck(SubAck {
        packet_id: 1,
        codes: vec![0, 0x80],
        properties: Properties::default(),
    });
    assert_eq!(enc(&s, V3), [0x90, 4, 0, 1, 0, 0x80]);
    assert_eq!(enc(&s, V5), [0x90, 5, 0, 1, 0, 0, 0x80]);
    let u = Packet::UnsubAck(UnsubAck {
        packet_id: 1,
        codes: vec![0x11],
        properties: Properties::default(),
    });
    // 3.1.1 UNSUBACK has no codes.
    assert_eq!(enc(&u, V3), [0xb0, 2, 0, 1]);
    assert_eq!(enc(&u, V5), [0xb0, 4, 0, 1, 0, 0x11]);
}

#[test]
fn unsubscribe_and_pings() {
    let u = Packet::Unsubscribe(Unsubscribe {
        packet_id: 9,
        filters: vec!["a".into(), "+".into()],
        properties: Properties::default(),
    });
    assert_eq!(enc(&u, V3), [0xa2, 8, 0, 9, 0, 1, b'a', 0, 1, b'+']);
    assert_eq!(enc(&u, V5), [0xa2, 9, 0, 9, 0, 0, 1, b'a', 0, 1, b'+']);
    assert_eq!(enc(&Packet::PingReq, V3), [0xc0, 0]);
    assert_eq!(enc(&Packet::PingResp, V5), [0xd0, 0]);
}

#[test]
fn disconnect_and_auth_forms() {
    let d = |code, properties| Packet::Disconnect(Disconnect { code, properties });
    assert_eq!(enc(&d(0x8e, reason("r")), V3), [0xe0, 0]);
    assert_eq!(enc(&d(0, Properties::default()), V5), [0xe0, 0]);
    assert_eq!(enc(&d(4, Properties::default()), V5), [0xe0, 1, 4]);
    assert_eq!(
        enc(&d(0, reason("r")), V5),
        [0xe0, 6, 0, 4, 0x1f, 0, 1, b'r']
    );
    let a = |code| {
        Packet::Auth(Auth {
            code,
            properties: Properties::default(),
        })
    };
    assert_eq!(enc(&a(0), V5), [0xf0, 0]);
    assert_eq!(enc(&a(0x18), V5), [0xf0, 1, 0x18]);
}

#[test]
fn multi_byte_remaining_length() {
    let p = Packet::Publish(Publish {
        dup: false,
        qos: QoS::AtMostOnce,
        retain: false,
        topic: "t".into(),
        packet_id: 0,
        payload: Bytes::from(vec![7; 200]),
        properties: Properties::default(),
    });
    let out = enc(&p, V3);
    // 3 + 200 = 203 = 0xcb 0x01.
    assert_eq!(&out[..5], [0x30, 0xcb, 0x01, 0, 1]);
    assert_eq!(decode(Bytes::from(out), V3), Ok(p));
}
