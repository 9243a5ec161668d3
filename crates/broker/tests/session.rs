//! Sessions: clean session (3.1.1), clean start + session expiry (5.0), takeover.

mod common;

use std::time::Duration;

use common::*;

fn persistent311(c: &mut Connect) {
    c.clean_start = false;
}

fn persistent5(expiry: u32) -> impl Fn(&mut Connect) {
    move |c: &mut Connect| {
        c.clean_start = false;
        c.properties.session_expiry_interval = Some(expiry);
    }
}

#[test]
fn v311_clean_session_false_keeps_subscriptions_and_reports_session_present() {
    let b = start_broker();
    let (mut c, ack) = Client::connect(b.mqtt, V311, "keep", persistent311);
    assert!(!ack.session_present, "no session existed");
    c.sub("s311/t", QoS::AtLeastOnce);
    c.disconnect();

    let (mut c, ack) = Client::connect(b.mqtt, V311, "keep", persistent311);
    assert!(
        ack.session_present,
        "session present after reconnect [MQTT-3.2.2-2]"
    );
    let mut p = Client::v311(b.mqtt, "pub");
    c.assert_receives_from(&mut p, "s311/t");
}

#[test]
fn v311_messages_published_while_offline_are_delivered_on_reconnect() {
    let b = start_broker();
    let (mut c, _) = Client::connect(b.mqtt, V311, "offline", persistent311);
    c.sub("off/t", QoS::AtLeastOnce);
    c.disconnect();
    let mut p = Client::v311(b.mqtt, "pub");
    for i in 0..3 {
        p.publish("off/t", format!("m{i}"), QoS::AtLeastOnce);
    }
    let (mut c, ack) = Client::connect(b.mqtt, V311, "offline", persistent311);
    assert!(ack.session_present);
    assert_eq!(payloads(&collect(&mut c, 3)), ["m0", "m1", "m2"]);
}

#[test]
fn v311_clean_session_true_discards_the_old_session() {
    let b = start_broker();
    let (mut c, _) = Client::connect(b.mqtt, V311, "wipe", persistent311);
    c.sub("wipe/t", QoS::AtLeastOnce);
    c.disconnect();
    let (mut c, ack) = Client::connect(b.mqtt, V311, "wipe", |_| {});
    assert!(
        !ack.session_present,
        "clean session: session present 0 [MQTT-3.2.2-1]"
    );
    let mut p = Client::v311(b.mqtt, "pub");
    p.publish("wipe/t", "x", QoS::AtLeastOnce);
    c.expect_no_publish(QUIET);
    c.disconnect();
    // The clean session ended at disconnect; nothing is left to resume.
    let (_c, ack) = Client::connect(b.mqtt, V311, "wipe", persistent311);
    assert!(!ack.session_present);
}

#[test]
fn v5_session_with_expiry_survives_reconnect() {
    let b = start_broker();
    let (mut c, ack) = Client::connect(b.mqtt, V5, "keep5", persistent5(60));
    assert!(!ack.session_present);
    c.sub("s5/t", QoS::AtLeastOnce);
    c.disconnect();
    assert!(
        wait_for(WAIT, || b.metrics().sessions == 1),
        "the session is held while offline"
    );

    let mut p = Client::v5(b.mqtt, "pub");
    p.publish("s5/t", "queued", QoS::AtLeastOnce);
    let (mut c, ack) = Client::connect(b.mqtt, V5, "keep5", persistent5(60));
    assert!(ack.session_present);
    assert_eq!(&c.recv_publish_acked().payload[..], b"queued");
    c.assert_receives_from(&mut p, "s5/t");
}

#[test]
fn v5_clean_start_discards_the_existing_session() {
    let b = start_broker();
    let (mut c, _) = Client::connect(b.mqtt, V5, "cs", persistent5(60));
    c.sub("cs/t", QoS::AtLeastOnce);
    c.disconnect();
    let (mut c, ack) = Client::connect(b.mqtt, V5, "cs", |c| {
        c.properties.session_expiry_interval = Some(60)
    });
    assert!(!ack.session_present, "clean start: session present 0");
    let mut p = Client::v5(b.mqtt, "pub");
    p.publish("cs/t", "x", QoS::AtLeastOnce);
    c.expect_no_publish(QUIET);
}

#[test]
fn v5_session_expiry_zero_ends_the_session_at_disconnect() {
    let b = start_broker();
    // clean_start=false but no Session Expiry Interval (0): the session ends with the connection.
    let (mut c, _) = Client::connect(b.mqtt, V5, "zero", |c| c.clean_start = false);
    c.sub("zero/t", QoS::AtLeastOnce);
    c.disconnect();
    let mut p = Client::v5(b.mqtt, "pub");
    p.publish("zero/t", "lost", QoS::AtLeastOnce);
    let (mut c, ack) = Client::connect(b.mqtt, V5, "zero", |c| c.clean_start = false);
    assert!(!ack.session_present);
    c.expect_no_publish(QUIET);
    p.publish("zero/t", "not subscribed", QoS::AtLeastOnce);
    c.expect_no_publish(QUIET);
}

#[test]
fn v5_session_is_gone_after_its_expiry_interval() {
    let b = start_broker();
    let (mut c, _) = Client::connect(b.mqtt, V5, "short", persistent5(1));
    c.sub("short/t", QoS::AtLeastOnce);
    c.disconnect();
    let mut p = Client::v5(b.mqtt, "pub");
    p.publish("short/t", "queued", QoS::AtLeastOnce);
    // Session expiry is the behaviour under test: let 2 s pass.
    std::thread::sleep(Duration::from_secs(2));
    let (mut c, ack) = Client::connect(b.mqtt, V5, "short", persistent5(1));
    assert!(!ack.session_present, "the session expired");
    c.expect_no_publish(QUIET);
}

#[test]
fn v5_disconnect_can_shorten_session_expiry_to_zero() {
    let b = start_broker();
    let (mut c, _) = Client::connect(b.mqtt, V5, "shorten", persistent5(60));
    c.sub("shorten/t", QoS::AtLeastOnce);
    let mut d = Disconnect::default();
    d.properties.session_expiry_interval = Some(0);
    c.disconnect_with(d);
    let (_c, ack) = Client::connect(b.mqtt, V5, "shorten", persistent5(60));
    assert!(
        !ack.session_present,
        "DISCONNECT set the session expiry to 0"
    );
}

#[test]
fn v5_disconnect_may_not_raise_session_expiry_from_zero() {
    let b = start_broker();
    let (mut c, _) = Client::connect(b.mqtt, V5, "raise", |_| {});
    let mut d = Disconnect::default();
    d.properties.session_expiry_interval = Some(60);
    c.send(Packet::Disconnect(d));
    // [MQTT-3.14.2-2]: a Protocol Error; the server may answer with DISCONNECT 0x82.
    if let Some(d) = c.wait_closed(WAIT) {
        assert_eq!(d.code, 0x82);
    }
    let (_c, ack) = Client::connect(b.mqtt, V5, "raise", |c| c.clean_start = false);
    assert!(!ack.session_present);
}

#[test]
fn session_expiry_above_the_limit_is_capped_in_connack() {
    let mut cfg = test_config();
    cfg.limits.max_session_expiry_secs = 10;
    let b = start_broker_with(cfg);
    let (_c, ack) = Client::connect(b.mqtt, V5, "cap", persistent5(1000));
    assert_eq!(ack.properties.session_expiry_interval, Some(10), "{ack:?}");
}

#[test]
fn v5_takeover_disconnects_the_old_connection_with_0x8e_and_inherits_the_session() {
    let b = start_broker();
    let (mut first, _) = Client::connect(b.mqtt, V5, "taken", persistent5(60));
    first.sub("take/t", QoS::AtLeastOnce);
    let (mut second, ack) = Client::connect(b.mqtt, V5, "taken", persistent5(60));
    assert!(
        ack.session_present,
        "the new connection inherits the session"
    );
    first.expect_disconnect(&[0x8E]);
    wait_closed(&b, "session_taken_over", 1);
    let mut p = Client::v5(b.mqtt, "pub");
    second.assert_receives_from(&mut p, "take/t");
    wait_connections(&b, 2);
}

#[test]
fn v311_takeover_closes_the_old_connection_and_inherits_the_session() {
    let b = start_broker();
    let (mut first, _) = Client::connect(b.mqtt, V311, "taken", persistent311);
    first.sub("take3/t", QoS::AtLeastOnce);
    let (mut second, ack) = Client::connect(b.mqtt, V311, "taken", persistent311);
    assert!(ack.session_present);
    first.expect_closed_silently();
    let mut p = Client::v311(b.mqtt, "pub");
    second.assert_receives_from(&mut p, "take3/t");
}

#[test]
fn takeover_inherits_inflight_and_queued_messages() {
    let b = start_broker();
    let (mut first, _) = Client::connect(b.mqtt, V5, "heir", |c| {
        c.clean_start = false;
        c.properties.session_expiry_interval = Some(60);
        c.properties.receive_maximum = Some(1);
    });
    first.sub("heir/t", QoS::AtLeastOnce);
    let mut p = Client::v5(b.mqtt, "pub");
    for i in 0..3 {
        p.publish("heir/t", format!("m{i}"), QoS::AtLeastOnce);
    }
    let m0 = first.recv_publish();
    assert_eq!(&m0.payload[..], b"m0");
    first.expect_no_publish(Duration::from_millis(300));

    let (mut second, ack) = Client::connect(b.mqtt, V5, "heir", persistent5(60));
    assert!(ack.session_present);
    first.expect_disconnect(&[0x8E]);
    let again = second.recv_publish_acked();
    assert_eq!(&again.payload[..], b"m0");
    assert!(again.dup, "the unacknowledged message is resent with DUP=1");
    assert_eq!(payloads(&collect(&mut second, 2)), ["m1", "m2"]);
}

#[test]
fn rumqttc_persistent_session_receives_offline_messages() {
    let b = start_broker();
    {
        let (c, mut conn) = rumq(&b, "rpersist", false);
        rumq_subscribe(&c, &mut conn, "rp/t", rumqttc::QoS::AtLeastOnce);
        c.disconnect().unwrap();
        let _ = rumq_until(&mut conn, "DISCONNECT sent", |e| {
            matches!(e, rumqttc::Event::Outgoing(rumqttc::Outgoing::Disconnect))
        });
    }
    wait_connections(&b, 0);
    let mut p = Client::v311(b.mqtt, "pub");
    p.publish("rp/t", "while away", QoS::AtLeastOnce);
    let mut o = rumqttc::MqttOptions::new("rpersist", "127.0.0.1", b.port());
    o.set_keep_alive(Duration::from_secs(30));
    o.set_clean_session(false);
    let (_c, mut conn) = rumqttc::Client::new(o, 10);
    match rumq_until(&mut conn, "CONNACK", |e| {
        matches!(e, rumqttc::Event::Incoming(rumqttc::Packet::ConnAck(_)))
    }) {
        rumqttc::Event::Incoming(rumqttc::Packet::ConnAck(a)) => assert!(a.session_present),
        _ => unreachable!(),
    }
    let got = rumq_publish(&mut conn, WAIT).expect("the offline message");
    assert_eq!(&got.payload[..], b"while away");
}
