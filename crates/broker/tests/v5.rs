//! MQTT 5 features: message expiry, topic aliases, subscription identifiers, no-local,
//! request/response, user properties, maximum packet size, reason codes on negative acks.

mod common;

use std::collections::HashMap;
use std::time::Duration;

use bytes::Bytes;
use common::*;

fn persistent(expiry: u32) -> impl Fn(&mut Connect) {
    move |c: &mut Connect| {
        c.clean_start = false;
        c.properties.session_expiry_interval = Some(expiry);
    }
}

fn publish_with(topic: &str, payload: &str, qos: QoS, props: Properties) -> Publish {
    Publish {
        properties: props,
        ..publish_packet(topic, payload, qos, false)
    }
}

#[test]
fn expired_message_is_not_delivered_to_a_returning_session() {
    let b = start_broker();
    let (mut sub, _) = Client::connect(b.mqtt, V5, "expiring", persistent(60));
    sub.sub("exp/t", QoS::AtLeastOnce);
    sub.disconnect();
    let mut publ = Client::v5(b.mqtt, "pub");
    let props = Properties {
        message_expiry_interval: Some(1),
        ..Properties::default()
    };
    publ.publish_packet(publish_with("exp/t", "stale", QoS::AtLeastOnce, props));
    publ.publish("exp/t", "fresh", QoS::AtLeastOnce);
    // Message expiry is the behaviour under test: let 2 s pass.
    std::thread::sleep(Duration::from_secs(2));
    let (mut sub, ack) = Client::connect(b.mqtt, V5, "expiring", persistent(60));
    assert!(ack.session_present);
    let p = sub.recv_publish_acked();
    assert_eq!(&p.payload[..], b"fresh", "the expired message was dropped");
    sub.expect_no_publish(QUIET);
    assert!(
        wait_for(WAIT, || b.metrics().messages_expired >= 1),
        "messages_expired: {:?}",
        b.metrics()
    );
}

#[test]
fn delivered_message_carries_the_remaining_expiry_interval() {
    let b = start_broker();
    let (mut sub, _) = Client::connect(b.mqtt, V5, "remaining", persistent(60));
    sub.sub("exp/r", QoS::AtLeastOnce);
    sub.disconnect();
    let mut publ = Client::v5(b.mqtt, "pub");
    let props = Properties {
        message_expiry_interval: Some(10),
        ..Properties::default()
    };
    publ.publish_packet(publish_with("exp/r", "aging", QoS::AtLeastOnce, props));
    // The waiting time is what is measured.
    std::thread::sleep(Duration::from_millis(2100));
    let (mut sub, _) = Client::connect(b.mqtt, V5, "remaining", persistent(60));
    let p = sub.recv_publish_acked();
    let left = p
        .properties
        .message_expiry_interval
        .expect("Message Expiry Interval is forwarded [MQTT-3.3.2-6]");
    assert!(
        (7..=8).contains(&left),
        "10 s expiry after ~2.1 s offline, delivered with {left}"
    );

    // A live delivery keeps (at most) the published interval.
    let (mut live, _) = Client::connect(b.mqtt, V5, "live", |_| {});
    live.sub("exp/l", QoS::AtLeastOnce);
    let props = Properties {
        message_expiry_interval: Some(30),
        ..Properties::default()
    };
    publ.publish_packet(publish_with("exp/l", "now", QoS::AtLeastOnce, props));
    let p = live.recv_publish_acked();
    let left = p
        .properties
        .message_expiry_interval
        .expect("Message Expiry Interval is forwarded");
    assert!((29..=30).contains(&left), "{left}");
}

#[test]
fn client_topic_alias_is_resolved_for_subscribers() {
    let b = start_broker();
    let mut sub = Client::v5(b.mqtt, "sub");
    sub.sub("alias/#", QoS::AtLeastOnce);
    let (mut publ, ack) = Client::connect(b.mqtt, V5, "pub", |_| {});
    assert!(
        ack.properties.topic_alias_maximum.unwrap_or(0) >= 1,
        "the broker accepts topic aliases: {ack:?}"
    );
    let alias = |a: u16| Properties {
        topic_alias: Some(a),
        ..Properties::default()
    };
    publ.publish_packet(publish_with("alias/one", "1", QoS::AtLeastOnce, alias(1)));
    publ.publish_packet(publish_with("", "2", QoS::AtLeastOnce, alias(1)));
    // Remapping the alias to another topic.
    publ.publish_packet(publish_with("alias/two", "3", QoS::AtLeastOnce, alias(1)));
    publ.publish_packet(publish_with("", "4", QoS::AtLeastOnce, alias(1)));
    let got: Vec<(String, String, Option<u16>)> = collect(&mut sub, 4)
        .into_iter()
        .map(|p| {
            (
                p.topic.clone(),
                String::from_utf8_lossy(&p.payload).into_owned(),
                p.properties.topic_alias,
            )
        })
        .collect();
    let expected = [
        ("alias/one", "1"),
        ("alias/one", "2"),
        ("alias/two", "3"),
        ("alias/two", "4"),
    ];
    assert_eq!(got.len(), 4, "{got:?}");
    for ((topic, payload, a), (et, ep)) in got.iter().zip(expected) {
        assert_eq!((topic.as_str(), payload.as_str()), (et, ep));
        assert_eq!(*a, None, "the subscriber allowed no aliases");
    }
}

#[test]
fn topic_alias_above_the_maximum_is_disconnected_with_0x94() {
    let mut cfg = test_config();
    cfg.limits.topic_alias_maximum = 2;
    let b = start_broker_with(cfg);
    let mut other = Client::v5(b.mqtt, "bystander");
    let (mut publ, ack) = Client::connect(b.mqtt, V5, "pub", |_| {});
    assert_eq!(ack.properties.topic_alias_maximum, Some(2));
    let props = Properties {
        topic_alias: Some(3),
        ..Properties::default()
    };
    publ.send(Packet::Publish(publish_with(
        "a/t",
        "x",
        QoS::AtMostOnce,
        props,
    )));
    publ.expect_disconnect(&[0x94]);
    wait_limit(&b, "topic_alias_maximum", 1);
    assert!(
        protocol_errors(&b, 0x94) >= 1,
        "{:?}",
        b.metrics().protocol_errors
    );
    other.ping();
}

#[test]
fn topic_alias_zero_is_disconnected() {
    let b = start_broker();
    let mut publ = Client::v5(b.mqtt, "pub");
    // Hand-made: PUBLISH QoS 0 "a/t", properties [0x23 0x0000], payload "x".
    publ.send_raw(&[
        0x30, 0x0a, 0x00, 0x03, b'a', b'/', b't', 0x03, 0x23, 0x00, 0x00, b'x',
    ]);
    // 5.0 §3.3.2.3.4: Topic Alias 0 is not permitted; "Topic Alias invalid" (0x94), though a
    // generic Protocol Error (0x82) is also a defensible answer.
    publ.expect_disconnect(&[0x94, 0x82]);
}

#[test]
fn empty_topic_with_an_unknown_alias_is_disconnected() {
    let b = start_broker();
    let mut publ = Client::v5(b.mqtt, "pub");
    let props = Properties {
        topic_alias: Some(5),
        ..Properties::default()
    };
    publ.send(Packet::Publish(publish_with(
        "",
        "x",
        QoS::AtMostOnce,
        props,
    )));
    publ.expect_disconnect(&[0x82, 0x94]);
}

#[test]
fn broker_topic_aliases_resolve_to_the_right_topic() {
    let b = start_broker();
    let (mut sub, _) = Client::connect(b.mqtt, V5, "aliased", |c| {
        c.properties.topic_alias_maximum = Some(3)
    });
    sub.sub("ta/#", QoS::AtLeastOnce);
    let mut publ = Client::v5(b.mqtt, "pub");
    let topics = [
        "ta/x", "ta/x", "ta/y", "ta/x", "ta/y", "ta/z", "ta/w", "ta/x", "ta/w",
    ];
    for (i, t) in topics.iter().enumerate() {
        publ.publish(t, format!("{i}"), QoS::AtLeastOnce);
    }
    let mut map: HashMap<u16, String> = HashMap::new();
    let got = collect(&mut sub, topics.len());
    assert_eq!(got.len(), topics.len());
    for (i, p) in got.iter().enumerate() {
        let topic = match p.properties.topic_alias {
            None => {
                assert!(!p.topic.is_empty());
                p.topic.clone()
            }
            Some(a) => {
                assert!(
                    (1..=3).contains(&a),
                    "alias {a} above the client's Topic Alias Maximum 3"
                );
                if p.topic.is_empty() {
                    map.get(&a)
                        .cloned()
                        .unwrap_or_else(|| panic!("alias {a} used before it was set"))
                } else {
                    map.insert(a, p.topic.clone());
                    p.topic.clone()
                }
            }
        };
        assert_eq!(
            (
                topic.as_str(),
                String::from_utf8_lossy(&p.payload).into_owned()
            ),
            (topics[i], format!("{i}"))
        );
    }
}

#[test]
fn no_topic_alias_is_sent_to_a_client_with_topic_alias_maximum_zero() {
    let b = start_broker();
    let (mut sub, _) = Client::connect(b.mqtt, V5, "noalias", |c| {
        c.properties.topic_alias_maximum = Some(0)
    });
    sub.sub("na/#", QoS::AtMostOnce);
    let (mut sub2, _) = Client::connect(b.mqtt, V5, "noalias2", |_| {});
    sub2.sub("na/#", QoS::AtMostOnce);
    let mut publ = Client::v5(b.mqtt, "pub");
    for _ in 0..5 {
        publ.publish("na/same/topic", "x", QoS::AtLeastOnce);
    }
    for c in [&mut sub, &mut sub2] {
        for p in collect(c, 5) {
            assert_eq!(p.properties.topic_alias, None, "[MQTT-3.3.2-7]");
            assert_eq!(p.topic, "na/same/topic");
        }
    }
}

#[test]
fn subscription_identifier_is_delivered() {
    let b = start_broker();
    let mut sub = Client::v5(b.mqtt, "sid");
    let props = Properties {
        subscription_identifiers: vec![268_435_455],
        ..Properties::default()
    };
    sub.subscribe_opts(
        "sid/a",
        SubOptions {
            qos: QoS::AtLeastOnce,
            ..SubOptions::default()
        },
        props,
    );
    sub.sub("sid/b", QoS::AtLeastOnce);
    let mut publ = Client::v5(b.mqtt, "pub");
    publ.publish("sid/a", "a", QoS::AtLeastOnce);
    let p = sub.recv_publish_acked();
    assert_eq!(p.properties.subscription_identifiers, vec![268_435_455]);
    publ.publish("sid/b", "b", QoS::AtLeastOnce);
    let p = sub.recv_publish_acked();
    assert!(
        p.properties.subscription_identifiers.is_empty(),
        "no identifier on that subscription"
    );
}

#[test]
fn connack_advertises_subscription_identifiers_shared_and_wildcards_available() {
    let b = start_broker();
    let (_c, ack) = Client::connect(b.mqtt, V5, "avail", |_| {});
    // Absent means available; if present they must say 1, since the broker supports them.
    for (name, v) in [
        (
            "subscription identifiers",
            ack.properties.subscription_identifier_available,
        ),
        (
            "shared subscriptions",
            ack.properties.shared_subscription_available,
        ),
        ("wildcards", ack.properties.wildcard_subscription_available),
        ("retain", ack.properties.retain_available),
    ] {
        assert!(matches!(v, None | Some(1)), "{name} available: {v:?}");
    }
    assert_eq!(
        ack.properties.maximum_qos, None,
        "QoS 2 is supported, so no Maximum QoS"
    );
}

#[test]
fn no_local_subscription_does_not_receive_own_publishes() {
    let b = start_broker();
    let mut me = Client::v5(b.mqtt, "me");
    me.subscribe_opts(
        "nl/t",
        SubOptions {
            qos: QoS::AtLeastOnce,
            no_local: true,
            ..SubOptions::default()
        },
        Properties::default(),
    );
    let mut other = Client::v5(b.mqtt, "other");
    other.sub("nl/t", QoS::AtLeastOnce);
    me.publish("nl/t", "mine", QoS::AtLeastOnce);
    assert_eq!(&other.recv_publish_acked().payload[..], b"mine");
    me.expect_no_publish(QUIET);
    // Others' messages still arrive.
    other.publish("nl/t", "theirs", QoS::AtLeastOnce);
    assert_eq!(&me.recv_publish_acked().payload[..], b"theirs");
}

#[test]
fn without_no_local_own_publishes_are_received() {
    let b = start_broker();
    let mut me = Client::v5(b.mqtt, "me");
    me.sub("nl/echo", QoS::AtLeastOnce);
    me.publish("nl/echo", "echo", QoS::AtLeastOnce);
    assert_eq!(&me.recv_publish_acked().payload[..], b"echo");
}

#[test]
fn request_response_properties_pass_through_unchanged() {
    let b = start_broker();
    let mut responder = Client::v5(b.mqtt, "responder");
    responder.sub("svc/request", QoS::AtLeastOnce);
    let mut requester = Client::v5(b.mqtt, "requester");
    requester.sub("svc/reply/requester", QoS::AtLeastOnce);

    let corr = Bytes::from_static(&[0, 1, 2, 0xff, 0xfe]);
    let props = Properties {
        response_topic: Some("svc/reply/requester".into()),
        correlation_data: Some(corr.clone()),
        content_type: Some("text/plain; charset=utf-8".into()),
        payload_format_indicator: Some(1),
        ..Properties::default()
    };
    requester.publish_packet(publish_with(
        "svc/request",
        "what time is it",
        QoS::AtLeastOnce,
        props,
    ));
    let req = responder.recv_publish_acked();
    assert_eq!(
        req.properties.response_topic.as_deref(),
        Some("svc/reply/requester")
    );
    assert_eq!(req.properties.correlation_data.as_ref(), Some(&corr));
    assert_eq!(
        req.properties.content_type.as_deref(),
        Some("text/plain; charset=utf-8")
    );
    assert_eq!(req.properties.payload_format_indicator, Some(1));

    let reply = Properties {
        correlation_data: req.properties.correlation_data.clone(),
        ..Properties::default()
    };
    responder.publish_packet(publish_with(
        req.properties.response_topic.as_deref().unwrap(),
        "noon",
        QoS::AtLeastOnce,
        reply,
    ));
    let resp = requester.recv_publish_acked();
    assert_eq!(&resp.payload[..], b"noon");
    assert_eq!(resp.properties.correlation_data.as_ref(), Some(&corr));
}

#[test]
fn user_properties_are_preserved_in_order_with_repeats() {
    let b = start_broker();
    let mut sub = Client::v5(b.mqtt, "sub");
    sub.sub("up/t", QoS::AtLeastOnce);
    let mut publ = Client::v5(b.mqtt, "pub");
    let ups: Vec<(String, String)> = [
        ("b", "1"),
        ("a", "2"),
        ("b", "3"),
        ("", ""),
        ("ключ", "значение"),
    ]
    .iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
    let props = Properties {
        user_properties: ups.clone(),
        ..Properties::default()
    };
    publ.publish_packet(publish_with("up/t", "x", QoS::AtLeastOnce, props));
    let p = sub.recv_publish_acked();
    assert_eq!(p.properties.user_properties, ups);
}

#[test]
fn message_larger_than_the_client_maximum_packet_size_is_not_sent_to_it() {
    let b = start_broker();
    let (mut small, _) = Client::connect(b.mqtt, V5, "small", |c| {
        c.properties.maximum_packet_size = Some(200)
    });
    small.sub("mps/t", QoS::AtLeastOnce);
    let mut big = Client::v5(b.mqtt, "big");
    big.sub("mps/t", QoS::AtLeastOnce);
    let mut publ = Client::v5(b.mqtt, "pub");
    let large = "L".repeat(1000);
    publ.publish("mps/t", &large, QoS::AtLeastOnce);
    publ.publish("mps/t", &large, QoS::AtMostOnce);
    publ.publish("mps/t", "small enough", QoS::AtLeastOnce);
    // The big subscriber gets all three ...
    let got = collect(&mut big, 3);
    assert_eq!(
        got.iter().map(|p| p.payload.len()).collect::<Vec<_>>(),
        [1000, 1000, 12]
    );
    // ... the small one only the last [MQTT-3.1.2-25], and stays connected.
    let p = small.recv_publish_acked();
    assert_eq!(&p.payload[..], b"small enough");
    small.expect_no_publish(QUIET);
    small.ping();
    wait_limit(&b, "client_maximum_packet_size", 2);
}

#[test]
fn negative_suback_has_no_reason_string_when_problem_information_is_off() {
    let mut cfg = test_config();
    cfg.limits.max_topic_levels = 3;
    let b = start_broker_with(cfg);
    let (mut c, _) = Client::connect(b.mqtt, V5, "quiet", |c| {
        c.properties.request_problem_information = Some(0)
    });
    let ack = c.subscribe_many(
        vec![filter("a/b/c/d/e", QoS::AtMostOnce)],
        Properties::default(),
    );
    assert!(ack.codes[0] >= 0x80);
    // [MQTT-3.1.2-29]: no Reason String on anything but PUBLISH, CONNACK and DISCONNECT.
    assert_eq!(ack.properties.reason_string, None);
    assert!(ack.properties.user_properties.is_empty());
}

#[test]
fn negative_acks_carry_reason_strings_by_default() {
    let mut cfg = test_config();
    cfg.limits.max_topic_levels = 3;
    cfg.limits.max_queued_messages = 1;
    cfg.limits.max_packet_size = 1024;
    cfg.limits.max_outbox_bytes = 4096;
    let b = start_broker_with(cfg);
    // SUBACK failure.
    let mut c = Client::v5(b.mqtt, "explain");
    let ack = c.subscribe_many(
        vec![filter("a/b/c/d/e", QoS::AtMostOnce)],
        Properties::default(),
    );
    assert!(ack.codes[0] >= 0x80);
    assert!(
        ack.properties
            .reason_string
            .as_deref()
            .is_some_and(|s| !s.is_empty()),
        "SUBACK without a reason string: {ack:?}"
    );
    // PUBACK failure (quota exceeded for an offline session's full queue).
    let (mut off, _) = Client::connect(b.mqtt, V5, "offline", persistent(60));
    off.sub("rs/t", QoS::AtLeastOnce);
    off.disconnect();
    assert_eq!(c.publish("rs/t", "1", QoS::AtLeastOnce), 0);
    let pid = c.pid();
    c.send(Packet::Publish(Publish {
        packet_id: pid,
        ..publish_packet("rs/t", "2", QoS::AtLeastOnce, false)
    }));
    match c.recv_where(
        WAIT,
        "PUBACK",
        |x| matches!(x, Packet::PubAck(a) if a.packet_id == pid),
    ) {
        Packet::PubAck(a) => {
            assert_eq!(a.code, 0x97);
            assert!(
                a.properties
                    .reason_string
                    .as_deref()
                    .is_some_and(|s| !s.is_empty()),
                "PUBACK without a reason string: {a:?}"
            );
        }
        _ => unreachable!(),
    }
    // DISCONNECT for a packet too large.
    c.send(Packet::Publish(publish_packet(
        "rs/big",
        "x".repeat(2000),
        QoS::AtMostOnce,
        false,
    )));
    let d = c.expect_disconnect(&[0x95]);
    assert!(
        d.properties
            .reason_string
            .as_deref()
            .is_some_and(|s| !s.is_empty()),
        "DISCONNECT without a reason string: {d:?}"
    );
}

#[test]
fn payload_that_contradicts_its_format_indicator_is_refused() {
    let b = start_broker();
    let mut sub = Client::v5(b.mqtt, "sub");
    sub.sub("pfi/t", QoS::AtLeastOnce);
    let mut publ = Client::v5(b.mqtt, "pub");
    let utf8 = Properties {
        payload_format_indicator: Some(1),
        ..Properties::default()
    };
    // Declared UTF-8 and is: delivered with the indicator.
    publ.publish_packet(publish_with(
        "pfi/t",
        "ünïcödé",
        QoS::AtLeastOnce,
        utf8.clone(),
    ));
    let p = sub.recv_publish_acked();
    assert_eq!(p.properties.payload_format_indicator, Some(1));
    // Declared UTF-8 and is not: 0x99 Payload format invalid, as PUBACK or DISCONNECT.
    let pid = publ.pid();
    let bad = Publish {
        packet_id: pid,
        payload: Bytes::from_static(&[0xff, 0xfe, 0xfd]),
        ..publish_with("pfi/t", "", QoS::AtLeastOnce, utf8)
    };
    publ.send(Packet::Publish(bad));
    match publ.recv() {
        Packet::PubAck(a) => assert_eq!((a.packet_id, a.code), (pid, 0x99)),
        Packet::Disconnect(d) => assert_eq!(d.code, 0x99),
        other => panic!("expected PUBACK or DISCONNECT 0x99, got {other:?}"),
    }
    sub.expect_no_publish(QUIET);
}

#[test]
fn topic_aliases_do_not_outlive_the_connection() {
    let b = start_broker();
    let (mut publ, _) = Client::connect(b.mqtt, V5, "aliaser", persistent(60));
    let alias = Properties {
        topic_alias: Some(1),
        ..Properties::default()
    };
    publ.publish_packet(publish_with("al/t", "1", QoS::AtLeastOnce, alias.clone()));
    publ.disconnect();
    let (mut publ, ack) = Client::connect(b.mqtt, V5, "aliaser", persistent(60));
    assert!(ack.session_present);
    // 5.0 §3.3.2.3.4: mappings belong to the Network Connection, not the session.
    publ.send(Packet::Publish(publish_with(
        "",
        "2",
        QoS::AtMostOnce,
        alias,
    )));
    publ.expect_disconnect(&[0x82, 0x94]);
}

#[test]
fn resubscribing_replaces_the_subscription_identifier() {
    let b = start_broker();
    let mut sub = Client::v5(b.mqtt, "resid");
    let o = SubOptions {
        qos: QoS::AtLeastOnce,
        ..SubOptions::default()
    };
    let id = |n| Properties {
        subscription_identifiers: vec![n],
        ..Properties::default()
    };
    sub.subscribe_opts("rid/t", o, id(5));
    sub.subscribe_opts("rid/t", o, id(6));
    let mut publ = Client::v5(b.mqtt, "pub");
    publ.publish("rid/t", "a", QoS::AtLeastOnce);
    assert_eq!(
        sub.recv_publish_acked().properties.subscription_identifiers,
        vec![6]
    );
    sub.subscribe_opts("rid/t", o, Properties::default());
    publ.publish("rid/t", "b", QoS::AtLeastOnce);
    assert!(sub
        .recv_publish_acked()
        .properties
        .subscription_identifiers
        .is_empty());
}

#[test]
fn clients_cannot_publish_into_sys_topics() {
    let b = start_broker();
    let mut watcher = Client::v5(b.mqtt, "watcher");
    watcher.sub("$SYS/broker/uptime", QoS::AtMostOnce);
    let mut spoofer = Client::v5(b.mqtt, "spoofer");
    let code = spoofer.publish("$SYS/broker/uptime", "spoofed", QoS::AtLeastOnce);
    assert!(
        code >= 0x80,
        "PUBACK 0x{code:02x} for a client publish to $SYS"
    );
    let deadline = std::time::Instant::now() + Duration::from_millis(1500);
    while let Some(p) =
        watcher.recv_publish_within(deadline.saturating_duration_since(std::time::Instant::now()))
    {
        assert_ne!(&p.payload[..], b"spoofed");
    }
}
