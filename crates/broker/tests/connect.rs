//! CONNECT / CONNACK: acceptance, client ids, advertised limits, refusals, graceful shutdown.

mod common;

use common::*;

#[test]
fn v311_connect_is_accepted_without_session() {
    let b = start_broker();
    let (_c, ack) = Client::try_connect(b.mqtt, V311, "c311", |_| {});
    assert_eq!(ack.code, 0);
    assert!(!ack.session_present);
    assert!(ack.properties.is_empty(), "3.1.1 CONNACK has no properties");
}

#[test]
fn v5_connect_is_accepted_and_connack_advertises_limits() {
    let mut cfg = test_config();
    cfg.limits.receive_maximum = 17;
    cfg.limits.topic_alias_maximum = 9;
    cfg.limits.max_packet_size = 50_000;
    let b = start_broker_with(cfg);
    let (_c, ack) = Client::try_connect(b.mqtt, V5, "c5", |_| {});
    assert_eq!(ack.code, 0);
    assert!(!ack.session_present);
    // Absent, these would mean 65535, 0 and "no limit": the broker must say what it enforces.
    assert_eq!(ack.properties.receive_maximum, Some(17), "{ack:?}");
    assert_eq!(ack.properties.topic_alias_maximum, Some(9), "{ack:?}");
    assert_eq!(ack.properties.maximum_packet_size, Some(50_000), "{ack:?}");
    assert_eq!(ack.properties.assigned_client_identifier, None);
}

#[test]
fn v5_empty_client_id_gets_an_assigned_identifier() {
    let b = start_broker();
    let (mut c, ack) = Client::try_connect(b.mqtt, V5, "", |_| {});
    assert_eq!(ack.code, 0, "{ack:?}");
    let assigned = ack
        .properties
        .assigned_client_identifier
        .clone()
        .expect("Assigned Client Identifier in CONNACK");
    assert!(!assigned.is_empty());
    // The connection works under that id.
    c.sub("assigned/t", QoS::AtMostOnce);
    let mut p = Client::v5(b.mqtt, "pub");
    c.assert_receives_from(&mut p, "assigned/t");

    // Two anonymous clients get different ids.
    let (_c2, ack2) = Client::try_connect(b.mqtt, V5, "", |_| {});
    assert_eq!(ack2.code, 0);
    assert_ne!(ack2.properties.assigned_client_identifier, Some(assigned));
}

#[test]
fn v311_empty_client_id_with_clean_session_is_accepted() {
    let b = start_broker();
    let (mut c, ack) = Client::try_connect(b.mqtt, V311, "", |_| {});
    assert_eq!(ack.code, 0);
    c.ping();
}

#[test]
fn v311_empty_client_id_without_clean_session_is_refused_with_code_2() {
    let b = start_broker();
    let (mut c, ack) = Client::try_connect(b.mqtt, V311, "", |c| c.clean_start = false);
    assert_eq!(ack.code, 2, "identifier rejected [MQTT-3.1.3-8]");
    assert!(!ack.session_present);
    c.expect_closed_silently();
}

#[test]
fn unsupported_protocol_level_is_refused() {
    let b = start_broker();
    let mut c = Client::open(b.mqtt, V311);
    // "MQTT" level 6: a valid 3.1.1 CONNECT otherwise.
    c.send_raw(&[
        0x10, 0x10, 0x00, 0x04, b'M', b'Q', b'T', b'T', 0x06, 0x02, 0x00, 0x3c, 0x00, 0x04, b'a',
        b'b', b'c', b'd',
    ]);
    match c.next(WAIT) {
        // 3.1.1 [MQTT-3.1.2-2]: return code 0x01; 5.0 form: 0x84.
        Next::Packet(Packet::ConnAck(a)) => assert!(a.code == 0x01 || a.code == 0x84, "{a:?}"),
        other => panic!("expected CONNACK 0x01/0x84, got {other:?}"),
    }
    c.wait_closed(WAIT);
}

#[test]
fn client_id_longer_than_the_limit_is_refused() {
    let mut cfg = test_config();
    cfg.limits.max_client_id_length = 23;
    let b = start_broker_with(cfg);
    let long = "x".repeat(30);
    let (mut c, ack) = Client::try_connect(b.mqtt, V5, &long, |_| {});
    assert_eq!(ack.code, 0x85, "Client Identifier not valid: {ack:?}");
    c.wait_closed(WAIT);
    let (mut c, ack) = Client::try_connect(b.mqtt, V311, &long, |_| {});
    assert_eq!(ack.code, 2, "identifier rejected: {ack:?}");
    c.expect_closed_silently();
    wait_limit(&b, "max_client_id_length", 2);
    wait_closed(&b, "connect_refused", 2);
    // An id at the limit is fine.
    let (_c, ack) = Client::try_connect(b.mqtt, V5, &"y".repeat(23), |_| {});
    assert_eq!(ack.code, 0);
}

#[test]
fn first_packet_other_than_connect_closes_the_connection() {
    let b = start_broker();
    let mut c = Client::open(b.mqtt, V311);
    c.send(Packet::PingReq);
    // No PINGRESP and no CONNACK: the connection is closed [MQTT-3.1.0-1].
    match c.next(WAIT) {
        Next::Closed => {}
        other => panic!("expected the connection to be closed, got {other:?}"),
    }
}

#[test]
fn pingreq_gets_pingresp_in_both_versions() {
    let b = start_broker();
    let mut c5 = Client::v5(b.mqtt, "p5");
    let mut c3 = Client::v311(b.mqtt, "p3");
    for _ in 0..3 {
        c5.ping();
        c3.ping();
    }
}

#[test]
fn connections_gauge_and_close_reasons_are_counted() {
    let b = start_broker();
    let c1 = Client::v5(b.mqtt, "g1");
    let c2 = Client::v311(b.mqtt, "g2");
    wait_connections(&b, 2);
    c1.disconnect();
    wait_closed(&b, "client_disconnect", 1);
    c2.drop_abruptly();
    wait_closed(&b, "peer_closed", 1);
    wait_connections(&b, 0);
    assert!(b.metrics().connections_accepted >= 2);
}

#[test]
fn graceful_shutdown_sends_disconnect_0x8b_to_v5_clients() {
    let b = start_broker();
    let mut c5 = Client::v5(b.mqtt, "s5");
    let mut c3 = Client::v311(b.mqtt, "s3");
    c5.sync();
    c3.sync();
    b.shutdown();
    c5.expect_disconnect(&[0x8B]);
    c3.expect_closed_silently();
}
