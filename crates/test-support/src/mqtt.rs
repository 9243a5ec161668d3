//! MQTT clients for tests: a raw one and rumqttc helpers.
//!
//! [`Client`] is a raw MQTT client over a blocking `TcpStream` that sends and receives exact
//! packets through `ballast-codec`, so tests can look at reason codes, flags, DUP, packet ids
//! and properties. Every receive has a deadline; nothing here sleeps to synchronise.
//! The `rumq*` helpers wrap rumqttc's blocking client for tests that only need a real client.

use std::collections::VecDeque;
use std::io::{ErrorKind, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};

pub use crate::{start_broker, start_broker_with, test_config, wait_for, TestBroker};
pub use ballast_codec::{
    ConnAck, Connect, Disconnect, Packet, Properties, Protocol, PubAck, Publish, QoS, SubAck,
    SubOptions, Subscribe, SubscribeFilter, UnsubAck, Unsubscribe, Will,
};

/// How long a test waits for something that should happen.
pub const WAIT: Duration = Duration::from_secs(3);
/// How long a test watches to see that something does not happen.
pub const QUIET: Duration = Duration::from_millis(500);

/// `test_config()` without `$SYS` publications, whose retained messages would count in the
/// retained-messages gauge and limit.
pub fn quiet_config() -> crate::BrokerConfig {
    let mut c = test_config();
    c.sys_interval_secs = 0;
    c
}

pub fn start_quiet_broker() -> TestBroker {
    start_broker_with(quiet_config())
}

pub const V5: Protocol = Protocol::V5;
pub const V311: Protocol = Protocol::V3_1_1;

/// What the next read brought.
#[derive(Debug)]
#[allow(clippy::large_enum_variant)] // short-lived, returned by value in tests only
pub enum Next {
    Packet(Packet),
    Closed,
    Timeout,
}

/// A raw MQTT client.
pub struct Client {
    pub stream: TcpStream,
    pub proto: Protocol,
    buf: BytesMut,
    /// Packets read while looking for another kind, handed out first by later reads.
    pending: VecDeque<Packet>,
    next_pid: u16,
    eof: bool,
}

/// A CONNECT with clean start, keepalive 60 s and nothing else.
pub fn connect_packet(proto: Protocol, client_id: &str) -> Connect {
    Connect {
        protocol: proto,
        clean_start: true,
        keep_alive: 60,
        client_id: client_id.to_string(),
        will: None,
        username: None,
        password: None,
        properties: Properties::default(),
    }
}

/// A PUBLISH with no packet id (filled in by [`Client::publish_packet`]).
pub fn publish_packet(topic: &str, payload: impl AsRef<[u8]>, qos: QoS, retain: bool) -> Publish {
    Publish {
        dup: false,
        qos,
        retain,
        topic: topic.to_string(),
        packet_id: 0,
        payload: Bytes::copy_from_slice(payload.as_ref()),
        properties: Properties::default(),
    }
}

pub fn will(topic: &str, payload: &str, qos: QoS, retain: bool) -> Will {
    Will {
        topic: topic.to_string(),
        payload: Bytes::copy_from_slice(payload.as_bytes()),
        qos,
        retain,
        properties: Properties::default(),
    }
}

pub fn filter(f: &str, qos: QoS) -> SubscribeFilter {
    SubscribeFilter {
        filter: f.to_string(),
        options: SubOptions {
            qos,
            ..SubOptions::default()
        },
    }
}

pub fn encode(p: &Packet, proto: Protocol) -> Vec<u8> {
    let mut out = BytesMut::new();
    p.encode(proto, &mut out);
    out.to_vec()
}

/// The value of a metrics counter list entry (`closed` or `limit_hits`).
pub fn count(list: &[(&'static str, u64)], name: &str) -> u64 {
    list.iter()
        .find(|(n, _)| *n == name)
        .map(|(_, v)| *v)
        .unwrap_or_else(|| panic!("no metric entry named {name:?} in {list:?}"))
}

pub fn closed_count(b: &TestBroker, reason: &str) -> u64 {
    count(&b.metrics().closed, reason)
}

pub fn limit_hits(b: &TestBroker, limit: &str) -> u64 {
    count(&b.metrics().limit_hits, limit)
}

pub fn protocol_errors(b: &TestBroker, code: u8) -> u64 {
    b.metrics()
        .protocol_errors
        .iter()
        .find(|(c, _)| *c == code)
        .map(|(_, v)| *v)
        .unwrap_or(0)
}

/// Waits until the broker's counter of closes for `reason` reaches `n`.
pub fn wait_closed(b: &TestBroker, reason: &str, n: u64) {
    assert!(
        wait_for(WAIT, || closed_count(b, reason) >= n),
        "closed[{reason}] did not reach {n}: {:?}",
        b.metrics().closed
    );
}

pub fn wait_limit(b: &TestBroker, limit: &str, n: u64) {
    assert!(
        wait_for(WAIT, || limit_hits(b, limit) >= n),
        "limit_hits[{limit}] did not reach {n}: {:?}",
        b.metrics().limit_hits
    );
}

pub fn wait_connections(b: &TestBroker, n: u64) {
    assert!(
        wait_for(WAIT, || b.metrics().connections == n),
        "connections did not become {n}: {}",
        b.metrics().connections
    );
}

impl Client {
    /// A TCP connection with nothing sent yet.
    pub fn open(addr: SocketAddr, proto: Protocol) -> Client {
        Client::adopt(TcpStream::connect(addr).expect("tcp connect"), proto)
    }

    /// Wraps an already connected stream.
    pub fn adopt(stream: TcpStream, proto: Protocol) -> Client {
        stream.set_nodelay(true).ok();
        Client {
            stream,
            proto,
            buf: BytesMut::new(),
            pending: VecDeque::new(),
            next_pid: 1,
            eof: false,
        }
    }

    /// Sends `connect` and returns the CONNACK (panics if none comes).
    pub fn connect_with(addr: SocketAddr, connect: Connect) -> (Client, ConnAck) {
        let mut c = Client::open(addr, connect.protocol);
        c.send(Packet::Connect(connect));
        let ack = c.recv_connack();
        (c, ack)
    }

    pub fn try_connect(
        addr: SocketAddr,
        proto: Protocol,
        id: &str,
        f: impl FnOnce(&mut Connect),
    ) -> (Client, ConnAck) {
        let mut connect = connect_packet(proto, id);
        f(&mut connect);
        Client::connect_with(addr, connect)
    }

    /// Connects and asserts the CONNACK accepted the connection.
    pub fn connect(
        addr: SocketAddr,
        proto: Protocol,
        id: &str,
        f: impl FnOnce(&mut Connect),
    ) -> (Client, ConnAck) {
        let (c, ack) = Client::try_connect(addr, proto, id, f);
        assert_eq!(
            ack.code, 0,
            "CONNACK refused the connection of {id:?}: {ack:?}"
        );
        (c, ack)
    }

    /// A 5.0 client with clean start.
    pub fn v5(addr: SocketAddr, id: &str) -> Client {
        Client::connect(addr, V5, id, |_| {}).0
    }

    /// A 3.1.1 client with a clean session.
    pub fn v311(addr: SocketAddr, id: &str) -> Client {
        Client::connect(addr, V311, id, |_| {}).0
    }

    pub fn recv_connack(&mut self) -> ConnAck {
        match self.next(WAIT) {
            Next::Packet(Packet::ConnAck(a)) => a,
            other => panic!("expected CONNACK, got {other:?}"),
        }
    }

    pub fn send(&mut self, p: Packet) {
        let bytes = encode(&p, self.proto);
        self.send_raw(&bytes);
    }

    pub fn send_raw(&mut self, bytes: &[u8]) {
        self.stream.write_all(bytes).expect("write to broker");
    }

    /// Like `send_raw` but tolerates a connection the broker already closed.
    pub fn try_send_raw(&mut self, bytes: &[u8]) -> bool {
        self.stream.write_all(bytes).is_ok()
    }

    pub fn pid(&mut self) -> u16 {
        let p = self.next_pid;
        self.next_pid = if p == u16::MAX { 1 } else { p + 1 };
        p
    }

    /// Parses one complete packet from the read buffer, if there is one.
    fn parse(&mut self) -> Option<Packet> {
        let header =
            ballast_codec::check(&self.buf, usize::MAX).expect("broker sent a bad fixed header")?;
        if self.buf.len() < header.total_len() {
            return None;
        }
        let frame = self.buf.split_to(header.total_len()).freeze();
        match ballast_codec::decode(frame.clone(), self.proto) {
            Ok(p) => Some(p),
            Err(e) => panic!(
                "broker sent a packet that does not decode ({e}): {:02x?}",
                &frame[..]
            ),
        }
    }

    /// The next packet from the broker (pending ones first), or closed, or timeout.
    pub fn next(&mut self, timeout: Duration) -> Next {
        if let Some(p) = self.pending.pop_front() {
            return Next::Packet(p);
        }
        self.read_packet(Instant::now() + timeout)
    }

    fn read_packet(&mut self, deadline: Instant) -> Next {
        let mut tmp = [0u8; 16 * 1024];
        loop {
            if let Some(p) = self.parse() {
                return Next::Packet(p);
            }
            if self.eof {
                return Next::Closed;
            }
            let now = Instant::now();
            if now >= deadline {
                return Next::Timeout;
            }
            let left = (deadline - now).max(Duration::from_millis(1));
            self.stream.set_read_timeout(Some(left)).unwrap();
            match self.stream.read(&mut tmp) {
                Ok(0) => self.eof = true,
                Ok(n) => self.buf.extend_from_slice(&tmp[..n]),
                Err(e)
                    if matches!(
                        e.kind(),
                        ErrorKind::WouldBlock | ErrorKind::TimedOut | ErrorKind::Interrupted
                    ) => {}
                // A reset or other error: the broker has gone.
                Err(_) => self.eof = true,
            }
        }
    }

    /// The next packet for which `pred` holds; packets read meanwhile are kept for later.
    pub fn recv_where(
        &mut self,
        timeout: Duration,
        what: &str,
        pred: impl Fn(&Packet) -> bool,
    ) -> Packet {
        self.try_recv_where(timeout, &pred)
            .unwrap_or_else(|| panic!("expected {what}, got nothing (pending: {:?})", self.pending))
    }

    pub fn try_recv_where(
        &mut self,
        timeout: Duration,
        pred: impl Fn(&Packet) -> bool,
    ) -> Option<Packet> {
        if let Some(i) = self.pending.iter().position(&pred) {
            return self.pending.remove(i);
        }
        let deadline = Instant::now() + timeout;
        loop {
            match self.read_packet(deadline) {
                Next::Packet(p) if pred(&p) => return Some(p),
                Next::Packet(p) => self.pending.push_back(p),
                Next::Closed | Next::Timeout => return None,
            }
        }
    }

    /// The next packet, whatever it is (panics on timeout or close).
    pub fn recv(&mut self) -> Packet {
        match self.next(WAIT) {
            Next::Packet(p) => p,
            other => panic!("expected a packet, got {other:?}"),
        }
    }

    pub fn recv_publish(&mut self) -> Publish {
        self.recv_publish_within(WAIT)
            .expect("expected a PUBLISH, got none")
    }

    pub fn recv_publish_within(&mut self, timeout: Duration) -> Option<Publish> {
        match self.try_recv_where(timeout, |p| matches!(p, Packet::Publish(_)))? {
            Packet::Publish(p) => Some(p),
            _ => unreachable!(),
        }
    }

    /// Receives a PUBLISH and acknowledges it as its QoS requires.
    pub fn recv_publish_acked(&mut self) -> Publish {
        let p = self.recv_publish();
        self.ack(&p);
        p
    }

    /// Asserts that no PUBLISH arrives within `d`.
    pub fn expect_no_publish(&mut self, d: Duration) {
        if let Some(p) = self.recv_publish_within(d) {
            panic!("expected no PUBLISH, got {p:?}");
        }
    }

    /// Acknowledges a delivered PUBLISH: PUBACK for QoS 1, PUBREC/PUBREL/PUBCOMP for QoS 2.
    pub fn ack(&mut self, p: &Publish) {
        let ack = PubAck {
            packet_id: p.packet_id,
            code: 0,
            properties: Properties::default(),
        };
        match p.qos {
            QoS::AtMostOnce => {}
            QoS::AtLeastOnce => self.send(Packet::PubAck(ack)),
            QoS::ExactlyOnce => {
                self.send(Packet::PubRec(ack.clone()));
                let rel = self.recv_where(
                    WAIT,
                    "PUBREL",
                    |x| matches!(x, Packet::PubRel(r) if r.packet_id == p.packet_id),
                );
                let Packet::PubRel(rel) = rel else {
                    unreachable!()
                };
                assert_eq!(rel.code, 0, "PUBREL reason code");
                self.send(Packet::PubComp(ack));
            }
        }
    }

    /// Sends a PUBLISH (giving it a packet id when QoS > 0 and it has none) and completes the
    /// flow: returns the PUBACK code (QoS 1), the PUBREC code (QoS 2, after PUBREL/PUBCOMP when
    /// it is a success) or 0 (QoS 0).
    pub fn publish_packet(&mut self, mut p: Publish) -> u8 {
        if p.qos != QoS::AtMostOnce && p.packet_id == 0 {
            p.packet_id = self.pid();
        }
        let pid = p.packet_id;
        let qos = p.qos;
        self.send(Packet::Publish(p));
        match qos {
            QoS::AtMostOnce => 0,
            QoS::AtLeastOnce => match self.recv_where(
                WAIT,
                "PUBACK",
                |x| matches!(x, Packet::PubAck(a) if a.packet_id == pid),
            ) {
                Packet::PubAck(a) => a.code,
                _ => unreachable!(),
            },
            QoS::ExactlyOnce => {
                let Packet::PubRec(rec) = self.recv_where(
                    WAIT,
                    "PUBREC",
                    |x| matches!(x, Packet::PubRec(a) if a.packet_id == pid),
                ) else {
                    unreachable!()
                };
                if rec.code >= 0x80 {
                    return rec.code;
                }
                self.send(Packet::PubRel(PubAck {
                    packet_id: pid,
                    code: 0,
                    properties: Properties::default(),
                }));
                let Packet::PubComp(comp) = self.recv_where(
                    WAIT,
                    "PUBCOMP",
                    |x| matches!(x, Packet::PubComp(a) if a.packet_id == pid),
                ) else {
                    unreachable!()
                };
                assert_eq!(comp.code, 0, "PUBCOMP reason code");
                rec.code
            }
        }
    }

    pub fn publish(&mut self, topic: &str, payload: impl AsRef<[u8]>, qos: QoS) -> u8 {
        self.publish_packet(publish_packet(topic, payload, qos, false))
    }

    pub fn publish_retained(&mut self, topic: &str, payload: impl AsRef<[u8]>, qos: QoS) -> u8 {
        self.publish_packet(publish_packet(topic, payload, qos, true))
    }

    pub fn subscribe_many(
        &mut self,
        filters: Vec<SubscribeFilter>,
        properties: Properties,
    ) -> SubAck {
        let pid = self.pid();
        self.send(Packet::Subscribe(Subscribe {
            packet_id: pid,
            filters,
            properties,
        }));
        match self.recv_where(
            WAIT,
            "SUBACK",
            |x| matches!(x, Packet::SubAck(a) if a.packet_id == pid),
        ) {
            Packet::SubAck(a) => a,
            _ => unreachable!(),
        }
    }

    /// Subscribes to one filter; returns its SUBACK code.
    pub fn subscribe(&mut self, f: &str, qos: QoS) -> u8 {
        let ack = self.subscribe_many(vec![filter(f, qos)], Properties::default());
        assert_eq!(ack.codes.len(), 1, "SUBACK codes: {ack:?}");
        ack.codes[0]
    }

    /// Subscribes and asserts the broker granted `qos`.
    pub fn sub(&mut self, f: &str, qos: QoS) {
        assert_eq!(self.subscribe(f, qos), qos as u8, "SUBACK for {f:?}");
    }

    pub fn subscribe_opts(&mut self, f: &str, options: SubOptions, properties: Properties) -> u8 {
        let ack = self.subscribe_many(
            vec![SubscribeFilter {
                filter: f.to_string(),
                options,
            }],
            properties,
        );
        ack.codes[0]
    }

    pub fn unsubscribe(&mut self, filters: &[&str]) -> UnsubAck {
        let pid = self.pid();
        self.send(Packet::Unsubscribe(Unsubscribe {
            packet_id: pid,
            filters: filters.iter().map(|s| s.to_string()).collect(),
            properties: Properties::default(),
        }));
        match self.recv_where(
            WAIT,
            "UNSUBACK",
            |x| matches!(x, Packet::UnsubAck(a) if a.packet_id == pid),
        ) {
            Packet::UnsubAck(a) => a,
            _ => unreachable!(),
        }
    }

    pub fn ping(&mut self) {
        self.send(Packet::PingReq);
        self.recv_where(WAIT, "PINGRESP", |x| matches!(x, Packet::PingResp));
    }

    /// Round trip that proves the broker has processed everything sent before.
    pub fn sync(&mut self) {
        self.ping();
    }

    /// Sends DISCONNECT (normal) and waits for the broker to close the connection.
    pub fn disconnect(self) {
        self.disconnect_with(Disconnect::default());
    }

    pub fn disconnect_with(mut self, d: Disconnect) {
        self.send(Packet::Disconnect(d));
        self.stream.shutdown(Shutdown::Write).ok();
        let deadline = Instant::now() + WAIT;
        loop {
            match self.read_packet(deadline) {
                Next::Packet(_) => {}
                Next::Closed => return,
                Next::Timeout => panic!("broker did not close the connection after DISCONNECT"),
            }
        }
    }

    /// Closes the socket without DISCONNECT.
    pub fn drop_abruptly(self) {
        self.stream.shutdown(Shutdown::Both).ok();
    }

    /// Reads until the broker closes the connection; returns the DISCONNECT it sent first, if
    /// any. Panics if the connection stays open for `timeout`. Other packets are ignored.
    pub fn wait_closed(&mut self, timeout: Duration) -> Option<Disconnect> {
        let deadline = Instant::now() + timeout;
        let mut disconnect = None;
        for p in std::mem::take(&mut self.pending) {
            if let Packet::Disconnect(d) = p {
                disconnect = Some(d);
            }
        }
        loop {
            match self.read_packet(deadline) {
                Next::Packet(Packet::Disconnect(d)) => disconnect = Some(d),
                Next::Packet(_) => {}
                Next::Closed => return disconnect,
                Next::Timeout => panic!(
                    "connection still open after {timeout:?} (DISCONNECT seen: {disconnect:?})"
                ),
            }
        }
    }

    /// Asserts that the broker sends DISCONNECT with one of `codes` and closes the connection.
    pub fn expect_disconnect(&mut self, codes: &[u8]) -> Disconnect {
        match self.wait_closed(WAIT) {
            Some(d) => {
                assert!(
                    codes.contains(&d.code),
                    "DISCONNECT reason 0x{:02x}, expected one of {codes:02x?}: {d:?}",
                    d.code
                );
                d
            }
            None => panic!("connection closed without DISCONNECT (expected one of {codes:02x?})"),
        }
    }

    /// Asserts that the broker closes the connection without sending DISCONNECT (3.1.1).
    pub fn expect_closed_silently(&mut self) {
        if let Some(d) = self.wait_closed(WAIT) {
            panic!("a 3.1.1 connection got a DISCONNECT packet: {d:?}");
        }
    }

    /// Whether the connection is still open after `d` (reads and discards packets meanwhile).
    pub fn still_open_after(&mut self, d: Duration) -> bool {
        let deadline = Instant::now() + d;
        loop {
            match self.read_packet(deadline) {
                Next::Packet(p) => self.pending.push_back(p),
                Next::Closed => return false,
                Next::Timeout => return true,
            }
        }
    }

    /// Publishes `topic` at QoS 0 from a second client and checks this one receives it.
    pub fn assert_receives_from(&mut self, other: &mut Client, topic: &str) {
        let payload = format!("probe-{}", self.pid());
        other.publish(topic, &payload, QoS::AtLeastOnce);
        let p = self.recv_publish();
        assert_eq!(p.topic, topic);
        assert_eq!(&p.payload[..], payload.as_bytes());
        self.ack(&p);
    }
}

/// Collects PUBLISHes from `c` until `n` have come or `WAIT` passes; acknowledges each.
pub fn collect(c: &mut Client, n: usize) -> Vec<Publish> {
    let mut out = Vec::new();
    let deadline = Instant::now() + WAIT;
    while out.len() < n {
        let left = deadline.saturating_duration_since(Instant::now());
        match c.recv_publish_within(left) {
            Some(p) => {
                c.ack(&p);
                out.push(p);
            }
            None => break,
        }
    }
    out
}

pub fn payloads(ps: &[Publish]) -> Vec<String> {
    ps.iter()
        .map(|p| String::from_utf8_lossy(&p.payload).into_owned())
        .collect()
}

// ---- rumqttc (3.1.1) -------------------------------------------------------------------

/// A rumqttc 3.1.1 client, connected (CONNACK received).
pub fn rumq(b: &TestBroker, id: &str, clean: bool) -> (rumqttc::Client, rumqttc::Connection) {
    let mut o = rumqttc::MqttOptions::new(id, "127.0.0.1", b.port());
    o.set_keep_alive(Duration::from_secs(30));
    o.set_clean_session(clean);
    rumq_with(o)
}

pub fn rumq_with(o: rumqttc::MqttOptions) -> (rumqttc::Client, rumqttc::Connection) {
    let (client, mut conn) = rumqttc::Client::new(o, 100);
    rumq_until(&mut conn, "CONNACK", |e| {
        matches!(e, rumqttc::Event::Incoming(rumqttc::Packet::ConnAck(_)))
    });
    (client, conn)
}

/// Polls the connection until `pred` holds for an event (panics after `WAIT` or on an error).
pub fn rumq_until(
    conn: &mut rumqttc::Connection,
    what: &str,
    mut pred: impl FnMut(&rumqttc::Event) -> bool,
) -> rumqttc::Event {
    let deadline = Instant::now() + WAIT;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match conn.recv_timeout(left) {
            Ok(Ok(e)) if pred(&e) => return e,
            Ok(Ok(_)) => {}
            Ok(Err(e)) => panic!("rumqttc connection error while waiting for {what}: {e:?}"),
            Err(_) => panic!("rumqttc: no {what} within {WAIT:?}"),
        }
    }
}

/// The next incoming PUBLISH within `timeout`, if any.
pub fn rumq_publish(conn: &mut rumqttc::Connection, timeout: Duration) -> Option<rumqttc::Publish> {
    let deadline = Instant::now() + timeout;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match conn.recv_timeout(left) {
            Ok(Ok(rumqttc::Event::Incoming(rumqttc::Packet::Publish(p)))) => return Some(p),
            Ok(Ok(_)) => {}
            Ok(Err(e)) => panic!("rumqttc connection error: {e:?}"),
            Err(_) => return None,
        }
    }
}

/// Subscribes and waits for the SUBACK; returns its return codes.
pub fn rumq_subscribe(
    client: &rumqttc::Client,
    conn: &mut rumqttc::Connection,
    f: &str,
    qos: rumqttc::QoS,
) -> Vec<rumqttc::SubscribeReasonCode> {
    client.subscribe(f, qos).unwrap();
    match rumq_until(conn, "SUBACK", |e| {
        matches!(e, rumqttc::Event::Incoming(rumqttc::Packet::SubAck(_)))
    }) {
        rumqttc::Event::Incoming(rumqttc::Packet::SubAck(a)) => a.return_codes,
        _ => unreachable!(),
    }
}

// ---- rumqttc (5.0) -----------------------------------------------------------------------

pub fn rumq5(b: &TestBroker, id: &str) -> (rumqttc::v5::Client, rumqttc::v5::Connection) {
    let mut o = rumqttc::v5::MqttOptions::new(id, "127.0.0.1", b.port());
    o.set_keep_alive(Duration::from_secs(30));
    rumq5_with(o)
}

pub fn rumq5_with(o: rumqttc::v5::MqttOptions) -> (rumqttc::v5::Client, rumqttc::v5::Connection) {
    let (client, mut conn) = rumqttc::v5::Client::new(o, 100);
    rumq5_until(&mut conn, "CONNACK", |e| {
        matches!(
            e,
            rumqttc::v5::Event::Incoming(rumqttc::v5::mqttbytes::v5::Packet::ConnAck(_))
        )
    });
    (client, conn)
}

pub fn rumq5_until(
    conn: &mut rumqttc::v5::Connection,
    what: &str,
    mut pred: impl FnMut(&rumqttc::v5::Event) -> bool,
) -> rumqttc::v5::Event {
    let deadline = Instant::now() + WAIT;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match conn.recv_timeout(left) {
            Ok(Ok(e)) if pred(&e) => return e,
            Ok(Ok(_)) => {}
            Ok(Err(e)) => panic!("rumqttc v5 connection error while waiting for {what}: {e:?}"),
            Err(_) => panic!("rumqttc v5: no {what} within {WAIT:?}"),
        }
    }
}

pub fn rumq5_publish(
    conn: &mut rumqttc::v5::Connection,
    timeout: Duration,
) -> Option<rumqttc::v5::mqttbytes::v5::Publish> {
    let deadline = Instant::now() + timeout;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match conn.recv_timeout(left) {
            Ok(Ok(rumqttc::v5::Event::Incoming(rumqttc::v5::mqttbytes::v5::Packet::Publish(
                p,
            )))) => return Some(p),
            Ok(Ok(_)) => {}
            Ok(Err(e)) => panic!("rumqttc v5 connection error: {e:?}"),
            Err(_) => return None,
        }
    }
}
