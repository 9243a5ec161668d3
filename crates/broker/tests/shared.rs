//! Shared subscriptions `$share/{group}/{filter}`.

mod common;

use std::collections::BTreeSet;
use std::time::Duration;

use common::*;

/// Reads every PUBLISH the members get until `total` have come (or WAIT passes), then checks
/// for stragglers; returns the payloads per member.
fn drain(members: &mut [&mut Client], total: usize) -> Vec<Vec<String>> {
    let mut out = vec![Vec::new(); members.len()];
    let deadline = std::time::Instant::now() + WAIT;
    while out.iter().map(Vec::len).sum::<usize>() < total && std::time::Instant::now() < deadline {
        for (i, m) in members.iter_mut().enumerate() {
            while let Some(p) = m.recv_publish_within(Duration::from_millis(20)) {
                m.ack(&p);
                out[i].push(String::from_utf8_lossy(&p.payload).into_owned());
            }
        }
    }
    for (i, m) in members.iter_mut().enumerate() {
        while let Some(p) = m.recv_publish_within(Duration::from_millis(200)) {
            m.ack(&p);
            out[i].push(String::from_utf8_lossy(&p.payload).into_owned());
        }
    }
    out
}

fn assert_split(per_member: &[Vec<String>], sent: &[String]) {
    let all: Vec<&String> = per_member.iter().flatten().collect();
    let unique: BTreeSet<&String> = all.iter().copied().collect();
    assert_eq!(
        all.len(),
        unique.len(),
        "a message was delivered to two members: {per_member:?}"
    );
    assert_eq!(
        unique,
        sent.iter().collect::<BTreeSet<_>>(),
        "every message delivered once in the group: {per_member:?}"
    );
    for (i, m) in per_member.iter().enumerate() {
        assert!(!m.is_empty(), "member {i} got nothing: {per_member:?}");
    }
}

fn messages(prefix: &str, n: usize) -> Vec<String> {
    (0..n).map(|i| format!("{prefix}{i}")).collect()
}

#[test]
fn v5_shared_subscription_splits_messages_between_members() {
    let b = start_broker();
    let mut m1 = Client::v5(b.mqtt, "m1");
    let mut m2 = Client::v5(b.mqtt, "m2");
    m1.sub("$share/g/sh/t", QoS::AtLeastOnce);
    m2.sub("$share/g/sh/t", QoS::AtLeastOnce);
    let mut publ = Client::v5(b.mqtt, "pub");
    let sent = messages("m", 20);
    for m in &sent {
        publ.publish("sh/t", m, QoS::AtLeastOnce);
    }
    let got = drain(&mut [&mut m1, &mut m2], sent.len());
    assert_split(&got, &sent);
}

#[test]
fn v311_shared_subscription_splits_messages_between_members() {
    let b = start_broker();
    let mut m1 = Client::v311(b.mqtt, "m1");
    let mut m2 = Client::v311(b.mqtt, "m2");
    m1.sub("$share/g/sh3/+", QoS::AtMostOnce);
    m2.sub("$share/g/sh3/+", QoS::AtMostOnce);
    let mut publ = Client::v311(b.mqtt, "pub");
    let sent = messages("x", 20);
    for m in &sent {
        publ.publish("sh3/t", m, QoS::AtLeastOnce);
    }
    let got = drain(&mut [&mut m1, &mut m2], sent.len());
    assert_split(&got, &sent);
}

#[test]
fn rumqttc_v311_members_share_a_group() {
    let b = start_broker();
    let (c1, mut conn1) = rumq(&b, "r1", true);
    let (c2, mut conn2) = rumq(&b, "r2", true);
    rumq_subscribe(&c1, &mut conn1, "$share/rg/rs/t", rumqttc::QoS::AtLeastOnce);
    rumq_subscribe(&c2, &mut conn2, "$share/rg/rs/t", rumqttc::QoS::AtLeastOnce);
    let mut publ = Client::v311(b.mqtt, "pub");
    let sent = messages("r", 10);
    for m in &sent {
        publ.publish("rs/t", m, QoS::AtLeastOnce);
    }
    let mut got = vec![Vec::new(), Vec::new()];
    let deadline = std::time::Instant::now() + WAIT;
    while got[0].len() + got[1].len() < sent.len() && std::time::Instant::now() < deadline {
        for (i, conn) in [&mut conn1, &mut conn2].into_iter().enumerate() {
            while let Some(p) = rumq_publish(conn, Duration::from_millis(30)) {
                got[i].push(String::from_utf8_lossy(&p.payload).into_owned());
            }
        }
    }
    for (i, conn) in [&mut conn1, &mut conn2].into_iter().enumerate() {
        while let Some(p) = rumq_publish(conn, Duration::from_millis(200)) {
            got[i].push(String::from_utf8_lossy(&p.payload).into_owned());
        }
    }
    assert_split(&got, &sent);
}

#[test]
fn mixed_v5_and_v311_members_share_a_group() {
    let b = start_broker();
    let mut m1 = Client::v5(b.mqtt, "m5");
    let mut m2 = Client::v311(b.mqtt, "m3");
    m1.sub("$share/mix/mx/t", QoS::AtLeastOnce);
    m2.sub("$share/mix/mx/t", QoS::AtLeastOnce);
    let mut publ = Client::v5(b.mqtt, "pub");
    let sent = messages("y", 10);
    for m in &sent {
        publ.publish("mx/t", m, QoS::AtLeastOnce);
    }
    let got = drain(&mut [&mut m1, &mut m2], sent.len());
    assert_split(&got, &sent);
}

#[test]
fn messages_go_to_the_remaining_member_after_one_disconnects() {
    let b = start_broker();
    for abrupt in [false, true] {
        let mut stay = Client::v5(b.mqtt, "stay");
        let mut leave = Client::v5(b.mqtt, "leave");
        stay.sub("$share/g/dc/t", QoS::AtLeastOnce);
        leave.sub("$share/g/dc/t", QoS::AtLeastOnce);
        let mut publ = Client::v5(b.mqtt, "pub");
        let first = messages("a", 4);
        for m in &first {
            publ.publish("dc/t", m, QoS::AtLeastOnce);
        }
        let got = drain(&mut [&mut stay, &mut leave], first.len());
        assert_split(&got, &first);

        if abrupt {
            leave.drop_abruptly();
        } else {
            leave.disconnect();
        }
        wait_connections(&b, 2);
        let second = messages("b", 8);
        for m in &second {
            publ.publish("dc/t", m, QoS::AtLeastOnce);
        }
        let got = drain(&mut [&mut stay], second.len());
        assert_eq!(
            got[0], second,
            "every later message goes to the remaining member (abrupt: {abrupt})"
        );
        stay.disconnect();
        publ.disconnect();
        wait_connections(&b, 0);
    }
}

#[test]
fn shared_and_plain_subscriptions_each_get_their_copy() {
    let b = start_broker();
    let mut plain = Client::v5(b.mqtt, "plain");
    plain.sub("sp/t", QoS::AtLeastOnce);
    let mut g1a = Client::v5(b.mqtt, "g1a");
    let mut g1b = Client::v5(b.mqtt, "g1b");
    let mut g2 = Client::v5(b.mqtt, "g2");
    g1a.sub("$share/one/sp/t", QoS::AtLeastOnce);
    g1b.sub("$share/one/sp/t", QoS::AtLeastOnce);
    g2.sub("$share/two/sp/#", QoS::AtLeastOnce);
    let mut publ = Client::v5(b.mqtt, "pub");
    let sent = messages("z", 6);
    for m in &sent {
        publ.publish("sp/t", m, QoS::AtLeastOnce);
    }
    assert_eq!(payloads(&collect(&mut plain, 6)), sent);
    assert_eq!(
        drain(&mut [&mut g2], 6)[0],
        sent,
        "group two has one member: it gets all"
    );
    let got = drain(&mut [&mut g1a, &mut g1b], 6);
    assert_split(&got, &sent);
}

#[test]
fn shared_subscription_with_no_local_is_a_protocol_error() {
    let b = start_broker();
    let mut c = Client::v5(b.mqtt, "nl");
    // Hand-made SUBSCRIBE: pid 1, no properties, "$share/g/t" with options No Local | QoS 1.
    let f = b"$share/g/t";
    let mut pkt = vec![
        0x82,
        (2 + 1 + 2 + f.len() + 1) as u8,
        0x00,
        0x01,
        0x00,
        0x00,
        f.len() as u8,
    ];
    pkt.extend_from_slice(f);
    pkt.push(0x05);
    c.send_raw(&pkt);
    c.expect_disconnect(&[0x82]);
}

#[test]
fn unsubscribing_from_a_shared_subscription_stops_delivery() {
    let b = start_broker();
    let mut m = Client::v5(b.mqtt, "m");
    m.sub("$share/g/us/t", QoS::AtLeastOnce);
    let ack = m.unsubscribe(&["$share/g/us/t"]);
    assert_eq!(ack.codes, vec![0]);
    let mut publ = Client::v5(b.mqtt, "pub");
    publ.publish("us/t", "x", QoS::AtLeastOnce);
    m.expect_no_publish(QUIET);
}

#[test]
fn unacknowledged_message_of_a_departed_member_goes_to_another_member() {
    let b = start_broker();
    let mut first = Client::v5(b.mqtt, "first");
    first.sub("$share/g/ho/t", QoS::AtLeastOnce);
    let mut publ = Client::v5(b.mqtt, "pub");
    publ.publish("ho/t", "handed over", QoS::AtLeastOnce);
    let got = first.recv_publish();
    assert_eq!(&got.payload[..], b"handed over");
    // Not acknowledged; a second member joins and the first one goes away.
    let mut second = Client::v5(b.mqtt, "second");
    second.sub("$share/g/ho/t", QoS::AtLeastOnce);
    first.drop_abruptly();
    let p = second.recv_publish_acked();
    assert_eq!(
        &p.payload[..],
        b"handed over",
        "the in-flight message is not stranded with the departed member"
    );
    second.expect_no_publish(QUIET);
}
