//! Configured limits: what happens at each one, and that each hit is counted.

mod common;

use std::io::Write;
use std::net::TcpStream;
use std::time::{Duration, Instant};

use common::*;

fn persistent(c: &mut Connect) {
    c.clean_start = false;
    if c.protocol == V5 {
        c.properties.session_expiry_interval = Some(60);
    }
}

#[test]
fn max_connections_v5_gets_server_busy() {
    let mut cfg = test_config();
    cfg.limits.max_connections = 2;
    let b = start_broker_with(cfg);
    let mut a = Client::v5(b.mqtt, "a");
    let _b2 = Client::v5(b.mqtt, "b");
    let (mut third, ack) = Client::try_connect(b.mqtt, V5, "c", |_| {});
    assert_eq!(ack.code, 0x89, "Server busy: {ack:?}");
    third.wait_closed(WAIT);
    wait_limit(&b, "max_connections", 1);
    wait_closed(&b, "server_busy", 1);
    a.ping();
    // A freed slot can be used again.
    a.disconnect();
    wait_connections(&b, 1);
    let (_d, ack) = Client::try_connect(b.mqtt, V5, "d", |_| {});
    assert_eq!(ack.code, 0);
}

#[test]
fn max_connections_v311_gets_return_code_3() {
    let mut cfg = test_config();
    cfg.limits.max_connections = 2;
    let b = start_broker_with(cfg);
    let _a = Client::v311(b.mqtt, "a");
    let _b2 = Client::v311(b.mqtt, "b");
    let (mut third, ack) = Client::try_connect(b.mqtt, V311, "c", |_| {});
    assert_eq!(ack.code, 3, "server unavailable: {ack:?}");
    third.expect_closed_silently();
    wait_limit(&b, "max_connections", 1);
}

#[test]
fn silent_connection_is_closed_after_the_connect_timeout() {
    let mut cfg = test_config();
    cfg.limits.connect_timeout_ms = 500;
    let b = start_broker_with(cfg);
    let start = Instant::now();
    let mut silent = Client::open(b.mqtt, V311);
    // A slowloris: half a CONNECT, then nothing.
    let mut partial = Client::open(b.mqtt, V311);
    partial.send_raw(&[0x10, 0x10, 0x00, 0x04, b'M']);
    silent.wait_closed(Duration::from_millis(2000));
    let after = start.elapsed();
    assert!(
        after >= Duration::from_millis(400),
        "closed after {after:?}"
    );
    assert!(
        after <= Duration::from_millis(1500),
        "closed after {after:?}"
    );
    partial.wait_closed(Duration::from_millis(1500));
    wait_closed(&b, "connect_timeout", 2);
    wait_limit(&b, "connect_timeout_ms", 2);
    // A client that does send CONNECT in time is not affected.
    let (mut ok, _) = Client::connect(b.mqtt, V311, "prompt", |_| {});
    assert!(ok.still_open_after(Duration::from_millis(800)));
}

#[test]
fn publish_above_max_packet_size_v5_gets_disconnect_0x95() {
    let mut cfg = test_config();
    cfg.limits.max_packet_size = 1024;
    cfg.limits.max_outbox_bytes = 4096;
    let b = start_broker_with(cfg);
    let mut sub = Client::v5(b.mqtt, "sub");
    sub.sub("big/#", QoS::AtMostOnce);
    let (mut publ, ack) = Client::connect(b.mqtt, V5, "big", |_| {});
    assert_eq!(ack.properties.maximum_packet_size, Some(1024));
    publ.publish("big/ok", "x".repeat(900), QoS::AtMostOnce);
    publ.send(Packet::Publish(publish_packet(
        "big/t",
        "x".repeat(2000),
        QoS::AtMostOnce,
        false,
    )));
    publ.expect_disconnect(&[0x95]);
    assert_eq!(sub.recv_publish().topic, "big/ok");
    sub.expect_no_publish(QUIET);
    wait_limit(&b, "max_packet_size", 1);
    wait_closed(&b, "packet_too_large", 1);
    assert!(
        protocol_errors(&b, 0x95) >= 1,
        "{:?}",
        b.metrics().protocol_errors
    );
}

#[test]
fn publish_above_max_packet_size_v311_closes_the_connection() {
    let mut cfg = test_config();
    cfg.limits.max_packet_size = 1024;
    cfg.limits.max_outbox_bytes = 4096;
    let b = start_broker_with(cfg);
    let mut publ = Client::v311(b.mqtt, "big");
    publ.send(Packet::Publish(publish_packet(
        "big/t",
        "x".repeat(2000),
        QoS::AtMostOnce,
        false,
    )));
    publ.expect_closed_silently();
    wait_limit(&b, "max_packet_size", 1);
}

#[test]
fn oversized_announced_length_is_refused_before_the_body_arrives() {
    let mut cfg = test_config();
    cfg.limits.max_packet_size = 1024;
    cfg.limits.max_outbox_bytes = 4096;
    let b = start_broker_with(cfg);
    let mut publ = Client::v5(b.mqtt, "liar");
    // Fixed header announcing 100,000 bytes; only a few follow.
    publ.send_raw(&[0x30, 0xa0, 0x8d, 0x06, 0x00, 0x01, b'a']);
    publ.expect_disconnect(&[0x95]);
}

#[test]
fn max_inflight_caps_unacknowledged_deliveries() {
    let mut cfg = test_config();
    cfg.limits.max_inflight = 3;
    let b = start_broker_with(cfg);
    // 3.1.1 has no Receive Maximum: the broker's own limit applies.
    let mut sub = Client::v311(b.mqtt, "slow");
    sub.sub("inf/t", QoS::AtLeastOnce);
    let mut publ = Client::v311(b.mqtt, "pub");
    for i in 0..6 {
        publ.publish("inf/t", format!("m{i}"), QoS::AtLeastOnce);
    }
    let held: Vec<Publish> = (0..3).map(|_| sub.recv_publish()).collect();
    assert_eq!(payloads(&held), ["m0", "m1", "m2"]);
    sub.expect_no_publish(QUIET);
    wait_limit(&b, "max_inflight", 1);
    for p in &held {
        sub.ack(p);
    }
    assert_eq!(payloads(&collect(&mut sub, 3)), ["m3", "m4", "m5"]);

    // A 5.0 client asking more than the limit is capped too.
    let (mut sub5, _) = Client::connect(b.mqtt, V5, "slow5", |c| {
        c.properties.receive_maximum = Some(100)
    });
    sub5.sub("inf5/t", QoS::AtLeastOnce);
    for i in 0..5 {
        publ.publish("inf5/t", format!("m{i}"), QoS::AtLeastOnce);
    }
    for _ in 0..3 {
        sub5.recv_publish();
    }
    sub5.expect_no_publish(QUIET);
}

#[test]
fn full_session_queue_gets_puback_0x97_and_is_counted() {
    let mut cfg = test_config();
    cfg.limits.max_queued_messages = 2;
    let b = start_broker_with(cfg);
    let (mut sub, _) = Client::connect(b.mqtt, V5, "queued", persistent);
    sub.sub("full/t", QoS::AtLeastOnce);
    sub.disconnect();
    let mut publ = Client::v5(b.mqtt, "pub");
    assert_eq!(publ.publish("full/t", "m0", QoS::AtLeastOnce), 0);
    assert_eq!(publ.publish("full/t", "m1", QoS::AtLeastOnce), 0);
    assert_eq!(
        publ.publish("full/t", "m2", QoS::AtLeastOnce),
        0x97,
        "Quota exceeded for the full queue"
    );
    wait_limit(&b, "max_queued_messages", 1);
    assert!(b.metrics().messages_dropped >= 1, "{:?}", b.metrics());
    let (mut sub, ack) = Client::connect(b.mqtt, V5, "queued", persistent);
    assert!(ack.session_present);
    assert_eq!(payloads(&collect(&mut sub, 3)), ["m0", "m1"]);
}

#[test]
fn full_session_queue_drops_qos0_before_qos1() {
    let mut cfg = test_config();
    cfg.limits.max_queued_messages = 2;
    let b = start_broker_with(cfg);
    let (mut sub, _) = Client::connect(b.mqtt, V311, "queued0", persistent);
    sub.sub("q0first/t", QoS::AtLeastOnce);
    sub.disconnect();
    let mut publ = Client::v311(b.mqtt, "pub");
    publ.publish("q0first/t", "zero", QoS::AtMostOnce);
    publ.publish("q0first/t", "one", QoS::AtLeastOnce);
    publ.publish("q0first/t", "two", QoS::AtLeastOnce);
    publ.sync();
    let (mut sub, _) = Client::connect(b.mqtt, V311, "queued0", persistent);
    // Whether or not QoS 0 was queued for the offline session, the QoS 1 messages must not be
    // the ones that made room.
    assert_eq!(payloads(&collect(&mut sub, 3)), ["one", "two"]);
}

#[test]
fn full_outbox_drops_qos0_but_keeps_qos1() {
    let mut cfg = test_config();
    cfg.limits.max_packet_size = 2048;
    cfg.limits.max_outbox_bytes = 8192;
    let b = start_broker_with(cfg);
    // A subscriber with a tiny receive buffer that does not read for now.
    let sock = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
    sock.set_recv_buffer_size(4096).unwrap();
    sock.connect(&b.mqtt.into()).unwrap();
    let mut sub = Client::adopt(sock.into(), V5);
    sub.send(Packet::Connect(connect_packet(V5, "lagging")));
    sub.recv_connack();
    sub.sub("mixed/#", QoS::AtLeastOnce);

    let mut flood = TcpStream::connect(b.mqtt).unwrap();
    flood
        .set_write_timeout(Some(Duration::from_secs(1)))
        .unwrap();
    flood
        .write_all(&encode(
            &Packet::Connect(connect_packet(V311, "flooder")),
            V311,
        ))
        .unwrap();
    let one = encode(
        &Packet::Publish(publish_packet(
            "mixed/q0",
            "f".repeat(1000),
            QoS::AtMostOnce,
            false,
        )),
        V311,
    );
    let batch: Vec<u8> = one.iter().copied().cycle().take(one.len() * 100).collect();
    let mut sent0 = 0;
    let start = Instant::now();
    while b.metrics().qos0_dropped < 100 && start.elapsed() < Duration::from_secs(5) {
        if flood.write_all(&batch).is_err() {
            break;
        }
        sent0 += 100;
    }
    assert!(b.metrics().qos0_dropped > 0, "{:?}", b.metrics());
    // QoS 1 messages to the same lagging subscriber are accepted, not dropped.
    let mut publ = Client::v5(b.mqtt, "pub");
    for i in 0..5 {
        assert_eq!(
            publ.publish("mixed/q1", format!("keep{i}"), QoS::AtLeastOnce),
            0
        );
    }
    // Now the subscriber catches up: every QoS 1 message is there, some QoS 0 ones are not.
    let (mut got0, mut got1) = (0, Vec::new());
    while got1.len() < 5 {
        let Some(p) = sub.recv_publish_within(WAIT) else {
            break;
        };
        if p.qos == QoS::AtMostOnce {
            got0 += 1;
        } else {
            sub.ack(&p);
            got1.push(String::from_utf8_lossy(&p.payload).into_owned());
        }
    }
    assert_eq!(got1, ["keep0", "keep1", "keep2", "keep3", "keep4"]);
    assert!(got0 < sent0, "received {got0} of {sent0} QoS 0 messages");
    assert_eq!(
        b.metrics().messages_dropped,
        0,
        "no QoS 1 message was dropped"
    );
    wait_limit(&b, "max_outbox_bytes", 1);
}

#[test]
fn full_queued_bytes_gets_puback_0x97() {
    let mut cfg = test_config();
    cfg.limits.max_queued_bytes = 1000;
    let b = start_broker_with(cfg);
    let (mut sub, _) = Client::connect(b.mqtt, V5, "bytes", persistent);
    sub.sub("qb/t", QoS::AtLeastOnce);
    sub.disconnect();
    let mut publ = Client::v5(b.mqtt, "pub");
    let payload = "p".repeat(400);
    assert_eq!(publ.publish("qb/t", &payload, QoS::AtLeastOnce), 0);
    assert_eq!(publ.publish("qb/t", &payload, QoS::AtLeastOnce), 0);
    assert_eq!(publ.publish("qb/t", &payload, QoS::AtLeastOnce), 0x97);
    wait_limit(&b, "max_queued_bytes", 1);
}

#[test]
fn topic_longer_than_the_limit_is_refused() {
    let mut cfg = test_config();
    cfg.limits.max_topic_length = 20;
    let b = start_broker_with(cfg);
    let mut sub = Client::v5(b.mqtt, "sub");
    sub.sub("#", QoS::AtLeastOnce);
    let mut publ = Client::v5(b.mqtt, "pub");
    let long = format!("t/{}", "x".repeat(30));
    let pid = publ.pid();
    let mut p = publish_packet(&long, "x", QoS::AtLeastOnce, false);
    p.packet_id = pid;
    publ.send(Packet::Publish(p));
    // Either a negative PUBACK or a DISCONNECT; 0x90 Topic Name invalid is the natural code.
    match publ.recv() {
        Packet::PubAck(a) => {
            assert_eq!(a.packet_id, pid);
            assert!(
                a.code >= 0x80,
                "PUBACK 0x{:02x} for a topic above the limit",
                a.code
            );
        }
        Packet::Disconnect(d) => assert!(d.code >= 0x80, "{d:?}"),
        other => panic!("expected PUBACK or DISCONNECT, got {other:?}"),
    }
    sub.expect_no_publish(QUIET);
    // Subscribing to a filter above the limit fails too.
    let mut s2 = Client::v5(b.mqtt, "s2");
    let code = s2.subscribe(&long, QoS::AtMostOnce);
    assert!(code == 0x8F || code == 0x97, "SUBACK 0x{code:02x}");
    wait_limit(&b, "max_topic_length", 2);
}

#[test]
fn filter_with_too_many_levels_is_refused_in_suback() {
    let mut cfg = test_config();
    cfg.limits.max_topic_levels = 4;
    let b = start_broker_with(cfg);
    let mut c5 = Client::v5(b.mqtt, "c5");
    let ack = c5.subscribe_many(
        vec![
            filter("a/b/c/d/e", QoS::AtLeastOnce),
            filter("a/b/c/d", QoS::AtLeastOnce),
        ],
        Properties::default(),
    );
    assert!(
        ack.codes[0] == 0x8F || ack.codes[0] == 0x97,
        "SUBACK {:02x?}",
        ack.codes
    );
    assert_eq!(
        ack.codes[1], 1,
        "the valid filter in the same SUBSCRIBE is granted"
    );
    let mut c3 = Client::v311(b.mqtt, "c3");
    assert_eq!(c3.subscribe("a/b/c/d/e", QoS::AtLeastOnce), 0x80);
    wait_limit(&b, "max_topic_levels", 2);
    // Publishing to a topic with too many levels is refused as well.
    let code = c5.publish("a/b/c/d/e/f", "x", QoS::AtLeastOnce);
    assert!(code >= 0x80, "PUBACK 0x{code:02x}");
}

#[test]
fn subscriptions_above_the_per_client_limit_are_refused() {
    let mut cfg = test_config();
    cfg.limits.max_subscriptions_per_client = 2;
    let b = start_broker_with(cfg);
    let mut c5 = Client::v5(b.mqtt, "c5");
    let ack = c5.subscribe_many(
        vec![
            filter("s/1", QoS::AtMostOnce),
            filter("s/2", QoS::AtMostOnce),
            filter("s/3", QoS::AtMostOnce),
        ],
        Properties::default(),
    );
    assert_eq!(ack.codes, vec![0, 0, 0x97], "Quota exceeded for the third");
    // Replacing an existing subscription is not a new one.
    assert_eq!(c5.subscribe("s/1", QoS::AtLeastOnce), 1);
    let mut c3 = Client::v311(b.mqtt, "c3");
    let ack = c3.subscribe_many(
        vec![
            filter("s/1", QoS::AtMostOnce),
            filter("s/2", QoS::AtMostOnce),
            filter("s/3", QoS::AtMostOnce),
        ],
        Properties::default(),
    );
    assert_eq!(ack.codes, vec![0, 0, 0x80]);
    wait_limit(&b, "max_subscriptions_per_client", 2);
}

#[test]
fn receive_maximum_exceeded_disconnects_with_0x93() {
    let mut cfg = test_config();
    cfg.limits.receive_maximum = 2;
    let b = start_broker_with(cfg);
    let (mut c, ack) = Client::connect(b.mqtt, V5, "flood", |_| {});
    assert_eq!(ack.properties.receive_maximum, Some(2));
    // Three QoS 2 publishes without PUBREL: the third exceeds our Receive Maximum.
    for pid in 1..=3u16 {
        let mut p = publish_packet("rmx/t", "x", QoS::ExactlyOnce, false);
        p.packet_id = pid;
        c.send(Packet::Publish(p));
    }
    c.expect_disconnect(&[0x93]);
    wait_limit(&b, "receive_maximum", 1);
    wait_closed(&b, "limit_exceeded", 1);
}

#[test]
fn retained_messages_beyond_the_limit_are_not_stored() {
    let mut cfg = test_config();
    cfg.sys_interval_secs = 0;
    cfg.limits.max_retained_messages = 1;
    let b = start_broker_with(cfg);
    let mut publ = Client::v5(b.mqtt, "pub");
    publ.publish_retained("rl/a", "a", QoS::AtLeastOnce);
    publ.publish_retained("rl/b", "b", QoS::AtLeastOnce);
    // Replacing an existing retained topic is still allowed.
    publ.publish_retained("rl/a", "a2", QoS::AtLeastOnce);
    wait_limit(&b, "max_retained_messages", 1);
    assert_eq!(b.metrics().retained_messages, 1);
    let mut sub = Client::v5(b.mqtt, "sub");
    sub.sub("rl/+", QoS::AtLeastOnce);
    let got = collect(&mut sub, 2);
    assert_eq!(payloads(&got), ["a2"]);
}

/// A subscriber that never reads (tiny receive buffer) and a publisher flooding QoS 0 at it:
/// QoS 0 is dropped at the outbox limit, then the subscriber is closed as a slow consumer.
/// `paced` leaves the loops idle moments between bursts; unpaced, with one loop thread, the
/// publisher and the subscriber share the loop that is kept busy by the flood.
fn slow_consumer(workers: usize, paced: bool) {
    let mut cfg = test_config();
    cfg.workers = workers;
    cfg.limits.max_packet_size = 2048;
    cfg.limits.max_outbox_bytes = 8192;
    cfg.limits.write_timeout_ms = 1000;
    let b = start_broker_with(cfg);
    let sock = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
    sock.set_recv_buffer_size(4096).unwrap();
    sock.connect(&b.mqtt.into()).unwrap();
    let stream: TcpStream = sock.into();
    let mut sub = Client::adopt(stream, V311);
    sub.send(Packet::Connect(connect_packet(V311, "sink")));
    sub.recv_connack();
    sub.sub("flood/t", QoS::AtMostOnce);

    let mut publ = TcpStream::connect(b.mqtt).unwrap();
    publ.set_write_timeout(Some(Duration::from_secs(1)))
        .unwrap();
    publ.write_all(&encode(
        &Packet::Connect(connect_packet(V311, "flooder")),
        V311,
    ))
    .unwrap();
    let one = encode(
        &Packet::Publish(publish_packet(
            "flood/t",
            "f".repeat(1000),
            QoS::AtMostOnce,
            false,
        )),
        V311,
    );
    let batch: Vec<u8> = one.iter().copied().cycle().take(one.len() * 100).collect();
    // Flood until the broker's socket buffers toward the sink are full (a few MB on loopback)
    // and the write timeout has passed.
    let start = Instant::now();
    let mut flooded = 0usize;
    while closed_count(&b, "slow_consumer") == 0 && start.elapsed() < Duration::from_secs(4) {
        if publ.write_all(&batch).is_err() {
            break;
        }
        flooded += batch.len();
        if paced {
            std::thread::sleep(Duration::from_millis(2));
        }
    }
    let flood_time = start.elapsed();
    let m = b.metrics();
    assert!(
        m.qos0_dropped > 0,
        "no QoS 0 dropped for a subscriber that never reads: {m:?}"
    );
    assert!(count(&m.limit_hits, "max_outbox_bytes") > 0, "{m:?}");
    // It never drains, so it is closed as a slow consumer after the write timeout.
    assert!(
        wait_for(WAIT, || closed_count(&b, "slow_consumer") >= 1),
        "not closed as a slow consumer after {flooded} bytes flooded in {flood_time:?}: {:?}",
        b.metrics()
    );
    wait_limit(&b, "write_timeout_ms", 1);
    // The publisher is unaffected.
    let mut check = Client::v311(b.mqtt, "check");
    check.ping();
}

#[test]
fn slow_consumer_drops_qos0_then_is_disconnected() {
    slow_consumer(2, true);
}

#[test]
fn slow_consumer_on_the_flooding_publishers_loop_is_disconnected() {
    slow_consumer(1, false);
}

#[test]
fn flooding_publisher_does_not_starve_its_loop() {
    // One loop thread: the flooding publisher and the subscriber share it.
    let mut cfg = test_config();
    cfg.workers = 1;
    let b = start_broker_with(cfg);
    let mut sub = Client::v311(b.mqtt, "reader");
    sub.sub("busy/t", QoS::AtMostOnce);
    let flooding = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(true));
    let addr = b.mqtt;
    let f = flooding.clone();
    let flooder = std::thread::spawn(move || {
        let mut publ = TcpStream::connect(addr).unwrap();
        publ.set_write_timeout(Some(Duration::from_secs(1)))
            .unwrap();
        publ.write_all(&encode(
            &Packet::Connect(connect_packet(V311, "flooder")),
            V311,
        ))
        .unwrap();
        let one = encode(
            &Packet::Publish(publish_packet(
                "busy/t",
                "b".repeat(200),
                QoS::AtMostOnce,
                false,
            )),
            V311,
        );
        let batch: Vec<u8> = one.iter().copied().cycle().take(one.len() * 200).collect();
        let start = Instant::now();
        while start.elapsed() < Duration::from_millis(2500) {
            if publ.write_all(&batch).is_err() {
                break;
            }
        }
        f.store(false, std::sync::atomic::Ordering::SeqCst);
    });
    // A subscriber that keeps reading must keep receiving while the flood goes on (QoS 0 may
    // be dropped, but not everything after the first few hundred messages).
    let start = Instant::now();
    let mut late = 0;
    let mut total = 0;
    while flooding.load(std::sync::atomic::Ordering::SeqCst) {
        if sub
            .recv_publish_within(Duration::from_millis(100))
            .is_some()
        {
            total += 1;
            if start.elapsed() > Duration::from_millis(1500)
                && flooding.load(std::sync::atomic::Ordering::SeqCst)
            {
                late += 1;
            }
        }
    }
    flooder.join().unwrap();
    assert!(
        late > 0,
        "the subscriber got {total} messages, none after the first 1.5 s of a 2.5 s flood: {:?}",
        b.metrics()
    );
}
