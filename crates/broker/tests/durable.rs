//! Durable state across restarts of an in-process broker on the same data directory:
//! persistent sessions, their queues, QoS 2 state in both directions, retained messages and
//! subscriptions come back; expired and ended sessions do not; a failing store refuses what
//! needs it and nothing else; acknowledgements wait for the store. (Crashes of the real
//! binary with kill -9 are in crates/ballast/tests/crash.rs.)

mod common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use ballast_store::{FjallStore, MemoryStore, Op, Snapshot, Store, StoreError};
use common::*;
use test_support::{durable_config, start_broker_on};

fn quiet_durable(dir: &std::path::Path) -> test_support::BrokerConfig {
    let mut c = durable_config(dir);
    c.sys_interval_secs = 0;
    c
}

/// A 5.0 client with a session that outlives its connection.
fn persistent(addr: std::net::SocketAddr, id: &str, clean: bool) -> (Client, ConnAck) {
    Client::connect(addr, V5, id, |c| {
        c.clean_start = clean;
        c.properties.session_expiry_interval = Some(3600);
    })
}

#[test]
fn queued_messages_retained_messages_and_subscriptions_survive_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let b = start_broker_with(quiet_durable(dir.path()));
    let (mut sub, _) = persistent(b.mqtt, "sub", true);
    sub.sub("t/#", QoS::ExactlyOnce);
    // A 3.1.1 persistent session too (clean session 0).
    let (mut old, _) = Client::connect(b.mqtt, V311, "old", |c| c.clean_start = false);
    old.sub("t/#", QoS::AtLeastOnce);
    sub.disconnect();
    old.disconnect();

    let mut publ = Client::v5(b.mqtt, "pub");
    for i in 0..50 {
        assert_eq!(publ.publish("t/1", format!("q1-{i}"), QoS::AtLeastOnce), 0);
        assert_eq!(publ.publish("t/2", format!("q2-{i}"), QoS::ExactlyOnce), 0);
    }
    assert_eq!(publ.publish_retained("t/r", "kept", QoS::AtLeastOnce), 0);
    assert_eq!(publ.publish_retained("t/gone", "x", QoS::AtLeastOnce), 0);
    assert_eq!(publ.publish_retained("t/gone", "", QoS::AtLeastOnce), 0);
    publ.disconnect();
    b.shutdown();

    let b = start_broker_with(quiet_durable(dir.path()));
    assert_eq!(b.metrics().sessions, 2, "both persistent sessions are back");
    let (mut sub, ack) = persistent(b.mqtt, "sub", false);
    assert!(ack.session_present);
    let got = collect(&mut sub, 103);
    let mut q1 = Vec::new();
    let mut q2 = Vec::new();
    for p in &got {
        let text = String::from_utf8_lossy(&p.payload).to_string();
        match p.qos {
            QoS::AtLeastOnce => q1.push(text),
            QoS::ExactlyOnce => q2.push(text),
            QoS::AtMostOnce => panic!("no QoS 0 was published"),
        }
    }
    // The retained messages (and the empty one clearing "t/gone") were queued like any other
    // for the offline sessions.
    let expect1: Vec<String> = (0..50)
        .map(|i| format!("q1-{i}"))
        .chain(["kept".to_string(), "x".to_string(), String::new()])
        .collect();
    let expect2: Vec<String> = (0..50).map(|i| format!("q2-{i}")).collect();
    q1.sort();
    let mut e1 = expect1.clone();
    e1.sort();
    assert_eq!(q1, e1);
    assert_eq!(q2, expect2, "QoS 2 exactly once, in order");
    sub.expect_no_publish(QUIET);

    // The 3.1.1 session got them at its granted QoS 1.
    let (mut old, ack) = Client::connect(b.mqtt, V311, "old", |c| c.clean_start = false);
    assert!(ack.session_present);
    assert_eq!(collect(&mut old, 103).len(), 103);

    // Subscriptions are intact: a new publish arrives without subscribing again.
    let mut publ = Client::v5(b.mqtt, "pub");
    publ.publish("t/after", "new", QoS::AtLeastOnce);
    assert_eq!(payloads(&collect(&mut sub, 1)), vec!["new"]);

    // Retained messages are back (the cleared one is not).
    let mut fresh = Client::v5(b.mqtt, "fresh");
    fresh.sub("t/#", QoS::AtLeastOnce);
    let r = collect(&mut fresh, 1);
    assert_eq!(payloads(&r), vec!["kept"]);
    assert!(r[0].retain);
    fresh.expect_no_publish(QUIET);
}

#[test]
fn inflight_qos2_resumes_with_the_same_packet_ids_after_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let b = start_broker_with(quiet_durable(dir.path()));
    let (mut sub, _) = persistent(b.mqtt, "sub", true);
    sub.sub("t", QoS::ExactlyOnce);
    let mut publ = Client::v5(b.mqtt, "pub");
    publ.publish("t", "a", QoS::ExactlyOnce);
    publ.publish("t", "b", QoS::ExactlyOnce);
    // "a": received, never acknowledged. "b": PUBREC sent and PUBREL received, no PUBCOMP.
    let a = sub.recv_publish();
    let bb = sub.recv_publish();
    sub.send(Packet::PubRec(PubAck {
        packet_id: bb.packet_id,
        code: 0,
        properties: Properties::default(),
    }));
    sub.recv_where(
        WAIT,
        "PUBREL",
        |p| matches!(p, Packet::PubRel(r) if r.packet_id == bb.packet_id),
    );
    sub.drop_abruptly();
    publ.disconnect();
    b.shutdown();

    let b = start_broker_with(quiet_durable(dir.path()));
    let (mut sub, ack) = persistent(b.mqtt, "sub", false);
    assert!(ack.session_present);
    let mut saw_publish = false;
    let mut saw_rel = false;
    for _ in 0..2 {
        match sub.recv_where(WAIT, "PUBLISH or PUBREL", |p| {
            matches!(p, Packet::Publish(_) | Packet::PubRel(_))
        }) {
            Packet::Publish(p) => {
                assert_eq!(p.payload.as_ref(), b"a");
                assert_eq!(
                    p.packet_id, a.packet_id,
                    "same packet id as before the restart"
                );
                assert!(p.dup, "resent with DUP");
                saw_publish = true;
                sub.ack(&p);
            }
            Packet::PubRel(r) => {
                assert_eq!(
                    r.packet_id, bb.packet_id,
                    "the release is resent, not the message"
                );
                saw_rel = true;
                sub.send(Packet::PubComp(PubAck {
                    packet_id: r.packet_id,
                    code: 0,
                    properties: Properties::default(),
                }));
            }
            _ => unreachable!(),
        }
    }
    assert!(saw_publish && saw_rel);
    sub.expect_no_publish(QUIET);
}

#[test]
fn a_received_qos2_packet_id_survives_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let b = start_broker_with(quiet_durable(dir.path()));
    let (mut sub, _) = persistent(b.mqtt, "sub", true);
    sub.sub("t", QoS::ExactlyOnce);
    sub.disconnect();
    // The publisher's own session is persistent; it gets PUBREC and stops before PUBREL.
    let (mut publ, _) = persistent(b.mqtt, "pub", true);
    let mut p = publish_packet("t", "once", QoS::ExactlyOnce, false);
    p.packet_id = 7;
    publ.send(Packet::Publish(p.clone()));
    publ.recv_where(
        WAIT,
        "PUBREC",
        |x| matches!(x, Packet::PubRec(r) if r.packet_id == 7 && r.code == 0),
    );
    publ.drop_abruptly();
    b.shutdown();

    let b = start_broker_with(quiet_durable(dir.path()));
    let (mut publ, ack) = persistent(b.mqtt, "pub", false);
    assert!(ack.session_present);
    // Not sure its PUBREC arrived, the publisher sends the message again with DUP.
    p.dup = true;
    publ.send(Packet::Publish(p));
    publ.recv_where(
        WAIT,
        "PUBREC",
        |x| matches!(x, Packet::PubRec(r) if r.packet_id == 7 && r.code == 0),
    );
    publ.send(Packet::PubRel(PubAck {
        packet_id: 7,
        code: 0,
        properties: Properties::default(),
    }));
    let comp = publ.recv_where(WAIT, "PUBCOMP", |x| matches!(x, Packet::PubComp(_)));
    let Packet::PubComp(comp) = comp else {
        unreachable!()
    };
    assert_eq!(comp.code, 0, "the packet id was known after the restart");
    let (mut sub, _) = persistent(b.mqtt, "sub", false);
    assert_eq!(payloads(&collect(&mut sub, 1)), vec!["once"]);
    sub.expect_no_publish(QUIET);
}

#[test]
fn session_expiry_counts_across_a_restart_and_expired_sessions_leave_the_store() {
    let dir = tempfile::tempdir().unwrap();
    let b = start_broker_with(quiet_durable(dir.path()));
    let (short, _) = Client::connect(b.mqtt, V5, "short", |c| {
        c.properties.session_expiry_interval = Some(1);
    });
    let (long, _) = persistent(b.mqtt, "long", true);
    short.disconnect();
    long.disconnect();
    b.shutdown();
    std::thread::sleep(Duration::from_millis(1200));

    // The short session's second passed while the broker was down: it ends at start.
    let b = start_broker_with(quiet_durable(dir.path()));
    assert!(
        wait_for(WAIT, || b.metrics().sessions == 1),
        "the expired session is removed"
    );
    let (_c, ack) = Client::connect(b.mqtt, V5, "short", |c| {
        c.clean_start = false;
        c.properties.session_expiry_interval = Some(0);
    });
    assert!(!ack.session_present);
    let (_l, ack) = persistent(b.mqtt, "long", false);
    assert!(ack.session_present);
    b.shutdown();

    let store = FjallStore::open(dir.path(), ballast_store::Sync::Fsync).unwrap();
    let names: Vec<String> = store
        .load()
        .unwrap()
        .sessions
        .into_iter()
        .map(|s| s.session.client_id)
        .collect();
    assert_eq!(
        names,
        vec!["long"],
        "only the live persistent session is stored"
    );
}

#[test]
fn a_clean_start_removes_the_stored_session() {
    let dir = tempfile::tempdir().unwrap();
    let b = start_broker_with(quiet_durable(dir.path()));
    let (mut c, _) = persistent(b.mqtt, "c", true);
    c.sub("t", QoS::AtLeastOnce);
    c.disconnect();
    let mut publ = Client::v5(b.mqtt, "pub");
    publ.publish("t", "queued", QoS::AtLeastOnce);
    // A clean start with no expiry: the old session, its subscription and queue are gone.
    let c = Client::v5(b.mqtt, "c");
    c.disconnect();
    publ.disconnect();
    b.shutdown();

    let store = FjallStore::open(dir.path(), ballast_store::Sync::Fsync).unwrap();
    let snap = store.load().unwrap();
    assert!(snap.sessions.is_empty(), "{snap:?}");
    assert_eq!(snap.orphans, 0);
}

#[test]
fn a_failing_store_refuses_durable_publishes_and_serves_everything_else() {
    let store = Arc::new(MemoryStore::default());
    let b = start_broker_on(quiet_config(), store.clone());
    let (mut sub, _) = persistent(b.mqtt, "sub", true);
    sub.sub("durable", QoS::AtLeastOnce);
    sub.disconnect();
    let mut live = Client::v5(b.mqtt, "live");
    live.sub("plain", QoS::AtLeastOnce);

    store.set_failing(true);
    let mut publ = Client::v5(b.mqtt, "pub");
    // 5.0: the refusal carries 0x80 and a reason string.
    let pid = publ.pid();
    let mut p = publish_packet("durable", "x", QoS::AtLeastOnce, false);
    p.packet_id = pid;
    publ.send(Packet::Publish(p));
    let Packet::PubAck(ack) = publ.recv_where(
        WAIT,
        "PUBACK",
        |x| matches!(x, Packet::PubAck(a) if a.packet_id == pid),
    ) else {
        unreachable!()
    };
    assert_eq!(ack.code, 0x80);
    assert!(ack
        .properties
        .reason_string
        .unwrap()
        .contains("could not be stored"));
    assert_eq!(
        publ.publish("durable", "y", QoS::ExactlyOnce),
        0x80,
        "PUBREC refuses too"
    );

    // What needs no store goes on: QoS 1 to a non-persistent subscriber, QoS 0.
    assert_eq!(publ.publish("plain", "ok", QoS::AtLeastOnce), 0);
    assert_eq!(payloads(&collect(&mut live, 1)), vec!["ok"]);
    publ.publish("plain", "zero", QoS::AtMostOnce);
    assert_eq!(payloads(&collect(&mut live, 1)), vec!["zero"]);

    // 3.1.1 has no negative acknowledgement: the connection is closed.
    let mut old = Client::v311(b.mqtt, "old");
    old.send(Packet::Publish(Publish {
        packet_id: 1,
        ..publish_packet("durable", "z", QoS::AtLeastOnce, false)
    }));
    old.expect_closed_silently();
    wait_closed(&b, "store_failure", 1);
    assert!(b.metrics().store_refused >= 3);
    assert!(b.metrics().store.unwrap().failed_commits >= 3);

    // The disk works again, but what reached it after the failure is unknown: durable
    // publishes stay refused until a restart, so memory and store cannot drift apart.
    store.set_failing(false);
    assert_eq!(publ.publish("durable", "w", QoS::AtLeastOnce), 0x80);
    assert!(live.still_open_after(Duration::from_millis(50)));
    drop((publ, live));
    b.shutdown();

    // After a restart on the same store, they are taken again.
    let b = start_broker_on(quiet_config(), store.clone());
    let mut publ = Client::v5(b.mqtt, "pub");
    assert_eq!(publ.publish("durable", "v", QoS::AtLeastOnce), 0);
    let (mut sub, ack) = persistent(b.mqtt, "sub", false);
    assert!(ack.session_present);
    assert_eq!(payloads(&collect(&mut sub, 1)), vec!["v"]);
}

/// A store whose writes wait until the test opens a gate: shows that acknowledgements wait
/// for the store and nothing else does.
#[derive(Default)]
struct Gated {
    inner: MemoryStore,
    open: AtomicBool,
}

impl Store for Gated {
    fn apply(&self, ops: &[Op]) -> Result<(), StoreError> {
        while !self.open.load(Ordering::SeqCst) {
            std::thread::sleep(Duration::from_millis(5));
        }
        self.inner.apply(ops)
    }
    fn load(&self) -> Result<Snapshot, StoreError> {
        self.inner.load()
    }
}

#[test]
fn puback_waits_for_the_store_and_keeps_publish_order() {
    let store = Arc::new(Gated::default());
    store.open.store(true, Ordering::SeqCst);
    let b = start_broker_on(quiet_config(), store.clone());
    let (mut sub, _) = persistent(b.mqtt, "sub", true);
    sub.sub("durable", QoS::AtLeastOnce);
    let mut live = Client::v5(b.mqtt, "live");
    live.sub("plain", QoS::AtLeastOnce);

    store.open.store(false, Ordering::SeqCst);
    let mut publ = Client::v5(b.mqtt, "pub");
    let mut p1 = publish_packet("durable", "d", QoS::AtLeastOnce, false);
    p1.packet_id = 1;
    let mut p2 = publish_packet("plain", "p", QoS::AtLeastOnce, false);
    p2.packet_id = 2;
    publ.send(Packet::Publish(p1));
    publ.send(Packet::Publish(p2));
    // Delivery does not wait: both subscribers have their message while the store is shut.
    assert_eq!(payloads(&collect(&mut sub, 1)), vec!["d"]);
    assert_eq!(payloads(&collect(&mut live, 1)), vec!["p"]);
    // The PUBACKs do, and the second (which needed no store) stays behind the first.
    match publ.next(QUIET) {
        Next::Timeout => {}
        other => panic!("nothing may be acknowledged before the store writes: {other:?}"),
    }
    store.open.store(true, Ordering::SeqCst);
    let ids: Vec<u16> = (0..2)
        .map(
            |_| match publ.recv_where(WAIT, "PUBACK", |x| matches!(x, Packet::PubAck(_))) {
                Packet::PubAck(a) => {
                    assert_eq!(a.code, 0);
                    a.packet_id
                }
                _ => unreachable!(),
            },
        )
        .collect();
    assert_eq!(ids, vec![1, 2], "PUBACKs in PUBLISH order");
}
