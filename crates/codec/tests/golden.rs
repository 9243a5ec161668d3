//! Known encodings, byte for byte: what real clients and brokers put on the wire.

use ballast_codec::*;
use bytes::Bytes;

/// Decodes `bytes` under `protocol`, checks `expected`, and that encoding gives the same bytes.
fn golden(bytes: &[u8], protocol: Protocol, expected: Packet) {
    let header = check(bytes, 1 << 20).unwrap().unwrap();
    assert_eq!(header.total_len(), bytes.len());
    let packet = decode(Bytes::copy_from_slice(bytes), protocol).unwrap();
    assert_eq!(packet, expected);
    let mut out = Vec::new();
    packet.encode(protocol, &mut out);
    assert_eq!(out, bytes);
    assert_eq!(packet.encoded_len(protocol), bytes.len());
}

/// `mosquitto_pub -V mqttv311 -i mosq-pub-1 -t test -m hello`: CONNECT (clean session,
/// keep alive 60), PUBLISH at QoS 0, DISCONNECT.
#[test]
fn mosquitto_pub_v311_session() {
    let connect = b"\x10\x16\x00\x04MQTT\x04\x02\x00\x3c\x00\x0amosq-pub-1";
    golden(
        connect,
        Protocol::V3_1_1,
        Packet::Connect(Connect {
            protocol: Protocol::V3_1_1,
            clean_start: true,
            keep_alive: 60,
            client_id: "mosq-pub-1".into(),
            will: None,
            username: None,
            password: None,
            properties: Properties::default(),
        }),
    );
    golden(
        b"\x20\x02\x00\x00",
        Protocol::V3_1_1,
        Packet::ConnAck(ConnAck {
            session_present: false,
            code: 0,
            properties: Properties::default(),
        }),
    );
    golden(
        b"\x30\x0b\x00\x04testhello",
        Protocol::V3_1_1,
        Packet::Publish(Publish {
            dup: false,
            qos: QoS::AtMostOnce,
            retain: false,
            topic: "test".into(),
            packet_id: 0,
            payload: Bytes::from_static(b"hello"),
            properties: Properties::default(),
        }),
    );
    golden(
        b"\xe0\x00",
        Protocol::V3_1_1,
        Packet::Disconnect(Disconnect::default()),
    );
}

/// A 3.1.1 CONNECT with will, user name and password (all flags but the reserved one).
#[test]
fn v311_connect_with_everything() {
    let bytes = b"\x10\x28\x00\x04MQTT\x04\xee\x00\x0a\x00\x03cid\x00\x05a/b/c\x00\x04gone\x00\x04user\x00\x04pass";
    golden(
        bytes,
        Protocol::V3_1_1,
        Packet::Connect(Connect {
            protocol: Protocol::V3_1_1,
            clean_start: true,
            keep_alive: 10,
            client_id: "cid".into(),
            will: Some(Will {
                topic: "a/b/c".into(),
                payload: Bytes::from_static(b"gone"),
                qos: QoS::AtLeastOnce,
                retain: true,
                properties: Properties::default(),
            }),
            username: Some("user".into()),
            password: Some(Bytes::from_static(b"pass")),
            properties: Properties::default(),
        }),
    );
}

/// A 5.0 CONNACK as a broker answers a client that sent an empty client id: assigned client
/// identifier, receive maximum 20, topic alias maximum 10, no wildcard subscriptions.
#[test]
fn v5_connack_with_properties() {
    let bytes = b"\x20\x14\x00\x00\x11\x12\x00\x06auto-1\x21\x00\x14\x22\x00\x0a\x28\x00";
    golden(
        bytes,
        Protocol::V5,
        Packet::ConnAck(ConnAck {
            session_present: false,
            code: 0,
            properties: Properties {
                assigned_client_identifier: Some("auto-1".into()),
                receive_maximum: Some(20),
                topic_alias_maximum: Some(10),
                wildcard_subscription_available: Some(0),
                ..Properties::default()
            },
        }),
    );
    // The same properties in another order decode to the same packet.
    let reordered = b"\x20\x14\x00\x00\x11\x28\x00\x22\x00\x0a\x21\x00\x14\x12\x00\x06auto-1";
    assert_eq!(
        decode(Bytes::from_static(reordered), Protocol::V5),
        decode(Bytes::copy_from_slice(bytes), Protocol::V5)
    );
}

/// A 5.0 CONNECT with session expiry 300 and receive maximum 100 (as paho sends it), then a
/// QoS 1 PUBLISH with a message expiry and a user property, and its PUBACK in the short form.
#[test]
fn v5_connect_publish_puback() {
    let connect =
        b"\x10\x18\x00\x04MQTT\x05\x02\x00\x3c\x08\x11\x00\x00\x01\x2c\x21\x00\x64\x00\x03c-1";
    golden(
        connect,
        Protocol::V5,
        Packet::Connect(Connect {
            protocol: Protocol::V5,
            clean_start: true,
            keep_alive: 60,
            client_id: "c-1".into(),
            will: None,
            username: None,
            password: None,
            properties: Properties {
                session_expiry_interval: Some(300),
                receive_maximum: Some(100),
                ..Properties::default()
            },
        }),
    );
    let publish = b"\x32\x16\x00\x03a/b\x00\x07\x0c\x02\x00\x00\x00\x3c\x26\x00\x01k\x00\x01vhi";
    golden(
        publish,
        Protocol::V5,
        Packet::Publish(Publish {
            dup: false,
            qos: QoS::AtLeastOnce,
            retain: false,
            topic: "a/b".into(),
            packet_id: 7,
            payload: Bytes::from_static(b"hi"),
            properties: Properties {
                message_expiry_interval: Some(60),
                user_properties: vec![("k".into(), "v".into())],
                ..Properties::default()
            },
        }),
    );
    golden(
        b"\x40\x02\x00\x07",
        Protocol::V5,
        Packet::PubAck(PubAck {
            packet_id: 7,
            code: 0,
            properties: Properties::default(),
        }),
    );
}

/// A 5.0 SUBSCRIBE with a subscription identifier and two filters, and its SUBACK.
#[test]
fn v5_subscribe_suback() {
    let subscribe = b"\x82\x13\x00\x01\x02\x0b\x01\x00\x03a/#\x01\x00\x05$SYS/\x26";
    golden(
        subscribe,
        Protocol::V5,
        Packet::Subscribe(Subscribe {
            packet_id: 1,
            filters: vec![
                SubscribeFilter {
                    filter: "a/#".into(),
                    options: SubOptions {
                        qos: QoS::AtLeastOnce,
                        ..SubOptions::default()
                    },
                },
                SubscribeFilter {
                    filter: "$SYS/".into(),
                    options: SubOptions {
                        qos: QoS::ExactlyOnce,
                        no_local: true,
                        retain_as_published: false,
                        retain_handling: 2,
                    },
                },
            ],
            properties: Properties {
                subscription_identifiers: vec![1],
                ..Properties::default()
            },
        }),
    );
    golden(
        b"\x90\x05\x00\x01\x00\x01\x02",
        Protocol::V5,
        Packet::SubAck(SubAck {
            packet_id: 1,
            codes: vec![1, 2],
            properties: Properties::default(),
        }),
    );
}
