//! QoS 0, 1 and 2 in both directions, inflight windows, redelivery, exactly-once.

mod common;

use std::collections::HashSet;

use common::*;

#[test]
fn qos0_publish_is_delivered_at_qos0_without_packet_id() {
    let b = start_broker();
    let mut sub = Client::v311(b.mqtt, "sub");
    sub.sub("q0/t", QoS::ExactlyOnce);
    let mut publ = Client::v311(b.mqtt, "pub");
    publ.publish("q0/t", "hello", QoS::AtMostOnce);
    let p = sub.recv_publish();
    assert_eq!(
        (
            p.topic.as_str(),
            &p.payload[..],
            p.qos,
            p.packet_id,
            p.dup,
            p.retain
        ),
        ("q0/t", &b"hello"[..], QoS::AtMostOnce, 0, false, false)
    );
}

#[test]
fn qos1_publish_gets_puback_with_its_packet_id() {
    let b = start_broker();
    for proto in [V311, V5] {
        let mut sub = Client::connect(b.mqtt, proto, "sub1", |_| {}).0;
        sub.sub("q1/t", QoS::AtLeastOnce);
        let mut publ = Client::connect(b.mqtt, proto, "pub1", |_| {}).0;
        let mut p = publish_packet("q1/t", "m", QoS::AtLeastOnce, false);
        p.packet_id = 4242;
        publ.send(Packet::Publish(p));
        match publ.recv_where(WAIT, "PUBACK", |x| matches!(x, Packet::PubAck(_))) {
            Packet::PubAck(a) => {
                assert_eq!(a.packet_id, 4242);
                assert_eq!(
                    a.code, 0,
                    "a message with a subscriber is acknowledged with Success"
                );
            }
            _ => unreachable!(),
        }
        let d = sub.recv_publish_acked();
        assert_eq!((d.qos, &d.payload[..]), (QoS::AtLeastOnce, &b"m"[..]));
        assert_ne!(d.packet_id, 0);
        sub.disconnect();
        publ.disconnect();
    }
}

#[test]
fn v5_puback_without_subscribers_is_success_or_no_matching_subscribers() {
    let b = start_broker();
    let mut publ = Client::v5(b.mqtt, "pub");
    let code = publ.publish("nobody/listens", "m", QoS::AtLeastOnce);
    assert!(code == 0x00 || code == 0x10, "PUBACK code 0x{code:02x}");
}

#[test]
fn qos2_publish_flow_pubrec_pubrel_pubcomp() {
    let b = start_broker();
    for proto in [V311, V5] {
        let mut sub = Client::connect(b.mqtt, proto, "sub2", |_| {}).0;
        sub.sub("q2/t", QoS::ExactlyOnce);
        let mut publ = Client::connect(b.mqtt, proto, "pub2", |_| {}).0;
        let mut p = publish_packet("q2/t", "m2", QoS::ExactlyOnce, false);
        p.packet_id = 77;
        publ.send(Packet::Publish(p));
        let Packet::PubRec(rec) =
            publ.recv_where(WAIT, "PUBREC", |x| matches!(x, Packet::PubRec(_)))
        else {
            unreachable!()
        };
        assert_eq!((rec.packet_id, rec.code), (77, 0));
        publ.send(Packet::PubRel(PubAck {
            packet_id: 77,
            code: 0,
            properties: Properties::default(),
        }));
        let Packet::PubComp(comp) =
            publ.recv_where(WAIT, "PUBCOMP", |x| matches!(x, Packet::PubComp(_)))
        else {
            unreachable!()
        };
        assert_eq!((comp.packet_id, comp.code), (77, 0));

        // Broker -> client at QoS 2: PUBLISH, PUBREC from us, PUBREL from the broker, PUBCOMP.
        let d = sub.recv_publish();
        assert_eq!((d.qos, &d.payload[..]), (QoS::ExactlyOnce, &b"m2"[..]));
        assert_ne!(d.packet_id, 0);
        sub.send(Packet::PubRec(PubAck {
            packet_id: d.packet_id,
            code: 0,
            properties: Properties::default(),
        }));
        let Packet::PubRel(rel) =
            sub.recv_where(WAIT, "PUBREL", |x| matches!(x, Packet::PubRel(_)))
        else {
            unreachable!()
        };
        assert_eq!((rel.packet_id, rel.code), (d.packet_id, 0));
        sub.send(Packet::PubComp(PubAck {
            packet_id: d.packet_id,
            code: 0,
            properties: Properties::default(),
        }));
        sub.sync();
        sub.disconnect();
        publ.disconnect();
    }
}

#[test]
fn delivery_qos_is_the_minimum_of_publish_and_granted_qos() {
    let b = start_broker();
    let mut sub = Client::v5(b.mqtt, "sub");
    sub.sub("g0", QoS::AtMostOnce);
    sub.sub("g1", QoS::AtLeastOnce);
    sub.sub("g2", QoS::ExactlyOnce);
    let mut publ = Client::v5(b.mqtt, "pub");
    let qs = [QoS::AtMostOnce, QoS::AtLeastOnce, QoS::ExactlyOnce];
    for (gi, granted) in qs.iter().enumerate() {
        for pq in qs {
            let topic = format!("g{gi}");
            let payload = format!("{gi}-{}", pq as u8);
            publ.publish(&topic, &payload, pq);
            let d = sub.recv_publish_acked();
            assert_eq!(String::from_utf8_lossy(&d.payload), payload);
            assert_eq!(
                d.qos,
                pq.min(*granted),
                "granted {granted:?}, published {pq:?}"
            );
            assert_eq!(d.packet_id == 0, d.qos == QoS::AtMostOnce);
        }
    }
}

#[test]
fn rumqttc_v311_round_trip_at_every_qos() {
    use rumqttc::QoS as Q;
    let b = start_broker();
    let (sub, mut sconn) = rumq(&b, "rsub", true);
    let codes = rumq_subscribe(&sub, &mut sconn, "r/#", Q::ExactlyOnce);
    assert_eq!(
        codes,
        vec![rumqttc::SubscribeReasonCode::Success(Q::ExactlyOnce)]
    );
    let (publ, mut pconn) = rumq(&b, "rpub", true);
    for (i, q) in [Q::AtMostOnce, Q::AtLeastOnce, Q::ExactlyOnce]
        .into_iter()
        .enumerate()
    {
        publ.publish(format!("r/{i}"), q, false, format!("p{i}"))
            .unwrap();
        // Drive the publisher until its flow completed.
        rumq_until(&mut pconn, "publish flow", |e| {
            matches!(
                (q, e),
                (
                    Q::AtMostOnce,
                    rumqttc::Event::Outgoing(rumqttc::Outgoing::Publish(_))
                ) | (
                    Q::AtLeastOnce,
                    rumqttc::Event::Incoming(rumqttc::Packet::PubAck(_))
                ) | (
                    Q::ExactlyOnce,
                    rumqttc::Event::Incoming(rumqttc::Packet::PubComp(_))
                )
            )
        });
        let p = rumq_publish(&mut sconn, WAIT).expect("rumqttc subscriber gets the message");
        assert_eq!(p.topic, format!("r/{i}"));
        assert_eq!(&p.payload[..], format!("p{i}").as_bytes());
        assert_eq!(p.qos, q);
    }
}

#[test]
fn rumqttc_v5_round_trip_at_every_qos() {
    use rumqttc::v5::mqttbytes::v5::Packet as P;
    use rumqttc::v5::mqttbytes::QoS as Q;
    let b = start_broker();
    let (sub, mut sconn) = rumq5(&b, "rsub5");
    sub.subscribe("r5/#", Q::ExactlyOnce).unwrap();
    rumq5_until(&mut sconn, "SUBACK", |e| {
        matches!(e, rumqttc::v5::Event::Incoming(P::SubAck(_)))
    });
    let (publ, mut pconn) = rumq5(&b, "rpub5");
    for (i, q) in [Q::AtMostOnce, Q::AtLeastOnce, Q::ExactlyOnce]
        .into_iter()
        .enumerate()
    {
        publ.publish(format!("r5/{i}"), q, false, format!("p{i}"))
            .unwrap();
        rumq5_until(&mut pconn, "publish flow", |e| {
            matches!(
                (q, e),
                (
                    Q::AtMostOnce,
                    rumqttc::v5::Event::Outgoing(rumqttc::Outgoing::Publish(_))
                ) | (Q::AtLeastOnce, rumqttc::v5::Event::Incoming(P::PubAck(_)))
                    | (Q::ExactlyOnce, rumqttc::v5::Event::Incoming(P::PubComp(_)))
            )
        });
        let p = rumq5_publish(&mut sconn, WAIT).expect("rumqttc v5 subscriber gets the message");
        assert_eq!(&p.topic[..], format!("r5/{i}").as_bytes());
        assert_eq!(&p.payload[..], format!("p{i}").as_bytes());
        assert_eq!(p.qos, q);
    }
}

#[test]
fn receive_maximum_limits_unacknowledged_deliveries() {
    let b = start_broker();
    let (mut sub, _) = Client::connect(b.mqtt, V5, "slow", |c| {
        c.properties.receive_maximum = Some(2)
    });
    sub.sub("rm/t", QoS::AtLeastOnce);
    let mut publ = Client::v5(b.mqtt, "pub");
    for i in 0..5 {
        publ.publish("rm/t", format!("m{i}"), QoS::AtLeastOnce);
    }
    let first = sub.recv_publish();
    let second = sub.recv_publish();
    assert_eq!(payloads(&[first.clone(), second.clone()]), ["m0", "m1"]);
    // Receive Maximum 2: nothing more until one is acknowledged [MQTT-3.3.4-9].
    sub.expect_no_publish(QUIET);
    sub.ack(&first);
    let third = sub.recv_publish();
    assert_eq!(&third.payload[..], b"m2");
    sub.expect_no_publish(QUIET);
    sub.ack(&second);
    sub.ack(&third);
    let rest = collect(&mut sub, 2);
    assert_eq!(payloads(&rest), ["m3", "m4"]);
    sub.expect_no_publish(QUIET);
}

#[test]
fn inflight_packet_ids_are_distinct_and_non_zero() {
    let b = start_broker();
    let mut sub = Client::v5(b.mqtt, "ids");
    sub.sub("ids/t", QoS::AtLeastOnce);
    let mut publ = Client::v5(b.mqtt, "pub");
    for i in 0..10 {
        publ.publish("ids/t", format!("m{i}"), QoS::AtLeastOnce);
    }
    let mut seen = HashSet::new();
    for _ in 0..10 {
        let p = sub.recv_publish();
        assert_ne!(p.packet_id, 0);
        assert!(
            seen.insert(p.packet_id),
            "packet id {} reused while in flight",
            p.packet_id
        );
    }
}

fn redelivery_after_reconnect(proto: Protocol) {
    let b = start_broker();
    let persistent = |c: &mut Connect| {
        c.clean_start = false;
        if c.protocol == V5 {
            c.properties.session_expiry_interval = Some(60);
        }
    };
    let (mut sub, ack) = Client::connect(b.mqtt, proto, "redeliver", persistent);
    assert!(!ack.session_present);
    sub.sub("rd/t", QoS::AtLeastOnce);
    let mut publ = Client::connect(b.mqtt, proto, "pub", |_| {}).0;
    publ.publish("rd/t", "once more", QoS::AtLeastOnce);
    let first = sub.recv_publish();
    assert!(!first.dup);
    // Not acknowledged; the connection goes away.
    sub.drop_abruptly();
    wait_connections(&b, 1);

    let (mut sub, ack) = Client::connect(b.mqtt, proto, "redeliver", persistent);
    assert!(ack.session_present);
    let again = sub.recv_publish();
    assert!(
        again.dup,
        "a redelivered PUBLISH has DUP=1 [MQTT-4.4.0-1]: {again:?}"
    );
    assert_eq!(
        again.packet_id, first.packet_id,
        "same packet id on redelivery"
    );
    assert_eq!(
        (again.topic.as_str(), &again.payload[..], again.qos),
        ("rd/t", &b"once more"[..], QoS::AtLeastOnce)
    );
    sub.ack(&again);
    sub.expect_no_publish(QUIET);
}

#[test]
fn unacked_qos1_is_redelivered_with_dup_after_reconnect_v5() {
    redelivery_after_reconnect(V5);
}

#[test]
fn unacked_qos1_is_redelivered_with_dup_after_reconnect_v311() {
    redelivery_after_reconnect(V311);
}

#[test]
fn unreleased_outgoing_qos2_resends_pubrel_after_reconnect() {
    let b = start_broker();
    let persistent = |c: &mut Connect| {
        c.clean_start = false;
        c.properties.session_expiry_interval = Some(60);
    };
    let (mut sub, _) = Client::connect(b.mqtt, V5, "q2rel", persistent);
    sub.sub("q2r/t", QoS::ExactlyOnce);
    let mut publ = Client::v5(b.mqtt, "pub");
    publ.publish("q2r/t", "x", QoS::ExactlyOnce);
    let d = sub.recv_publish();
    sub.send(Packet::PubRec(PubAck {
        packet_id: d.packet_id,
        code: 0,
        properties: Properties::default(),
    }));
    sub.recv_where(
        WAIT,
        "PUBREL",
        |x| matches!(x, Packet::PubRel(r) if r.packet_id == d.packet_id),
    );
    // Gone before PUBCOMP: on reconnect the broker resends the PUBREL, not the PUBLISH.
    sub.drop_abruptly();
    wait_connections(&b, 1);
    let (mut sub, ack) = Client::connect(b.mqtt, V5, "q2rel", persistent);
    assert!(ack.session_present);
    match sub.recv() {
        Packet::PubRel(r) => assert_eq!(r.packet_id, d.packet_id),
        other => panic!("expected the PUBREL to be resent, got {other:?}"),
    }
    sub.send(Packet::PubComp(PubAck {
        packet_id: d.packet_id,
        code: 0,
        properties: Properties::default(),
    }));
    sub.expect_no_publish(QUIET);
}

#[test]
fn inbound_qos2_duplicate_before_pubrel_is_delivered_once() {
    let b = start_broker();
    for proto in [V311, V5] {
        let mut sub = Client::connect(b.mqtt, proto, "eo-sub", |_| {}).0;
        sub.sub("eo/t", QoS::ExactlyOnce);
        let mut publ = Client::connect(b.mqtt, proto, "eo-pub", |_| {}).0;
        let mut p = publish_packet("eo/t", "exactly once", QoS::ExactlyOnce, false);
        p.packet_id = 9;
        publ.send(Packet::Publish(p.clone()));
        publ.recv_where(
            WAIT,
            "PUBREC",
            |x| matches!(x, Packet::PubRec(a) if a.packet_id == 9),
        );
        // The sender did not see the PUBREC and retries with DUP=1.
        p.dup = true;
        publ.send(Packet::Publish(p));
        let Packet::PubRec(rec) = publ.recv_where(
            WAIT,
            "second PUBREC",
            |x| matches!(x, Packet::PubRec(a) if a.packet_id == 9),
        ) else {
            unreachable!()
        };
        assert_eq!(rec.code, 0);
        publ.send(Packet::PubRel(PubAck {
            packet_id: 9,
            code: 0,
            properties: Properties::default(),
        }));
        publ.recv_where(
            WAIT,
            "PUBCOMP",
            |x| matches!(x, Packet::PubComp(a) if a.packet_id == 9),
        );

        let got = sub.recv_publish_acked();
        assert_eq!(&got.payload[..], b"exactly once");
        sub.expect_no_publish(QUIET);

        // After PUBCOMP the packet id is free: the same id carries a new message.
        let mut p2 = publish_packet("eo/t", "second", QoS::ExactlyOnce, false);
        p2.packet_id = 9;
        assert_eq!(publ.publish_packet(p2), 0);
        assert_eq!(&sub.recv_publish_acked().payload[..], b"second");
        sub.disconnect();
        publ.disconnect();
    }
}

#[test]
fn v5_pubrel_for_unknown_packet_id_gets_pubcomp_0x92() {
    let b = start_broker();
    let mut c = Client::v5(b.mqtt, "rel");
    c.send(Packet::PubRel(PubAck {
        packet_id: 321,
        code: 0,
        properties: Properties::default(),
    }));
    match c.recv_where(WAIT, "PUBCOMP", |x| matches!(x, Packet::PubComp(_))) {
        Packet::PubComp(a) => assert_eq!(
            (a.packet_id, a.code),
            (321, 0x92),
            "Packet Identifier not found"
        ),
        _ => unreachable!(),
    }
}

#[test]
fn inbound_qos2_state_survives_a_reconnect() {
    let b = start_broker();
    let persistent = |c: &mut Connect| {
        c.clean_start = false;
        c.properties.session_expiry_interval = Some(60);
    };
    let mut sub = Client::v5(b.mqtt, "sub");
    sub.sub("q2s/t", QoS::ExactlyOnce);
    let (mut publ, _) = Client::connect(b.mqtt, V5, "q2pub", persistent);
    let mut p = publish_packet("q2s/t", "once", QoS::ExactlyOnce, false);
    p.packet_id = 11;
    publ.send(Packet::Publish(p.clone()));
    publ.recv_where(
        WAIT,
        "PUBREC",
        |x| matches!(x, Packet::PubRec(a) if a.packet_id == 11),
    );
    publ.drop_abruptly();
    wait_connections(&b, 1);
    // The sender reconnects, resends the PUBLISH with DUP (it did not see the PUBREC), then
    // PUBREL: QoS 2 messages received but not completed are session state (5.0 §4.1), so the
    // packet id is still known and PUBCOMP is 0x00.
    let (mut publ, ack) = Client::connect(b.mqtt, V5, "q2pub", persistent);
    assert!(ack.session_present);
    p.dup = true;
    publ.send(Packet::Publish(p));
    publ.recv_where(
        WAIT,
        "PUBREC",
        |x| matches!(x, Packet::PubRec(a) if a.packet_id == 11),
    );
    publ.send(Packet::PubRel(PubAck {
        packet_id: 11,
        code: 0,
        properties: Properties::default(),
    }));
    match publ.recv_where(WAIT, "PUBCOMP", |x| matches!(x, Packet::PubComp(_))) {
        Packet::PubComp(c) => assert_eq!((c.packet_id, c.code), (11, 0)),
        _ => unreachable!(),
    }
    assert_eq!(&sub.recv_publish_acked().payload[..], b"once");
    sub.expect_no_publish(QUIET);
}

#[test]
fn puback_for_an_unknown_packet_id_is_ignored() {
    let b = start_broker();
    let mut c = Client::v5(b.mqtt, "stray");
    c.send(Packet::PubAck(PubAck {
        packet_id: 999,
        code: 0,
        properties: Properties::default(),
    }));
    c.send(Packet::PubComp(PubAck {
        packet_id: 998,
        code: 0,
        properties: Properties::default(),
    }));
    c.ping();
    let mut p = Client::v5(b.mqtt, "pub");
    c.sub("stray/t", QoS::AtLeastOnce);
    c.assert_receives_from(&mut p, "stray/t");
}
