//! Property tests: every valid packet survives encode then decode, `encoded_len` is exact, and
//! decoding arbitrary bytes never panics.

use ballast_codec::topic::validate_topic_filter;
use ballast_codec::*;
use bytes::Bytes;
use proptest::prelude::*;

/// Which packet a property list is for, to keep only the properties allowed there
/// (5.0 §2.2.2.2). Deliberately written apart from the codec's own table.
#[derive(Clone, Copy, PartialEq)]
enum Ctx {
    Connect,
    ConnAck,
    Publish,
    PubAck,
    Subscribe,
    SubAck,
    Unsubscribe,
    UnsubAck,
    Disconnect,
    Auth,
    Will,
}

/// A UTF-8 string without U+0000.
fn string() -> impl Strategy<Value = String> {
    "[^\u{0}]{0,8}"
}

fn bytes(max: usize) -> impl Strategy<Value = Bytes> {
    prop::collection::vec(any::<u8>(), 0..max).prop_map(Bytes::from)
}

/// A valid topic name: non-empty, no wildcards.
fn topic_name() -> impl Strategy<Value = String> {
    prop::collection::vec("[^\u{0}+#/]{0,4}", 1..4)
        .prop_map(|levels| levels.join("/"))
        .prop_filter("non-empty", |t| !t.is_empty())
}

/// A valid topic filter, sometimes shared.
fn topic_filter() -> impl Strategy<Value = String> {
    let level = prop_oneof![3 => "[^\u{0}+#/]{0,4}", 1 => Just("+".to_string())];
    (
        prop::collection::vec(level, 1..4),
        any::<bool>(),
        prop::option::weighted(0.2, "[a-z]{1,4}"),
    )
        .prop_map(|(levels, hash, share)| {
            let mut f = levels.join("/");
            if hash {
                f.push_str("/#");
            }
            match share {
                Some(group) => format!("$share/{group}/{f}"),
                None => f,
            }
        })
        .prop_filter("valid filter", |f| validate_topic_filter(f).is_ok())
}

fn flag() -> impl Strategy<Value = Option<u8>> {
    prop::option::of(0u8..=1)
}

/// Any property list with valid values, every property possibly present.
fn any_properties() -> impl Strategy<Value = Properties> {
    let publish = (
        flag(),
        any::<Option<u32>>(),
        prop::option::of(string()),
        prop::option::of(topic_name()),
        prop::option::of(bytes(6)),
        prop::collection::vec(1u32..=268_435_455, 0..3),
        prop::option::of(1u16..),
    );
    let connect = (
        any::<Option<u32>>(),
        prop::option::of(string()),
        prop::option::of(bytes(6)),
        flag(),
        any::<Option<u32>>(),
        flag(),
        prop::option::of(1u16..),
        any::<Option<u16>>(),
        prop::option::of(1u32..),
    );
    let connack = (
        prop::option::of(string()),
        any::<Option<u16>>(),
        prop::option::of(string()),
        prop::option::of(string()),
        prop::option::of(string()),
        (flag(), flag(), flag(), flag(), flag()),
        prop::collection::vec((string(), string()), 0..3),
    );
    (publish, connect, connack).prop_map(|(p, c, a)| Properties {
        payload_format_indicator: p.0,
        message_expiry_interval: p.1,
        content_type: p.2,
        response_topic: p.3,
        correlation_data: p.4,
        subscription_identifiers: p.5,
        topic_alias: p.6,
        session_expiry_interval: c.0,
        authentication_method: c.1,
        authentication_data: c.2,
        request_problem_information: c.3,
        will_delay_interval: c.4,
        request_response_information: c.5,
        receive_maximum: c.6,
        topic_alias_maximum: c.7,
        maximum_packet_size: c.8,
        assigned_client_identifier: a.0,
        server_keep_alive: a.1,
        response_information: a.2,
        server_reference: a.3,
        reason_string: a.4,
        maximum_qos: a.5 .0,
        retain_available: a.5 .1,
        wildcard_subscription_available: a.5 .2,
        subscription_identifier_available: a.5 .3,
        shared_subscription_available: a.5 .4,
        user_properties: a.6,
    })
}

/// Clears a field unless `keep`.
fn keep<T: Default>(field: &mut T, keep: bool) {
    if !keep {
        *field = T::default();
    }
}

/// The properties allowed in `ctx` under `protocol` (none before 5.0).
fn properties(protocol: Protocol, ctx: Ctx) -> BoxedStrategy<Properties> {
    if !protocol.is_v5() {
        return Just(Properties::default()).boxed();
    }
    any_properties()
        .prop_map(move |mut p| {
            use Ctx::*;
            let is = |set: &[Ctx]| set.contains(&ctx);
            keep(&mut p.payload_format_indicator, is(&[Publish, Will]));
            keep(&mut p.message_expiry_interval, is(&[Publish, Will]));
            keep(&mut p.content_type, is(&[Publish, Will]));
            keep(&mut p.response_topic, is(&[Publish, Will]));
            keep(&mut p.correlation_data, is(&[Publish, Will]));
            keep(&mut p.subscription_identifiers, is(&[Publish, Subscribe]));
            if ctx == Subscribe {
                p.subscription_identifiers.truncate(1);
            }
            keep(&mut p.topic_alias, ctx == Publish);
            keep(
                &mut p.session_expiry_interval,
                is(&[Connect, ConnAck, Disconnect]),
            );
            keep(&mut p.authentication_method, is(&[Connect, ConnAck, Auth]));
            keep(&mut p.authentication_data, is(&[Connect, ConnAck, Auth]));
            if ctx == Connect && p.authentication_method.is_none() {
                p.authentication_data = None;
            }
            keep(&mut p.request_problem_information, ctx == Connect);
            keep(&mut p.request_response_information, ctx == Connect);
            keep(&mut p.will_delay_interval, ctx == Will);
            keep(&mut p.receive_maximum, is(&[Connect, ConnAck]));
            keep(&mut p.topic_alias_maximum, is(&[Connect, ConnAck]));
            keep(&mut p.maximum_packet_size, is(&[Connect, ConnAck]));
            keep(&mut p.assigned_client_identifier, ctx == ConnAck);
            keep(&mut p.server_keep_alive, ctx == ConnAck);
            keep(&mut p.response_information, ctx == ConnAck);
            keep(&mut p.maximum_qos, ctx == ConnAck);
            keep(&mut p.retain_available, ctx == ConnAck);
            keep(&mut p.wildcard_subscription_available, ctx == ConnAck);
            keep(&mut p.subscription_identifier_available, ctx == ConnAck);
            keep(&mut p.shared_subscription_available, ctx == ConnAck);
            keep(&mut p.server_reference, is(&[ConnAck, Disconnect]));
            let reason = [ConnAck, PubAck, SubAck, UnsubAck, Disconnect, Auth];
            keep(&mut p.reason_string, is(&reason));
            p
        })
        .boxed()
}

fn qos() -> impl Strategy<Value = QoS> {
    prop_oneof![
        Just(QoS::AtMostOnce),
        Just(QoS::AtLeastOnce),
        Just(QoS::ExactlyOnce)
    ]
}

fn connect(v5: bool) -> impl Strategy<Value = Packet> {
    let protocol = if v5 {
        Just(Protocol::V5).boxed()
    } else {
        prop_oneof![Just(Protocol::V3_1), Just(Protocol::V3_1_1)].boxed()
    };
    protocol.prop_flat_map(|protocol| {
        let will = (
            topic_name(),
            bytes(8),
            qos(),
            any::<bool>(),
            properties(protocol, Ctx::Will),
        )
            .prop_map(|(topic, payload, qos, retain, properties)| Will {
                topic,
                payload,
                qos,
                retain,
                properties,
            });
        (
            any::<bool>(),
            any::<u16>(),
            string(),
            prop::option::of(will),
            prop::option::of(string()),
            prop::option::of(bytes(8)),
            properties(protocol, Ctx::Connect),
        )
            .prop_map(
                move |(
                    clean_start,
                    keep_alive,
                    client_id,
                    will,
                    username,
                    password,
                    properties,
                )| {
                    // [MQTT-3.1.2-22] before 5.0 a password needs a user name.
                    let password = if protocol.is_v5() || username.is_some() {
                        password
                    } else {
                        None
                    };
                    Packet::Connect(Connect {
                        protocol,
                        clean_start,
                        keep_alive,
                        client_id,
                        will,
                        username,
                        password,
                        properties,
                    })
                },
            )
    })
}

fn publish(protocol: Protocol) -> impl Strategy<Value = Packet> {
    (
        qos(),
        any::<bool>(),
        any::<bool>(),
        topic_name(),
        1u16..,
        bytes(16),
        properties(protocol, Ctx::Publish),
        any::<bool>(),
    )
        .prop_map(
            move |(qos, dup, retain, topic, id, payload, properties, drop_topic)| {
                let at_most_once = qos == QoS::AtMostOnce;
                // 5.0 §3.3.2.3.4: with a Topic Alias the name may be empty.
                let topic = if drop_topic && properties.topic_alias.is_some() {
                    String::new()
                } else {
                    topic
                };
                Packet::Publish(Publish {
                    dup: dup && !at_most_once,
                    qos,
                    retain,
                    topic,
                    packet_id: if at_most_once { 0 } else { id },
                    payload,
                    properties,
                })
            },
        )
}

fn pub_ack(protocol: Protocol) -> impl Strategy<Value = Packet> {
    let code = if protocol.is_v5() {
        any::<u8>().boxed()
    } else {
        Just(0).boxed()
    };
    (0..4, 1u16.., code, properties(protocol, Ctx::PubAck)).prop_map(
        |(kind, packet_id, code, properties)| {
            let ack = PubAck {
                packet_id,
                code,
                properties,
            };
            match kind {
                0 => Packet::PubAck(ack),
                1 => Packet::PubRec(ack),
                2 => Packet::PubRel(ack),
                _ => Packet::PubComp(ack),
            }
        },
    )
}

fn subscribe(protocol: Protocol) -> impl Strategy<Value = Packet> {
    let v5 = protocol.is_v5();
    let filter = (topic_filter(), qos(), any::<bool>(), any::<bool>(), 0u8..=2).prop_map(
        move |(filter, qos, nl, rap, rh)| {
            let options = if v5 {
                // [MQTT-3.8.3-4] No Local is not allowed on a shared subscription.
                let nl = nl && !filter.starts_with("$share/");
                SubOptions {
                    qos,
                    no_local: nl,
                    retain_as_published: rap,
                    retain_handling: rh,
                }
            } else {
                SubOptions {
                    qos,
                    ..SubOptions::default()
                }
            };
            SubscribeFilter { filter, options }
        },
    );
    (
        1u16..,
        prop::collection::vec(filter, 1..4),
        properties(protocol, Ctx::Subscribe),
    )
        .prop_map(|(packet_id, filters, properties)| {
            Packet::Subscribe(Subscribe {
                packet_id,
                filters,
                properties,
            })
        })
}

fn unsubscribe(protocol: Protocol) -> impl Strategy<Value = Packet> {
    (
        1u16..,
        prop::collection::vec(topic_filter(), 1..4),
        properties(protocol, Ctx::Unsubscribe),
    )
        .prop_map(|(packet_id, filters, properties)| {
            Packet::Unsubscribe(Unsubscribe {
                packet_id,
                filters,
                properties,
            })
        })
}

fn acks(protocol: Protocol) -> impl Strategy<Value = Packet> {
    let v5 = protocol.is_v5();
    let codes = prop::collection::vec(any::<u8>(), 1..5);
    let suback = (1u16.., codes.clone(), properties(protocol, Ctx::SubAck)).prop_map(
        |(packet_id, codes, properties)| {
            Packet::SubAck(SubAck {
                packet_id,
                codes,
                properties,
            })
        },
    );
    let unsub_codes = if v5 {
        codes.boxed()
    } else {
        Just(Vec::new()).boxed()
    };
    let unsuback = (1u16.., unsub_codes, properties(protocol, Ctx::UnsubAck)).prop_map(
        |(packet_id, codes, properties)| {
            Packet::UnsubAck(UnsubAck {
                packet_id,
                codes,
                properties,
            })
        },
    );
    let connack_code = if v5 {
        any::<u8>().boxed()
    } else {
        (0u8..=5).boxed()
    };
    let connack = (
        any::<bool>(),
        connack_code,
        properties(protocol, Ctx::ConnAck),
    )
        .prop_map(|(session_present, code, properties)| {
            Packet::ConnAck(ConnAck {
                session_present,
                code,
                properties,
            })
        });
    prop_oneof![suback, unsuback, connack]
}

fn control(protocol: Protocol) -> BoxedStrategy<Packet> {
    let code = if protocol.is_v5() {
        any::<u8>().boxed()
    } else {
        Just(0).boxed()
    };
    let disconnect = (code, properties(protocol, Ctx::Disconnect))
        .prop_map(|(code, properties)| Packet::Disconnect(Disconnect { code, properties }));
    let pings = prop_oneof![Just(Packet::PingReq), Just(Packet::PingResp)];
    if !protocol.is_v5() {
        return prop_oneof![disconnect, pings].boxed();
    }
    let auth = (any::<u8>(), properties(protocol, Ctx::Auth))
        .prop_map(|(code, properties)| Packet::Auth(Auth { code, properties }));
    prop_oneof![disconnect, pings, auth].boxed()
}

/// Any valid packet for `protocol` (CONNECT may be 3.1 or 3.1.1 when `protocol` is 3.1.1).
fn packet(protocol: Protocol) -> impl Strategy<Value = Packet> {
    prop_oneof![
        connect(protocol.is_v5()).boxed(),
        publish(protocol).boxed(),
        pub_ack(protocol).boxed(),
        subscribe(protocol).boxed(),
        unsubscribe(protocol).boxed(),
        acks(protocol).boxed(),
        control(protocol),
    ]
}

fn round_trip(p: &Packet, protocol: Protocol) -> Result<(), TestCaseError> {
    let mut out = Vec::new();
    p.encode(protocol, &mut out);
    prop_assert_eq!(out.len(), p.encoded_len(protocol));
    let header = check(&out, usize::MAX).unwrap().unwrap();
    prop_assert_eq!(header.total_len(), out.len());
    prop_assert_eq!(header.packet_type(), p.type_id());
    prop_assert_eq!(&decode(Bytes::from(out), protocol).unwrap(), p);
    Ok(())
}

/// Decodes `frame` under every protocol; whatever decodes must survive a round trip.
fn decode_everywhere(frame: &[u8]) -> Result<(), TestCaseError> {
    let _ = check(frame, 1 << 20);
    for protocol in [Protocol::V3_1, Protocol::V3_1_1, Protocol::V5] {
        if let Ok(p) = decode(Bytes::copy_from_slice(frame), protocol) {
            round_trip(&p, protocol)?;
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(4096))]

    #[test]
    fn v3_1_1_round_trip(p in packet(Protocol::V3_1_1)) {
        round_trip(&p, Protocol::V3_1_1)?;
    }

    #[test]
    fn v5_round_trip(p in packet(Protocol::V5)) {
        round_trip(&p, Protocol::V5)?;
    }

    #[test]
    fn arbitrary_bytes_never_panic(data in prop::collection::vec(any::<u8>(), 0..64)) {
        decode_everywhere(&data)?;
    }

    #[test]
    fn arbitrary_body_after_a_valid_header_never_panics(
        first in 0x10u8..,
        body in prop::collection::vec(any::<u8>(), 0..96),
    ) {
        let mut frame = vec![first];
        let mut n = body.len();
        loop {
            let byte = (n & 0x7f) as u8;
            n >>= 7;
            frame.push(if n > 0 { byte | 0x80 } else { byte });
            if n == 0 { break; }
        }
        frame.extend_from_slice(&body);
        decode_everywhere(&frame)?;
    }

    #[test]
    fn mutated_valid_packets_never_panic(
        p in packet(Protocol::V5),
        at in any::<prop::sample::Index>(),
        xor in 1u8..,
    ) {
        let mut out = Vec::new();
        p.encode(Protocol::V5, &mut out);
        let i = at.index(out.len());
        out[i] ^= xor;
        decode_everywhere(&out)?;
    }
}
