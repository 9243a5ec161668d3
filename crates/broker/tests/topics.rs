//! Topic matching: `+`, `#`, `$`-topics, overlapping subscriptions, unsubscribe.

mod common;

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use common::*;

/// Subscribes one client to `filter`, publishes to every topic in `topics`, and returns the set
/// of topics it received.
fn matched(b: &TestBroker, filter: &str, topics: &[&str]) -> BTreeSet<String> {
    let mut sub = Client::v5(b.mqtt, "matcher");
    sub.sub(filter, QoS::AtLeastOnce);
    let mut publ = Client::v5(b.mqtt, "pub");
    for t in topics {
        publ.publish(t, "x", QoS::AtLeastOnce);
    }
    // Every publish above was acknowledged; what is still to come arrives within QUIET.
    let mut got = BTreeSet::new();
    while let Some(p) = sub.recv_publish_within(QUIET) {
        sub.ack(&p);
        assert!(got.insert(p.topic.clone()), "{} delivered twice", p.topic);
    }
    sub.disconnect();
    publ.disconnect();
    got
}

fn set(ts: &[&str]) -> BTreeSet<String> {
    ts.iter().map(|s| s.to_string()).collect()
}

#[test]
fn plus_matches_exactly_one_level() {
    let b = start_broker();
    let got = matched(
        &b,
        "a/+/c",
        &["a/b/c", "a//c", "a/b/d", "a/b/c/d", "a/c", "x/b/c"],
    );
    assert_eq!(got, set(&["a/b/c", "a//c"]));
    let got = matched(&b, "+", &["a", "a/b", "/a"]);
    assert_eq!(got, set(&["a"]));
    let got = matched(&b, "+/+", &["/finance", "a/b", "a", "a/b/c"]);
    assert_eq!(got, set(&["/finance", "a/b"]));
}

#[test]
fn hash_matches_the_parent_and_every_level_below() {
    let b = start_broker();
    let got = matched(
        &b,
        "sport/#",
        &[
            "sport",
            "sport/",
            "sport/tennis",
            "sport/tennis/player1",
            "sports",
            "other/sport",
        ],
    );
    assert_eq!(
        got,
        set(&["sport", "sport/", "sport/tennis", "sport/tennis/player1"])
    );
    let got = matched(&b, "#", &["a", "a/b", "/x"]);
    assert_eq!(got, set(&["a", "a/b", "/x"]));
    let got = matched(
        &b,
        "sport/+/player1/#",
        &[
            "sport/tennis/player1",
            "sport/tennis/player1/score",
            "sport/tennis/player2",
        ],
    );
    assert_eq!(
        got,
        set(&["sport/tennis/player1", "sport/tennis/player1/score"])
    );
}

#[test]
fn matching_is_case_sensitive_and_exact() {
    let b = start_broker();
    let got = matched(
        &b,
        "Case/Topic",
        &["case/topic", "Case/Topic", "Case/Topic/", "Case/Topic "],
    );
    assert_eq!(got, set(&["Case/Topic"]));
}

#[test]
fn dollar_topics_are_not_matched_by_leading_wildcards() {
    let b = start_broker();
    let mut wild = Client::v5(b.mqtt, "wild");
    wild.sub("#", QoS::AtMostOnce);
    wild.sub("+/broker/uptime", QoS::AtMostOnce);
    wild.sub("+/+/+", QoS::AtMostOnce);
    let mut sys = Client::v5(b.mqtt, "sys");
    sys.sub("$SYS/#", QoS::AtMostOnce);
    // Two $SYS rounds (published every second) reach the $SYS/# subscriber ...
    let deadline = Instant::now() + Duration::from_secs(4);
    let mut rounds = BTreeSet::new();
    let mut uptime_seen = 0;
    while uptime_seen < 2 && Instant::now() < deadline {
        if let Some(p) = sys.recv_publish_within(Duration::from_millis(200)) {
            assert!(p.topic.starts_with("$SYS/"), "{}", p.topic);
            rounds.insert(p.topic.clone());
            if p.topic == "$SYS/broker/uptime" {
                uptime_seen += 1;
            }
        }
    }
    assert!(
        uptime_seen >= 2,
        "$SYS/broker/uptime not published twice in 4 s; saw {rounds:?}"
    );
    // ... and none to `#`, `+/broker/uptime` or `+/+/+` [MQTT-4.7.2-1].
    while let Some(p) = wild.recv_publish_within(Duration::from_millis(100)) {
        assert!(
            !p.topic.starts_with('$'),
            "wildcard subscription received {}",
            p.topic
        );
    }
}

#[test]
fn overlapping_subscriptions_deliver_one_copy_at_the_highest_qos() {
    let b = start_broker();
    let mut sub = Client::v311(b.mqtt, "overlap");
    sub.sub("ov/+", QoS::AtMostOnce);
    sub.sub("ov/#", QoS::AtLeastOnce);
    sub.sub("ov/a", QoS::AtMostOnce);
    let mut publ = Client::v311(b.mqtt, "pub");
    publ.publish("ov/a", "one", QoS::ExactlyOnce);
    let p = sub.recv_publish_acked();
    assert_eq!(
        p.qos,
        QoS::AtLeastOnce,
        "the highest granted QoS of the matching subscriptions"
    );
    sub.expect_no_publish(QUIET);
}

#[test]
fn v5_overlapping_subscriptions_carry_every_subscription_identifier() {
    let b = start_broker();
    let mut sub = Client::v5(b.mqtt, "overlap5");
    let with_id = |id: u32| Properties {
        subscription_identifiers: vec![id],
        ..Properties::default()
    };
    let o = |q| SubOptions {
        qos: q,
        ..SubOptions::default()
    };
    assert_eq!(
        sub.subscribe_opts("ov5/+", o(QoS::AtMostOnce), with_id(1)),
        0
    );
    assert_eq!(
        sub.subscribe_opts("ov5/#", o(QoS::AtLeastOnce), with_id(2)),
        1
    );
    // One overlapping subscription without an identifier.
    assert_eq!(
        sub.subscribe_opts("ov5/a", o(QoS::AtMostOnce), Properties::default()),
        0
    );
    let mut publ = Client::v5(b.mqtt, "pub");
    publ.publish("ov5/a", "one", QoS::ExactlyOnce);
    let p = sub.recv_publish_acked();
    assert_eq!(p.qos, QoS::AtLeastOnce);
    let mut ids = p.properties.subscription_identifiers.clone();
    ids.sort();
    assert_eq!(
        ids,
        vec![1, 2],
        "all matching subscription identifiers in the one PUBLISH"
    );
    sub.expect_no_publish(QUIET);
}

#[test]
fn resubscribing_replaces_the_subscription() {
    let b = start_broker();
    let mut sub = Client::v311(b.mqtt, "resub");
    sub.sub("rs/t", QoS::AtMostOnce);
    sub.sub("rs/t", QoS::AtLeastOnce);
    let mut publ = Client::v311(b.mqtt, "pub");
    publ.publish("rs/t", "x", QoS::AtLeastOnce);
    let p = sub.recv_publish_acked();
    assert_eq!(p.qos, QoS::AtLeastOnce, "the replacing subscription's QoS");
    sub.expect_no_publish(QUIET);
}

#[test]
fn unsubscribe_stops_delivery() {
    let b = start_broker();
    for proto in [V311, V5] {
        let mut sub = Client::connect(b.mqtt, proto, "unsub", |_| {}).0;
        sub.sub("us/+", QoS::AtLeastOnce);
        let mut publ = Client::connect(b.mqtt, proto, "pub", |_| {}).0;
        sub.assert_receives_from(&mut publ, "us/1");
        let ack = sub.unsubscribe(&["us/+"]);
        if proto == V5 {
            assert_eq!(ack.codes, vec![0x00]);
        }
        publ.publish("us/1", "after", QoS::AtLeastOnce);
        sub.expect_no_publish(QUIET);
        sub.disconnect();
        publ.disconnect();
    }
}

#[test]
fn v5_unsubscribe_of_an_unknown_filter_gets_0x11() {
    let b = start_broker();
    let mut sub = Client::v5(b.mqtt, "unsub5");
    sub.sub("known", QoS::AtMostOnce);
    let ack = sub.unsubscribe(&["unknown/filter", "known"]);
    assert_eq!(
        ack.codes,
        vec![0x11, 0x00],
        "No subscription existed, then Success"
    );
}

#[test]
fn subscriptions_gauge_tracks_subscribe_and_unsubscribe() {
    let b = start_broker();
    let mut sub = Client::v5(b.mqtt, "gauge");
    sub.sub("g/1", QoS::AtMostOnce);
    sub.sub("g/2", QoS::AtMostOnce);
    assert!(
        wait_for(WAIT, || b.metrics().subscriptions == 2),
        "{:?}",
        b.metrics()
    );
    sub.unsubscribe(&["g/1"]);
    assert!(
        wait_for(WAIT, || b.metrics().subscriptions == 1),
        "{:?}",
        b.metrics()
    );
}
