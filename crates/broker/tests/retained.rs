//! Retained messages: set, replace, clear, delivery on subscribe, retain handling and
//! retain-as-published.

mod common;

use common::*;

fn opts(qos: QoS, retain_handling: u8, rap: bool) -> SubOptions {
    SubOptions {
        qos,
        retain_handling,
        retain_as_published: rap,
        ..SubOptions::default()
    }
}

#[test]
fn retained_message_is_delivered_on_subscribe_with_retain_flag() {
    let b = start_quiet_broker();
    let mut publ = Client::v311(b.mqtt, "pub");
    publ.publish_retained("ret/a", "kept", QoS::AtLeastOnce);
    assert!(wait_for(WAIT, || b.metrics().retained_messages == 1));
    let mut sub = Client::v311(b.mqtt, "sub");
    sub.sub("ret/a", QoS::AtLeastOnce);
    let p = sub.recv_publish_acked();
    assert_eq!(
        (p.topic.as_str(), &p.payload[..], p.retain, p.qos),
        ("ret/a", &b"kept"[..], true, QoS::AtLeastOnce)
    );
    sub.expect_no_publish(QUIET);
}

#[test]
fn retained_delivery_uses_the_lower_of_stored_and_granted_qos() {
    let b = start_quiet_broker();
    let mut publ = Client::v5(b.mqtt, "pub");
    publ.publish_retained("ret/q", "q2", QoS::ExactlyOnce);
    let mut sub = Client::v5(b.mqtt, "sub");
    sub.sub("ret/q", QoS::AtMostOnce);
    let p = sub.recv_publish();
    assert_eq!((p.qos, p.retain, p.packet_id), (QoS::AtMostOnce, true, 0));
}

#[test]
fn retained_message_is_replaced_by_a_newer_one() {
    let b = start_quiet_broker();
    let mut publ = Client::v311(b.mqtt, "pub");
    publ.publish_retained("ret/r", "old", QoS::AtLeastOnce);
    publ.publish_retained("ret/r", "new", QoS::AtLeastOnce);
    let mut sub = Client::v311(b.mqtt, "sub");
    sub.sub("ret/r", QoS::AtLeastOnce);
    let p = sub.recv_publish_acked();
    assert_eq!(&p.payload[..], b"new");
    sub.expect_no_publish(QUIET);
    assert_eq!(b.metrics().retained_messages, 1);
}

#[test]
fn empty_retained_payload_clears_the_retained_message() {
    let b = start_quiet_broker();
    let mut publ = Client::v311(b.mqtt, "pub");
    publ.publish_retained("ret/c", "soon gone", QoS::AtLeastOnce);
    assert!(wait_for(WAIT, || b.metrics().retained_messages == 1));
    // A live subscriber still receives the clearing message [MQTT-3.3.1-10 / 3.3.1.3].
    let mut live = Client::v311(b.mqtt, "live");
    live.sub("ret/c", QoS::AtLeastOnce);
    let _ = live.recv_publish_acked();
    publ.publish_retained("ret/c", "", QoS::AtLeastOnce);
    let clear = live.recv_publish_acked();
    assert!(clear.payload.is_empty());
    assert!(
        wait_for(WAIT, || b.metrics().retained_messages == 0),
        "retained gauge: {}",
        b.metrics().retained_messages
    );
    let mut sub = Client::v311(b.mqtt, "sub");
    sub.sub("ret/c", QoS::AtLeastOnce);
    sub.expect_no_publish(QUIET);
}

#[test]
fn wildcard_subscription_gets_every_matching_retained_message() {
    let b = start_quiet_broker();
    let mut publ = Client::v311(b.mqtt, "pub");
    publ.publish_retained("w/1", "one", QoS::AtLeastOnce);
    publ.publish_retained("w/2", "two", QoS::AtLeastOnce);
    publ.publish_retained("w/2/deeper", "no", QoS::AtLeastOnce);
    publ.publish_retained("other/1", "no", QoS::AtLeastOnce);
    let mut sub = Client::v311(b.mqtt, "sub");
    sub.sub("w/+", QoS::AtLeastOnce);
    let mut got: Vec<(String, String)> = collect(&mut sub, 2)
        .iter()
        .map(|p| {
            (
                p.topic.clone(),
                String::from_utf8_lossy(&p.payload).into_owned(),
            )
        })
        .collect();
    got.sort();
    assert_eq!(
        got,
        [
            ("w/1".to_string(), "one".to_string()),
            ("w/2".to_string(), "two".to_string())
        ]
    );
    sub.expect_no_publish(QUIET);
}

#[test]
fn v311_live_delivery_of_a_retained_publish_clears_the_retain_flag() {
    let b = start_quiet_broker();
    let mut sub = Client::v311(b.mqtt, "sub");
    sub.sub("live/r", QoS::AtLeastOnce);
    let mut publ = Client::v311(b.mqtt, "pub");
    publ.publish_retained("live/r", "x", QoS::AtLeastOnce);
    let p = sub.recv_publish_acked();
    // [MQTT-3.3.1-9]: to an established subscription the retain flag is 0.
    assert!(!p.retain);
}

#[test]
fn retain_handling_0_sends_retained_on_every_subscribe() {
    let b = start_quiet_broker();
    let mut publ = Client::v5(b.mqtt, "pub");
    publ.publish_retained("rh/0", "r", QoS::AtLeastOnce);
    let mut sub = Client::v5(b.mqtt, "sub");
    for _ in 0..2 {
        assert_eq!(
            sub.subscribe_opts(
                "rh/0",
                opts(QoS::AtLeastOnce, 0, false),
                Properties::default()
            ),
            1
        );
        let p = sub.recv_publish_acked();
        assert!(p.retain);
        assert_eq!(&p.payload[..], b"r");
    }
}

#[test]
fn retain_handling_1_sends_retained_only_for_a_new_subscription() {
    let b = start_quiet_broker();
    let mut publ = Client::v5(b.mqtt, "pub");
    publ.publish_retained("rh/1", "r", QoS::AtLeastOnce);
    let mut sub = Client::v5(b.mqtt, "sub");
    assert_eq!(
        sub.subscribe_opts(
            "rh/1",
            opts(QoS::AtLeastOnce, 1, false),
            Properties::default()
        ),
        1
    );
    let p = sub.recv_publish_acked();
    assert!(p.retain);
    // Same filter again: the subscription exists, so no retained message [MQTT-3.3.1-10].
    assert_eq!(
        sub.subscribe_opts(
            "rh/1",
            opts(QoS::AtLeastOnce, 1, false),
            Properties::default()
        ),
        1
    );
    sub.expect_no_publish(QUIET);
}

#[test]
fn retain_handling_2_never_sends_retained() {
    let b = start_quiet_broker();
    let mut publ = Client::v5(b.mqtt, "pub");
    publ.publish_retained("rh/2", "r", QoS::AtLeastOnce);
    let mut sub = Client::v5(b.mqtt, "sub");
    assert_eq!(
        sub.subscribe_opts(
            "rh/2",
            opts(QoS::AtLeastOnce, 2, false),
            Properties::default()
        ),
        1
    );
    sub.expect_no_publish(QUIET);
    // Live messages still flow.
    publ.publish("rh/2", "live", QoS::AtLeastOnce);
    assert_eq!(&sub.recv_publish_acked().payload[..], b"live");
}

#[test]
fn retain_as_published_keeps_or_clears_the_flag_on_live_delivery() {
    let b = start_quiet_broker();
    let mut rap = Client::v5(b.mqtt, "rap");
    rap.subscribe_opts(
        "rap/t",
        opts(QoS::AtLeastOnce, 0, true),
        Properties::default(),
    );
    let mut norap = Client::v5(b.mqtt, "norap");
    norap.subscribe_opts(
        "rap/t",
        opts(QoS::AtLeastOnce, 0, false),
        Properties::default(),
    );
    let mut publ = Client::v5(b.mqtt, "pub");
    publ.publish_retained("rap/t", "flagged", QoS::AtLeastOnce);
    let p = rap.recv_publish_acked();
    assert!(p.retain, "RAP=1 keeps the retain flag [MQTT-3.3.1-12]");
    let p = norap.recv_publish_acked();
    assert!(!p.retain, "RAP=0 clears the retain flag [MQTT-3.3.1-13]");
    // A non-retained publish is never flagged.
    publ.publish("rap/t", "plain", QoS::AtLeastOnce);
    assert!(!rap.recv_publish_acked().retain);
    assert!(!norap.recv_publish_acked().retain);
}

#[test]
fn retained_message_survives_its_publisher() {
    let b = start_quiet_broker();
    let mut publ = Client::v5(b.mqtt, "pub");
    publ.publish_retained("ret/s", "still here", QoS::AtMostOnce);
    publ.sync();
    publ.disconnect();
    let mut sub = Client::v5(b.mqtt, "sub");
    sub.sub("ret/#", QoS::AtMostOnce);
    let p = sub.recv_publish();
    assert_eq!((&p.payload[..], p.retain), (&b"still here"[..], true));
}

#[test]
fn rumqttc_receives_retained_message() {
    let b = start_quiet_broker();
    let mut publ = Client::v311(b.mqtt, "pub");
    publ.publish_retained("ret/rumq", "r", QoS::AtLeastOnce);
    let (sub, mut conn) = rumq(&b, "rsub", true);
    rumq_subscribe(&sub, &mut conn, "ret/rumq", rumqttc::QoS::AtLeastOnce);
    let p = rumq_publish(&mut conn, WAIT).expect("retained message");
    assert!(p.retain);
    assert_eq!(&p.payload[..], b"r");
}

#[test]
fn expired_retained_message_is_not_delivered() {
    let b = start_quiet_broker();
    let mut publ = Client::v5(b.mqtt, "pub");
    let mut short = publish_packet("ret/exp", "short-lived", QoS::AtLeastOnce, true);
    short.properties.message_expiry_interval = Some(1);
    publ.publish_packet(short);
    let mut long = publish_packet("ret/keep", "long-lived", QoS::AtLeastOnce, true);
    long.properties.message_expiry_interval = Some(60);
    publ.publish_packet(long);
    // Message expiry is the behaviour under test: let 2 s pass.
    std::thread::sleep(std::time::Duration::from_secs(2));
    let mut sub = Client::v5(b.mqtt, "sub");
    sub.sub("ret/+", QoS::AtLeastOnce);
    let got = collect(&mut sub, 2);
    assert_eq!(
        payloads(&got),
        ["long-lived"],
        "the expired retained message is gone"
    );
    let left = got[0]
        .properties
        .message_expiry_interval
        .expect("remaining expiry forwarded");
    assert!((57..=58).contains(&left), "60 s expiry after ~2 s: {left}");
}
