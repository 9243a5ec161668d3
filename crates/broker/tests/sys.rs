//! `$SYS/broker/...` topics (published every second by the test configuration).

mod common;

use std::collections::HashMap;
use std::time::{Duration, Instant};

use common::*;

const TOPICS: [&str; 6] = [
    "$SYS/broker/uptime",
    "$SYS/broker/clients/connected",
    "$SYS/broker/messages/received",
    "$SYS/broker/messages/sent",
    "$SYS/broker/bytes/received",
    "$SYS/broker/bytes/sent",
];

fn number(p: &Publish) -> f64 {
    let s = std::str::from_utf8(&p.payload)
        .unwrap_or_else(|_| panic!("{} payload is not UTF-8", p.topic));
    s.trim()
        .parse::<f64>()
        .unwrap_or_else(|_| panic!("{} payload {s:?} is not a number", p.topic))
}

/// Waits for a value of `topic` for which `cond` holds; returns it.
fn wait_value(c: &mut Client, topic: &str, timeout: Duration, cond: impl Fn(f64) -> bool) -> f64 {
    let deadline = Instant::now() + timeout;
    let mut last = None;
    while Instant::now() < deadline {
        let left = deadline.saturating_duration_since(Instant::now());
        let Some(p) = c.recv_publish_within(left) else {
            break;
        };
        if p.topic == topic {
            let v = number(&p);
            if cond(v) {
                return v;
            }
            last = Some(v);
        }
    }
    panic!("{topic} never satisfied the condition within {timeout:?}; last value {last:?}");
}

#[test]
fn sys_topics_are_published_with_numeric_values() {
    let b = start_broker();
    let mut c = Client::v311(b.mqtt, "sys");
    c.sub("$SYS/#", QoS::AtMostOnce);
    let mut seen: HashMap<String, f64> = HashMap::new();
    let deadline = Instant::now() + Duration::from_secs(3);
    while seen.len() < TOPICS.len() && Instant::now() < deadline {
        if let Some(p) = c.recv_publish_within(Duration::from_millis(200)) {
            assert!(p.topic.starts_with("$SYS/"), "{}", p.topic);
            if TOPICS.contains(&p.topic.as_str()) {
                let v = number(&p);
                assert!(v >= 0.0, "{} = {v}", p.topic);
                seen.insert(p.topic.clone(), v);
            }
        }
    }
    let missing: Vec<&&str> = TOPICS.iter().filter(|t| !seen.contains_key(**t)).collect();
    assert!(
        missing.is_empty(),
        "not published within 3 s: {missing:?}; seen {seen:?}"
    );
    assert!(seen["$SYS/broker/clients/connected"] >= 1.0, "{seen:?}");
}

#[test]
fn uptime_increases() {
    let b = start_broker();
    let mut c = Client::v5(b.mqtt, "uptime");
    c.sub("$SYS/broker/uptime", QoS::AtMostOnce);
    let first = wait_value(&mut c, "$SYS/broker/uptime", WAIT, |_| true);
    wait_value(&mut c, "$SYS/broker/uptime", Duration::from_secs(4), |v| {
        v > first
    });
}

#[test]
fn clients_connected_follows_connections() {
    let b = start_broker();
    let mut c = Client::v5(b.mqtt, "watch");
    c.sub("$SYS/broker/clients/connected", QoS::AtMostOnce);
    wait_value(&mut c, "$SYS/broker/clients/connected", WAIT, |v| v == 1.0);
    let others: Vec<Client> = (0..3)
        .map(|i| Client::v311(b.mqtt, &format!("extra{i}")))
        .collect();
    wait_value(&mut c, "$SYS/broker/clients/connected", WAIT, |v| v == 4.0);
    for o in others {
        o.disconnect();
    }
    wait_value(&mut c, "$SYS/broker/clients/connected", WAIT, |v| v == 1.0);
}

#[test]
fn message_and_byte_counters_grow_with_traffic() {
    let b = start_broker();
    let mut c = Client::v5(b.mqtt, "watch");
    c.sub("$SYS/broker/messages/received", QoS::AtMostOnce);
    let before = wait_value(&mut c, "$SYS/broker/messages/received", WAIT, |_| true);
    let mut sub = Client::v5(b.mqtt, "sub");
    sub.sub("traffic/t", QoS::AtMostOnce);
    let mut publ = Client::v5(b.mqtt, "pub");
    for _ in 0..5 {
        publ.publish("traffic/t", "0123456789", QoS::AtLeastOnce);
    }
    assert_eq!(collect(&mut sub, 5).len(), 5);
    wait_value(&mut c, "$SYS/broker/messages/received", WAIT, |v| {
        v >= before + 5.0
    });
    let m = b.metrics();
    assert!(m.messages_received >= 5 && m.messages_sent >= 5, "{m:?}");
    assert!(m.bytes_received > 50 && m.bytes_sent > 50, "{m:?}");
}

#[test]
fn rumqttc_reads_sys_topics() {
    let b = start_broker();
    let (c, mut conn) = rumq(&b, "rsys", true);
    rumq_subscribe(
        &c,
        &mut conn,
        "$SYS/broker/bytes/#",
        rumqttc::QoS::AtMostOnce,
    );
    let p = rumq_publish(&mut conn, WAIT).expect("a $SYS message");
    assert!(p.topic.starts_with("$SYS/broker/bytes/"), "{}", p.topic);
    let s = std::str::from_utf8(&p.payload).unwrap();
    s.trim().parse::<f64>().unwrap_or_else(|_| panic!("{s:?}"));
}
