//! Will messages: when they are published, when not, will delay, will retain.

mod common;

use std::time::{Duration, Instant};

use common::*;

fn with_will(topic: &str, payload: &str) -> impl FnOnce(&mut Connect) {
    let (topic, payload) = (topic.to_string(), payload.to_string());
    move |c: &mut Connect| c.will = Some(will(&topic, &payload, QoS::AtLeastOnce, false))
}

#[test]
fn will_is_published_when_the_connection_drops() {
    let b = start_broker();
    for proto in [V311, V5] {
        let mut watcher = Client::connect(b.mqtt, proto, "watcher", |_| {}).0;
        watcher.sub("will/drop", QoS::AtLeastOnce);
        let (dying, _) = Client::connect(b.mqtt, proto, "dying", with_will("will/drop", "gone"));
        dying.drop_abruptly();
        let p = watcher.recv_publish_acked();
        assert_eq!(
            (p.topic.as_str(), &p.payload[..], p.qos, p.retain),
            ("will/drop", &b"gone"[..], QoS::AtLeastOnce, false)
        );
        watcher.disconnect();
    }
}

#[test]
fn no_will_after_a_normal_disconnect() {
    let b = start_broker();
    for proto in [V311, V5] {
        let mut watcher = Client::connect(b.mqtt, proto, "watcher", |_| {}).0;
        watcher.sub("will/normal", QoS::AtLeastOnce);
        let (polite, _) = Client::connect(
            b.mqtt,
            proto,
            "polite",
            with_will("will/normal", "should not appear"),
        );
        polite.disconnect();
        watcher.expect_no_publish(Duration::from_secs(1));
        watcher.disconnect();
    }
}

#[test]
fn v5_disconnect_with_reason_0x04_publishes_the_will() {
    let b = start_broker();
    let mut watcher = Client::v5(b.mqtt, "watcher");
    watcher.sub("will/04", QoS::AtLeastOnce);
    let (c, _) = Client::connect(b.mqtt, V5, "leaver", with_will("will/04", "asked for"));
    c.disconnect_with(Disconnect {
        code: 0x04,
        properties: Properties::default(),
    });
    let p = watcher.recv_publish_acked();
    assert_eq!(&p.payload[..], b"asked for");
    wait_closed(&b, "client_disconnect_with_will", 1);
}

#[test]
fn will_retain_flag_is_honoured() {
    let b = start_quiet_broker();
    let (dying, _) = Client::connect(b.mqtt, V311, "dying", |c| {
        c.will = Some(will("will/retained", "last words", QoS::AtLeastOnce, true))
    });
    dying.drop_abruptly();
    assert!(
        wait_for(WAIT, || b.metrics().retained_messages == 1),
        "the will was retained"
    );
    let mut late = Client::v311(b.mqtt, "late");
    late.sub("will/retained", QoS::AtLeastOnce);
    let p = late.recv_publish_acked();
    assert!(p.retain);
    assert_eq!(&p.payload[..], b"last words");
}

#[test]
fn will_properties_are_passed_through() {
    let b = start_broker();
    let mut watcher = Client::v5(b.mqtt, "watcher");
    watcher.sub("will/props", QoS::AtLeastOnce);
    let (dying, _) = Client::connect(b.mqtt, V5, "dying", |c| {
        let mut w = will("will/props", "{}", QoS::AtLeastOnce, false);
        w.properties.content_type = Some("application/json".into());
        w.properties.payload_format_indicator = Some(1);
        w.properties.response_topic = Some("reply/here".into());
        w.properties.correlation_data = Some(bytes::Bytes::from_static(b"corr"));
        w.properties.user_properties = vec![("k".into(), "v1".into()), ("k".into(), "v2".into())];
        c.will = Some(w);
    });
    dying.drop_abruptly();
    let p = watcher.recv_publish_acked();
    assert_eq!(
        p.properties.content_type.as_deref(),
        Some("application/json")
    );
    assert_eq!(p.properties.payload_format_indicator, Some(1));
    assert_eq!(p.properties.response_topic.as_deref(), Some("reply/here"));
    assert_eq!(p.properties.correlation_data.as_deref(), Some(&b"corr"[..]));
    assert_eq!(
        p.properties.user_properties,
        vec![
            ("k".to_string(), "v1".to_string()),
            ("k".to_string(), "v2".to_string())
        ]
    );
}

fn delayed_will(delay: u32, expiry: u32) -> impl FnOnce(&mut Connect) {
    move |c: &mut Connect| {
        c.clean_start = false;
        c.properties.session_expiry_interval = Some(expiry);
        let mut w = will("will/delayed", "late", QoS::AtLeastOnce, false);
        w.properties.will_delay_interval = Some(delay);
        c.will = Some(w);
    }
}

#[test]
fn will_delay_interval_postpones_the_will() {
    let b = start_broker();
    let mut watcher = Client::v5(b.mqtt, "watcher");
    watcher.sub("will/delayed", QoS::AtLeastOnce);
    let (dying, _) = Client::connect(b.mqtt, V5, "delayed", delayed_will(2, 10));
    let dropped = Instant::now();
    dying.drop_abruptly();
    // Not before ~2 s ...
    watcher.expect_no_publish(Duration::from_millis(1700));
    // ... but by ~2 s plus a margin.
    let p = watcher
        .recv_publish_within(Duration::from_millis(2300))
        .expect("the will after its delay");
    assert_eq!(&p.payload[..], b"late");
    let waited = dropped.elapsed();
    assert!(
        waited >= Duration::from_millis(1800),
        "will published after {waited:?}"
    );
}

#[test]
fn reconnecting_within_the_will_delay_cancels_the_will() {
    let b = start_broker();
    let mut watcher = Client::v5(b.mqtt, "watcher");
    watcher.sub("will/delayed", QoS::AtLeastOnce);
    let (dying, _) = Client::connect(b.mqtt, V5, "comeback", delayed_will(2, 10));
    dying.drop_abruptly();
    wait_connections(&b, 1);
    let (back, ack) = Client::connect(b.mqtt, V5, "comeback", |c| {
        c.clean_start = false;
        c.properties.session_expiry_interval = Some(10);
    });
    assert!(ack.session_present);
    watcher.expect_no_publish(Duration::from_millis(2800));
    drop(back);
}

#[test]
fn will_is_published_when_the_session_ends_before_the_will_delay() {
    let b = start_broker();
    let mut watcher = Client::v5(b.mqtt, "watcher");
    watcher.sub("will/delayed", QoS::AtLeastOnce);
    // Will delay 30 s but session expiry 1 s: the will goes out when the session ends.
    let (dying, _) = Client::connect(b.mqtt, V5, "shortlived", delayed_will(30, 1));
    let dropped = Instant::now();
    dying.drop_abruptly();
    let p = watcher
        .recv_publish_within(Duration::from_millis(3500))
        .expect("will at session end");
    assert_eq!(&p.payload[..], b"late");
    assert!(
        dropped.elapsed() >= Duration::from_millis(800),
        "will after {:?}",
        dropped.elapsed()
    );
}

#[test]
fn rumqttc_last_will_is_published_on_drop() {
    let b = start_broker();
    let mut watcher = Client::v311(b.mqtt, "watcher");
    watcher.sub("will/rumq", QoS::AtLeastOnce);
    let mut o = rumqttc::MqttOptions::new("rdying", "127.0.0.1", b.port());
    o.set_keep_alive(Duration::from_secs(30));
    o.set_last_will(rumqttc::LastWill::new(
        "will/rumq",
        "bye",
        rumqttc::QoS::AtLeastOnce,
        false,
    ));
    let (client, conn) = rumq_with(o);
    drop(conn);
    drop(client);
    let p = watcher.recv_publish_acked();
    assert_eq!(&p.payload[..], b"bye");
}
