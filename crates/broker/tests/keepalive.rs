//! Keepalive: idle clients are dropped after 1.5 x keepalive, pings keep them, Server Keep Alive.

mod common;

use std::time::{Duration, Instant};

use common::*;

#[test]
fn idle_v311_client_is_disconnected_after_one_and_a_half_keepalives() {
    let b = start_broker();
    let (mut c, _) = Client::connect(b.mqtt, V311, "idle", |c| c.keep_alive = 1);
    let start = Instant::now();
    c.expect_closed_silently();
    let after = start.elapsed();
    assert!(
        after >= Duration::from_millis(1000),
        "closed too early, after {after:?}"
    );
    assert!(
        after <= Duration::from_millis(3000),
        "closed too late, after {after:?}"
    );
    wait_closed(&b, "keepalive_timeout", 1);
}

#[test]
fn idle_v5_client_is_disconnected_with_keepalive_timeout() {
    let b = start_broker();
    let (mut c, _) = Client::connect(b.mqtt, V5, "idle5", |c| c.keep_alive = 1);
    let start = Instant::now();
    // The server may send DISCONNECT 0x8D (Keep Alive timeout) before closing.
    if let Some(d) = c.wait_closed(Duration::from_secs(4)) {
        assert_eq!(d.code, 0x8D, "{d:?}");
    }
    let after = start.elapsed();
    assert!(
        after >= Duration::from_millis(1000),
        "closed too early, after {after:?}"
    );
    assert!(
        after <= Duration::from_millis(3000),
        "closed too late, after {after:?}"
    );
    wait_closed(&b, "keepalive_timeout", 1);
}

#[test]
fn pings_keep_a_connection_alive() {
    let b = start_broker();
    let (mut c, _) = Client::connect(b.mqtt, V311, "pinger", |c| c.keep_alive = 1);
    let start = Instant::now();
    while start.elapsed() < Duration::from_millis(2600) {
        c.ping();
        // Any packet counts; the next ping goes out well within the keepalive.
        assert!(
            c.still_open_after(Duration::from_millis(500)),
            "closed although it pinged"
        );
    }
    c.ping();
    assert_eq!(closed_count(&b, "keepalive_timeout"), 0);
}

#[test]
fn keepalive_zero_is_never_timed_out_in_v311() {
    let b = start_broker();
    let (mut c, _) = Client::connect(b.mqtt, V311, "nokeepalive", |c| c.keep_alive = 0);
    assert!(c.still_open_after(Duration::from_millis(1500)));
    c.ping();
}

#[test]
fn will_is_published_on_keepalive_timeout() {
    let b = start_broker();
    let mut watcher = Client::v311(b.mqtt, "watcher");
    watcher.sub("ka/will", QoS::AtLeastOnce);
    let (_silent, _) = Client::connect(b.mqtt, V311, "silent", |c| {
        c.keep_alive = 1;
        c.will = Some(will("ka/will", "timed out", QoS::AtLeastOnce, false));
    });
    let p = watcher
        .recv_publish_within(Duration::from_secs(4))
        .expect("will after keepalive timeout");
    assert_eq!(&p.payload[..], b"timed out");
}

#[test]
fn v5_keepalive_above_the_maximum_gets_server_keep_alive() {
    let mut cfg = test_config();
    cfg.limits.max_keepalive_secs = 10;
    let b = start_broker_with(cfg);
    let (_c, ack) = Client::connect(b.mqtt, V5, "greedy", |c| c.keep_alive = 60);
    assert_eq!(ack.properties.server_keep_alive, Some(10), "{ack:?}");
    // Keepalive 0 (none) is also above any maximum.
    let (_c, ack) = Client::connect(b.mqtt, V5, "none", |c| c.keep_alive = 0);
    assert_eq!(ack.properties.server_keep_alive, Some(10), "{ack:?}");
    // Within the maximum: no need to override (if sent, it must echo the request).
    let (_c, ack) = Client::connect(b.mqtt, V5, "modest", |c| c.keep_alive = 5);
    assert!(
        matches!(ack.properties.server_keep_alive, None | Some(5)),
        "{ack:?}"
    );
}

#[test]
fn server_keep_alive_is_enforced() {
    let mut cfg = test_config();
    cfg.limits.max_keepalive_secs = 1;
    let b = start_broker_with(cfg);
    let (mut c, ack) = Client::connect(b.mqtt, V5, "told", |c| c.keep_alive = 60);
    assert_eq!(ack.properties.server_keep_alive, Some(1));
    let start = Instant::now();
    c.wait_closed(Duration::from_secs(4));
    assert!(start.elapsed() >= Duration::from_millis(1000));
}
