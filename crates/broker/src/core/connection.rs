//! One client connection's protocol state: CONNECT handling, the incoming QoS flows,
//! subscriptions, keepalive, topic aliases, and the will.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::time::{Duration, Instant};

use ballast_codec::{
    ConnAck, Connect, Disconnect, Packet, Properties, Protocol, PubAck, Publish, QoS, ReasonCode,
    SubAck, Subscribe, UnsubAck, Unsubscribe,
};
use bytes::Bytes;

use ballast_store::{Op, Outcome};

use super::broker::{split_shared, Broker};
use super::journal;
use super::message::Message;
use super::session::{ClientParams, ConnLoc, Session, SessionState, Subscription};
use crate::metrics::{CloseReason, Limit};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// Accepted; waiting for CONNECT.
    AwaitConnect,
    /// CONNACK sent.
    Active,
}

/// The connection must end: why, and the reason code a 5.0 client is sent in DISCONNECT
/// (none for 3.1.1, where the server just closes, or when no DISCONNECT is due).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Close {
    pub reason: CloseReason,
    pub code: Option<ReasonCode>,
    pub message: Option<&'static str>,
}

impl Close {
    pub fn new(reason: CloseReason, code: Option<ReasonCode>, message: &'static str) -> Close {
        Close {
            reason,
            code,
            message: Some(message),
        }
    }

    pub fn silent(reason: CloseReason) -> Close {
        Close {
            reason,
            code: None,
            message: None,
        }
    }

    fn protocol(message: &'static str) -> Close {
        Close::new(
            CloseReason::ProtocolError,
            Some(ReasonCode::ProtocolError),
            message,
        )
    }
}

struct Will {
    /// The will message, without expiry: its Message Expiry Interval counts from publication.
    msg: Message,
    expiry_secs: Option<u32>,
    delay_secs: u32,
}

impl Will {
    /// The message as published at `at`.
    fn at(self, at: Instant) -> Arc<Message> {
        let mut msg = self.msg;
        msg.expires_at = self.expiry_secs.map(|s| at + Duration::from_secs(s as u64));
        Arc::new(msg)
    }
}

/// State a connection needs only sometimes, boxed so an idle connection stays small.
#[derive(Default)]
struct Extra {
    will: Option<Will>,
    /// Bytes to send before a session exists, or after it was taken over: this connection's
    /// last words (a refusing CONNACK, DISCONNECT 0x8E).
    direct: Vec<u8>,
    /// Incoming topic aliases (5.0).
    aliases: HashMap<u16, Arc<str>>,
    /// Answers held back until the store ticket they depend on is durable, in the order they
    /// were made (PUBACKs go out in PUBLISH order [MQTT-4.6.0-2]); ticket 0 waits only for
    /// those ahead of it.
    held: VecDeque<(u64, Packet)>,
    /// Listed by the loop among connections waiting for the store.
    waiting: bool,
    /// Reading stopped by `wants_read`; the loop reads again once answers are released.
    paused: bool,
}

/// Reason string of a refusal caused by the store.
const STORE_FAILED: &str = "the message could not be stored";

pub struct Connection {
    pub loc: ConnLoc,
    pub phase: Phase,
    pub protocol: Protocol,
    /// Accepted at (before CONNECT) or last packet received (after).
    pub last_recv: Instant,
    /// 1.5 x the keepalive granted, in milliseconds; 0 when keepalive is off.
    pub keepalive_ms: u32,
    /// The connection limit was already reached when this one was accepted.
    pub over_limit: bool,
    pub session: Option<Arc<Session>>,
    extra: Option<Box<Extra>>,
}

impl Connection {
    pub fn new(loc: ConnLoc, now: Instant, over_limit: bool) -> Connection {
        Connection {
            loc,
            phase: Phase::AwaitConnect,
            protocol: Protocol::V3_1_1,
            last_recv: now,
            keepalive_ms: 0,
            over_limit,
            session: None,
            extra: None,
        }
    }

    fn extra(&mut self) -> &mut Extra {
        self.extra.get_or_insert_with(Default::default)
    }

    /// Where this connection's last words are written (see `Extra::direct`).
    pub fn direct(&mut self) -> &mut Vec<u8> {
        &mut self.extra().direct
    }

    /// Moves the bytes written to `direct` to the end of `out`.
    pub fn take_direct(&mut self, out: &mut Vec<u8>) {
        if let Some(x) = &mut self.extra {
            out.append(&mut x.direct);
        }
    }

    /// When the connection must have sent something by (CONNECT, or the keepalive).
    pub fn deadline(&self, connect_timeout: Duration) -> Option<Instant> {
        match self.phase {
            Phase::AwaitConnect => Some(self.last_recv + connect_timeout),
            Phase::Active if self.keepalive_ms > 0 => {
                Some(self.last_recv + Duration::from_millis(self.keepalive_ms as u64))
            }
            Phase::Active => None,
        }
    }

    /// Writes a packet to the client: into the session outbox once there is one.
    pub fn send(&mut self, b: &Broker, p: &Packet) {
        b.metrics.add(|c| &c.packets_sent, 1);
        if let Some(s) = &self.session {
            let mut st = s.state.lock();
            if st.conn == Some(self.loc) {
                st.write(p);
                b.schedule_flush(&mut st);
                return;
            }
        }
        // No session yet, or it was taken over: this connection's own last words (a refusing
        // CONNACK, DISCONNECT 0x8E) go out directly.
        p.encode(self.protocol, self.direct());
    }

    /// Answers a packet once what handling it submitted to the store is durable: the answer is
    /// held until the ticket resolves (sent at once when nothing was submitted and nothing is
    /// held ahead of it).
    fn respond(&mut self, b: &Broker, p: Packet) {
        self.respond_after(b, journal::ticket(), p);
    }

    /// Like `respond`, waiting for `ticket` at least (for answers that depend on writes made
    /// by other threads: everything submitted so far is covered by `Writer::last`).
    fn respond_after(&mut self, b: &Broker, ticket: u64, p: Packet) {
        let ticket = ticket.max(journal::ticket());
        let held = self.extra.as_ref().is_some_and(|x| !x.held.is_empty());
        if ticket == 0 && !held {
            self.send(b, &p);
        } else {
            self.extra().held.push_back((ticket, p));
        }
    }

    /// Answers are held back for the store.
    pub fn has_held(&self) -> bool {
        self.extra.as_ref().is_some_and(|x| !x.held.is_empty())
    }

    /// Marks the connection as listed by its loop among those waiting for the store; returns
    /// false if it already was.
    pub fn list_waiting(&mut self) -> bool {
        let x = self.extra();
        !std::mem::replace(&mut x.waiting, true)
    }

    pub fn unlist_waiting(&mut self) {
        if let Some(x) = self.extra.as_mut() {
            x.waiting = false;
        }
    }

    /// Records that the loop stopped reading because `wants_read` said so.
    pub fn pause_reading(&mut self) {
        self.extra().paused = true;
    }

    /// Reading was paused and may resume now; clears the mark when it returns true.
    pub fn resume_reading(&mut self, b: &Broker) -> bool {
        let paused = self.extra.as_ref().is_some_and(|x| x.paused);
        if paused && self.wants_read(b) {
            self.extra().paused = false;
            return true;
        }
        false
    }

    /// Whether the loop may read more packets now: not while the answers held for the store
    /// reach our Receive Maximum, or the store's backlog is over its limit.
    pub fn wants_read(&self, b: &Broker) -> bool {
        let held = self.extra.as_ref().map_or(0, |x| x.held.len());
        if held == 0 {
            return true;
        }
        if held >= b.config.limits.receive_maximum as usize {
            return false;
        }
        match &b.writer {
            Some(w) if w.backlog_bytes() > b.config.store.max_backlog_bytes as u64 => {
                b.metrics.limit(Limit::StoreBacklog);
                false
            }
            _ => true,
        }
    }

    /// Sends the held answers whose store writes have resolved, in order. A publish whose
    /// write failed is refused: 0x80 with a reason string for 5.0; 3.1.1 has no negative
    /// acknowledgement, so its connection is closed. Returns whether answers remain held.
    pub fn release_held(&mut self, b: &Broker) -> Result<bool, Close> {
        let Some(w) = &b.writer else {
            return Ok(false);
        };
        loop {
            let Some(x) = self.extra.as_mut() else {
                return Ok(false);
            };
            let Some((ticket, _)) = x.held.front() else {
                return Ok(false);
            };
            let outcome = if *ticket == 0 {
                Outcome::Durable
            } else {
                w.outcome(*ticket)
            };
            if outcome == Outcome::Pending {
                return Ok(true);
            }
            let (_, mut p) = x.held.pop_front().expect("front exists");
            if outcome == Outcome::Failed {
                self.refuse_stored(b, &mut p)?;
            }
            self.send(b, &p);
        }
    }

    /// Turns an answer into a refusal after its store write failed.
    fn refuse_stored(&mut self, b: &Broker, p: &mut Packet) -> Result<(), Close> {
        let is_rec = matches!(p, Packet::PubRec(_));
        match p {
            Packet::PubComp(c) => {
                // The packet id could not be forgotten in the store. Keep it here too and do
                // not confirm: the client sends PUBREL again when it reconnects.
                let mut st = self.session().state.lock();
                if !st.fl().incoming_qos2.contains(&c.packet_id) {
                    st.fl_mut().incoming_qos2.push(c.packet_id);
                }
                return Err(Close::new(
                    CloseReason::StoreFailure,
                    Some(ReasonCode::UnspecifiedError),
                    STORE_FAILED,
                ));
            }
            Packet::PubAck(a) | Packet::PubRec(a) if a.code < 0x80 => {
                b.metrics.add(|c| &c.store_refused, 1);
                if is_rec {
                    // The flow ends here: forget the packet id so its reuse is a new message.
                    let mut st = self.session().state.lock();
                    st.fl_mut().incoming_qos2.retain(|id| *id != a.packet_id);
                }
                if !self.protocol.is_v5() {
                    return Err(Close::new(CloseReason::StoreFailure, None, STORE_FAILED));
                }
                a.code = ReasonCode::UnspecifiedError.code();
                a.properties = self.reason(STORE_FAILED);
            }
            Packet::SubAck(s) => {
                // 0x80 is "failure" in 3.1.1 and "unspecified error" in 5.0.
                for c in s.codes.iter_mut() {
                    *c = 0x80;
                }
                s.properties = self.reason("the subscription could not be stored");
            }
            _ => {}
        }
        Ok(())
    }

    /// A 5.0 DISCONNECT for a close, when one is due. The server sends DISCONNECT only after
    /// CONNACK [MQTT-3.14.0-1].
    pub fn farewell(&mut self, b: &Broker, close: &Close) {
        if let (true, Phase::Active, Some(code)) = (self.protocol.is_v5(), self.phase, close.code) {
            let mut properties = Properties::default();
            if self.problem_info() {
                properties.reason_string = close.message.map(str::to_string);
            }
            self.send(
                b,
                &Packet::Disconnect(Disconnect {
                    code: code.code(),
                    properties,
                }),
            );
        }
    }

    fn problem_info(&self) -> bool {
        self.session
            .as_ref()
            .is_none_or(|s| s.state.lock().params.problem_info)
    }

    fn reason(&self, text: &str) -> Properties {
        let mut p = Properties::default();
        if self.protocol.is_v5() && self.problem_info() {
            p.reason_string = Some(text.to_string());
        }
        p
    }

    /// Handles one decoded packet.
    pub fn handle(&mut self, b: &Broker, packet: Packet, now: Instant) -> Result<(), Close> {
        journal::begin();
        self.last_recv = now;
        if self.phase == Phase::AwaitConnect {
            return match packet {
                Packet::Connect(c) => self.connect(b, c, now),
                // The first packet must be CONNECT [MQTT-3.1.0-1].
                _ => Err(Close::silent(CloseReason::ProtocolError)),
            };
        }
        match packet {
            Packet::Publish(p) => self.publish(b, p, now),
            Packet::PubAck(a) => {
                self.ack(b, a.packet_id, now, |st, w, sid, id| {
                    st.complete(w, sid, id, QoS::AtLeastOnce)
                });
                Ok(())
            }
            Packet::PubRec(a) => {
                if a.code >= 0x80 {
                    // A failed PUBREC ends the flow [MQTT-4.3.3-?]: nothing more is sent.
                    self.ack(b, a.packet_id, now, |st, w, sid, id| {
                        st.complete(w, sid, id, QoS::ExactlyOnce)
                    });
                } else {
                    let known = self.ack(b, a.packet_id, now, |st, w, sid, id| {
                        st.received(w, sid, id)
                    });
                    let code = if known {
                        0
                    } else {
                        ReasonCode::PacketIdentifierNotFound.code()
                    };
                    let rel = PubAck {
                        packet_id: a.packet_id,
                        code,
                        properties: Properties::default(),
                    };
                    self.respond(b, Packet::PubRel(rel));
                }
                Ok(())
            }
            Packet::PubComp(a) => {
                self.ack(b, a.packet_id, now, |st, w, sid, id| {
                    st.complete(w, sid, id, QoS::ExactlyOnce)
                });
                Ok(())
            }
            Packet::PubRel(a) => {
                let known = {
                    let session = self.session();
                    let mut st = session.state.lock();
                    let stored = st.stored;
                    let ids = &mut st.fl_mut().incoming_qos2;
                    let known = ids
                        .iter()
                        .position(|id| *id == a.packet_id)
                        .map(|i| ids.swap_remove(i))
                        .is_some();
                    if known && stored {
                        // PUBCOMP waits for this: a client told PUBCOMP may reuse the id, and
                        // a stale id after a restart would swallow its next message.
                        journal::record(
                            b.writer.as_ref(),
                            Op::RemoveIncoming {
                                sid: session.id,
                                packet_id: a.packet_id,
                            },
                        );
                    }
                    known
                };
                let code = if known {
                    0
                } else {
                    ReasonCode::PacketIdentifierNotFound.code()
                };
                let comp = PubAck {
                    packet_id: a.packet_id,
                    code,
                    properties: Properties::default(),
                };
                self.respond(b, Packet::PubComp(comp));
                Ok(())
            }
            Packet::Subscribe(s) => self.subscribe(b, s, now),
            Packet::Unsubscribe(u) => self.unsubscribe(b, u, now),
            Packet::PingReq => {
                self.send(b, &Packet::PingResp);
                Ok(())
            }
            Packet::Disconnect(d) => self.disconnect(d),
            Packet::Connect(_) => Err(Close::protocol("second CONNECT")),
            Packet::Auth(_) => Err(Close::protocol("AUTH without an authentication method")),
            Packet::ConnAck(_) | Packet::SubAck(_) | Packet::UnsubAck(_) | Packet::PingResp => {
                Err(Close::protocol("packet only a server sends"))
            }
        }
    }

    fn session(&self) -> &Arc<Session> {
        self.session
            .as_ref()
            .expect("active connection has a session")
    }

    /// Applies an acknowledgement to the outgoing flow, then refills the inflight window.
    fn ack(
        &mut self,
        b: &Broker,
        packet_id: u16,
        now: Instant,
        f: impl FnOnce(&mut SessionState, Option<&ballast_store::Writer>, u64, u16) -> bool,
    ) -> bool {
        let s = self.session().clone();
        let mut st = s.state.lock();
        let w = b.writer.as_ref();
        let known = f(&mut st, w, s.id, packet_id);
        if known {
            let (sent, expired) = st.drain_queue(w, s.id, now);
            if sent > 0 {
                b.metrics.add(|c| &c.messages_sent, sent as u64);
                b.schedule_flush(&mut st);
            }
            if expired > 0 {
                b.metrics.add(|c| &c.messages_expired, expired as u64);
            }
        }
        known
    }

    // ---- CONNECT --------------------------------------------------------------------------

    fn refuse(&mut self, code: ReasonCode, text: &'static str) -> Result<(), Close> {
        let reason = match code {
            ReasonCode::ServerBusy => CloseReason::ServerBusy,
            _ => CloseReason::ConnectRefused,
        };
        let code_byte = if self.protocol.is_v5() {
            code.code()
        } else {
            code.to_v3_connack()
        };
        let mut properties = Properties::default();
        if self.protocol.is_v5() {
            properties.reason_string = Some(text.to_string());
        }
        let ack = ConnAck {
            session_present: false,
            code: code_byte,
            properties,
        };
        Packet::ConnAck(ack).encode(self.protocol, self.direct());
        Err(Close::new(reason, None, text))
    }

    fn connect(&mut self, b: &Broker, c: Connect, now: Instant) -> Result<(), Close> {
        self.protocol = c.protocol;
        let v5 = c.protocol.is_v5();
        let limits = &b.config.limits;
        if self.over_limit {
            b.metrics.limit(Limit::MaxConnections);
            self.refuse(ReasonCode::ServerBusy, "connection limit reached")?;
        }
        if b.shutting_down.load(std::sync::atomic::Ordering::Relaxed) {
            self.refuse(ReasonCode::ServerUnavailable, "server shutting down")?;
        }
        if c.properties.authentication_method.is_some() {
            self.refuse(
                ReasonCode::BadAuthenticationMethod,
                "enhanced authentication is not supported",
            )?;
        }
        if c.client_id.len() > limits.max_client_id_length {
            b.metrics.limit(Limit::MaxClientIdLength);
            self.refuse(
                ReasonCode::ClientIdentifierNotValid,
                "client identifier too long",
            )?;
        }
        let mut assigned = None;
        let client_id = if c.client_id.is_empty() {
            // 3.1.1 allows an empty id only with a clean session [MQTT-3.1.3-8]; 3.1 never.
            if !v5 && (!c.clean_start || c.protocol == Protocol::V3_1) {
                self.refuse(
                    ReasonCode::ClientIdentifierNotValid,
                    "empty client identifier",
                )?;
            }
            let id = format!("ballast-{:016x}", rand::random::<u64>());
            assigned = Some(id.clone());
            id
        } else {
            c.client_id.clone()
        };
        if let Some(w) = &c.will {
            if let Err(text) = check_topic_limits(b, &w.topic) {
                self.refuse(ReasonCode::TopicNameInvalid, text)?;
            }
        }

        let mut ack_props = Properties::default();
        // Keepalive: a 5.0 client is told ours when it asks more than the maximum (or none).
        let mut keepalive = c.keep_alive;
        if v5 && (keepalive == 0 || keepalive > limits.max_keepalive_secs) {
            keepalive = limits.max_keepalive_secs;
            ack_props.server_keep_alive = Some(keepalive);
        }
        self.keepalive_ms = keepalive as u32 * 1500;

        let requested_expiry = if v5 {
            c.properties.session_expiry_interval.unwrap_or(0)
        } else if c.clean_start {
            0
        } else {
            u32::MAX
        };
        let expiry = requested_expiry.min(limits.max_session_expiry_secs);
        if v5 && expiry != requested_expiry {
            ack_props.session_expiry_interval = Some(expiry);
        }
        let params = ClientParams {
            protocol: c.protocol,
            window: limits
                .max_inflight
                .min(c.properties.receive_maximum.unwrap_or(u16::MAX)),
            max_packet_size: c.properties.maximum_packet_size.unwrap_or(u32::MAX),
            topic_alias_max: c.properties.topic_alias_maximum.unwrap_or(0),
            problem_info: c.properties.request_problem_information != Some(0),
        };

        if let Some(w) = c.will {
            let mut msg = Message::new(
                &w.topic,
                Bytes::copy_from_slice(&w.payload),
                w.qos,
                w.retain,
            );
            let as_publish = Publish {
                dup: false,
                qos: w.qos,
                retain: w.retain,
                topic: w.topic.clone(),
                packet_id: 0,
                payload: w.payload.clone(),
                properties: w.properties.clone(),
            };
            msg.props = Message::from_publish(&as_publish, msg.topic.clone(), 0, now).props;
            let will = Will {
                msg,
                expiry_secs: w.properties.message_expiry_interval,
                delay_secs: w.properties.will_delay_interval.unwrap_or(0),
            };
            self.extra().will = Some(will);
        }

        let (session, present) = b.attach(&client_id, c.clean_start, expiry, self.loc, params, now);
        self.session = Some(session.clone());
        self.phase = Phase::Active;

        if v5 {
            ack_props.assigned_client_identifier = assigned;
            ack_props.receive_maximum = Some(limits.receive_maximum);
            ack_props.maximum_packet_size = Some(limits.max_packet_size);
            if limits.topic_alias_maximum > 0 {
                ack_props.topic_alias_maximum = Some(limits.topic_alias_maximum);
            }
        }
        // Session present is 0 for a clean start [MQTT-3.2.2-2].
        let ack = ConnAck {
            session_present: present && !c.clean_start,
            code: 0,
            properties: ack_props,
        };
        let mut st = session.state.lock();
        st.write(&Packet::ConnAck(ack));
        // PUBRELs still due wait for their "released" mark, which another thread may have
        // submitted just now, to be durable: everything submitted so far.
        let hold_rel = st.stored;
        let (resent, releases) = st.resend_inflight(now, !hold_rel);
        let (sent, expired) = st.drain_queue(b.writer.as_ref(), session.id, now);
        if resent + sent > 0 {
            b.metrics.add(|c| &c.messages_sent, (resent + sent) as u64);
        }
        if expired > 0 {
            b.metrics.add(|c| &c.messages_expired, expired as u64);
        }
        b.schedule_flush(&mut st);
        drop(st);
        if !releases.is_empty() {
            let last = b.writer.as_ref().map_or(0, |w| w.last());
            for packet_id in releases {
                let rel = PubAck {
                    packet_id,
                    code: 0,
                    properties: Properties::default(),
                };
                self.respond_after(b, last, Packet::PubRel(rel));
            }
        }
        Ok(())
    }

    // ---- PUBLISH --------------------------------------------------------------------------

    fn publish(&mut self, b: &Broker, p: Publish, now: Instant) -> Result<(), Close> {
        let limits = &b.config.limits;
        if !p.properties.subscription_identifiers.is_empty() {
            // Only the server puts Subscription Identifiers in a PUBLISH [MQTT-3.3.4-6].
            return Err(Close::protocol(
                "subscription identifier in a client PUBLISH",
            ));
        }
        let topic: Arc<str> = match p.properties.topic_alias {
            Some(alias) if self.protocol.is_v5() => {
                if alias == 0 || alias > limits.topic_alias_maximum {
                    b.metrics.limit(Limit::TopicAliasMaximum);
                    return Err(Close::new(
                        CloseReason::ProtocolError,
                        Some(ReasonCode::TopicAliasInvalid),
                        "topic alias out of range",
                    ));
                }
                let aliases = &mut self.extra().aliases;
                if p.topic.is_empty() {
                    match aliases.get(&alias) {
                        Some(t) => t.clone(),
                        None => return Err(Close::protocol("unknown topic alias")),
                    }
                } else {
                    let t: Arc<str> = p.topic.as_str().into();
                    aliases.insert(alias, t.clone());
                    t
                }
            }
            _ if p.topic.is_empty() => return Err(Close::protocol("empty topic without alias")),
            _ => p.topic.as_str().into(),
        };

        let refused = if let Err(text) = check_topic_limits(b, &topic) {
            Some((ReasonCode::TopicNameInvalid, text))
        } else if topic.starts_with("$SYS") {
            Some((
                ReasonCode::NotAuthorized,
                "clients may not publish to $SYS topics",
            ))
        } else if p.properties.payload_format_indicator == Some(1)
            && std::str::from_utf8(&p.payload).is_err()
        {
            // A payload declared UTF-8 must be UTF-8 [MQTT-3.3.2.3.2].
            Some((
                ReasonCode::PayloadFormatInvalid,
                "payload is not valid UTF-8",
            ))
        } else {
            None
        };
        if let Some((code, text)) = refused {
            if p.qos == QoS::AtMostOnce || !self.protocol.is_v5() {
                // Nothing to answer a QoS 0 publish with, and 3.1.1 has no negative acks.
                return Err(Close::new(CloseReason::ProtocolError, Some(code), text));
            }
            let ack = PubAck {
                packet_id: p.packet_id,
                code: code.code(),
                properties: self.reason(text),
            };
            let ack = if p.qos == QoS::AtLeastOnce {
                Packet::PubAck(ack)
            } else {
                Packet::PubRec(ack)
            };
            self.respond(b, ack);
            return Ok(());
        }

        let session = self.session().clone();
        if p.qos == QoS::ExactlyOnce {
            let st = session.state.lock();
            if st.fl().incoming_qos2.contains(&p.packet_id) {
                // A resend before PUBREL: acknowledge again, deliver nothing [MQTT-4.3.3-10].
                // The first PUBLISH may have come on an earlier connection, handled on another
                // thread: wait for everything submitted so far.
                drop(st);
                let rec = PubAck {
                    packet_id: p.packet_id,
                    code: 0,
                    properties: Properties::default(),
                };
                let last = b.writer.as_ref().map_or(0, |w| w.last());
                self.respond_after(b, last, Packet::PubRec(rec));
                return Ok(());
            }
            if st.fl().incoming_qos2.len() >= limits.receive_maximum as usize {
                b.metrics.limit(Limit::ReceiveMaximum);
                return Err(Close::new(
                    CloseReason::LimitExceeded,
                    Some(ReasonCode::ReceiveMaximumExceeded),
                    "receive maximum exceeded",
                ));
            }
        }

        b.metrics.add(|c| &c.messages_received, 1);
        let msg = Arc::new(Message::from_publish(&p, topic, session.id, now));
        if p.retain {
            b.retain(&msg, now);
        }
        let routed = b.publish(msg, now);
        let code = if routed.quota_exceeded && self.protocol.is_v5() {
            ReasonCode::QuotaExceeded
        } else {
            ReasonCode::Success
        };
        let properties = if code == ReasonCode::Success {
            Properties::default()
        } else {
            self.reason("a subscriber's queue is full")
        };
        let ack = PubAck {
            packet_id: p.packet_id,
            code: code.code(),
            properties,
        };
        match p.qos {
            QoS::AtMostOnce => {}
            QoS::AtLeastOnce => self.respond(b, Packet::PubAck(ack)),
            QoS::ExactlyOnce => {
                if code == ReasonCode::Success {
                    let mut st = session.state.lock();
                    st.fl_mut().incoming_qos2.push(p.packet_id);
                    if st.stored {
                        // A resend of this PUBLISH after a restart must be known as one.
                        journal::record(
                            b.writer.as_ref(),
                            Op::PutIncoming {
                                sid: session.id,
                                packet_id: p.packet_id,
                            },
                        );
                    }
                }
                self.respond(b, Packet::PubRec(ack));
            }
        }
        Ok(())
    }

    // ---- SUBSCRIBE / UNSUBSCRIBE ----------------------------------------------------------

    fn subscribe(&mut self, b: &Broker, s: Subscribe, now: Instant) -> Result<(), Close> {
        let v5 = self.protocol.is_v5();
        let limits = &b.config.limits;
        let session = self.session().clone();
        let sub_id = s.properties.subscription_identifiers.first().copied();
        let mut codes = Vec::with_capacity(s.filters.len());
        let mut retained = Vec::new();
        let mut reason = None;
        for f in &s.filters {
            let (group, filter) = split_shared(&f.filter);
            if group.is_some() && f.options.no_local {
                // No Local on a shared subscription is a protocol error [MQTT-3.8.3-4].
                return Err(Close::protocol("no local on a shared subscription"));
            }
            if let Err(text) = check_topic_limits(b, filter) {
                codes.push(if v5 {
                    ReasonCode::TopicFilterInvalid.code()
                } else {
                    0x80
                });
                reason = Some(text);
                continue;
            }
            let sub = Subscription {
                options: f.options,
                subscription_id: sub_id,
            };
            let stored = {
                let mut st = session.state.lock();
                if st.subscription(&f.filter).is_none()
                    && st.subscription_count() >= limits.max_subscriptions_per_client
                {
                    false
                } else {
                    st.add_subscription(f.filter.clone(), sub.clone());
                    true
                }
            };
            if !stored {
                b.metrics.limit(Limit::MaxSubscriptions);
                codes.push(if v5 {
                    ReasonCode::QuotaExceeded.code()
                } else {
                    0x80
                });
                reason = Some("subscription limit reached");
                continue;
            };
            let new_in_index = b.subscribe(&session, &f.filter, &sub);
            codes.push(f.options.qos as u8);
            // Retained messages are not sent for shared subscriptions [MQTT-3.8.4-?]; retain
            // handling 1 sends them only for a new subscription, 2 never [MQTT-3.3.1-9..11].
            let send_retained = group.is_none()
                && match f.options.retain_handling {
                    0 => true,
                    1 => new_in_index,
                    _ => false,
                };
            if send_retained {
                for m in b.retained_matching(filter, now) {
                    retained.push((m, f.options.qos));
                }
            }
        }
        let properties = match reason {
            Some(text) => self.reason(text),
            None => Properties::default(),
        };
        {
            let st = session.state.lock();
            b.journal_session(&session, &st, now);
        }
        self.respond(
            b,
            Packet::SubAck(SubAck {
                packet_id: s.packet_id,
                codes,
                properties,
            }),
        );
        if !retained.is_empty() {
            let sub_ids: Vec<u32> = sub_id.into_iter().collect();
            let mut st = session.state.lock();
            let mut sent = 0;
            for (m, granted) in retained {
                let qos = m.qos.min(granted);
                let offered = b.offer(
                    session.id,
                    &mut st,
                    &m,
                    (qos, true),
                    &sub_ids,
                    None,
                    &mut None,
                    now,
                );
                match offered {
                    Ok(o) => sent += o.sent,
                    Err(r) => b.refused(r, &mut Default::default()),
                }
            }
            b.metrics.add(|c| &c.messages_sent, sent as u64);
            b.schedule_flush(&mut st);
        }
        Ok(())
    }

    fn unsubscribe(&mut self, b: &Broker, u: Unsubscribe, now: Instant) -> Result<(), Close> {
        let session = self.session().clone();
        let mut codes = Vec::with_capacity(u.filters.len());
        for f in &u.filters {
            let had = session.state.lock().remove_subscription(f).is_some();
            if had {
                b.unsubscribe(&session, f);
            }
            codes.push(if had {
                0
            } else {
                ReasonCode::NoSubscriptionExisted.code()
            });
        }
        {
            let st = session.state.lock();
            b.journal_session(&session, &st, now);
        }
        let ack = UnsubAck {
            packet_id: u.packet_id,
            codes,
            properties: Properties::default(),
        };
        self.respond(b, Packet::UnsubAck(ack));
        Ok(())
    }

    // ---- DISCONNECT and close -------------------------------------------------------------

    fn disconnect(&mut self, d: Disconnect) -> Result<(), Close> {
        if let Some(e) = d.properties.session_expiry_interval {
            let mut st = self.session().state.lock();
            // Expiry 0 at CONNECT cannot be raised at DISCONNECT [MQTT-3.14.2-2].
            if st.expiry_secs == 0 && e != 0 {
                return Err(Close::protocol(
                    "session expiry raised from zero at DISCONNECT",
                ));
            }
            st.expiry_secs = e;
        }
        if d.code == ReasonCode::DisconnectWithWill.code() {
            return Err(Close::silent(CloseReason::ClientDisconnectWithWill));
        }
        // A normal DISCONNECT discards the will [MQTT-3.1.2-10].
        if let Some(x) = self.extra.as_mut() {
            x.will = None;
        }
        Err(Close::silent(CloseReason::ClientDisconnect))
    }

    /// The connection is gone: count it, publish or schedule the will, let the session go.
    pub fn closed(&mut self, b: &Broker, reason: CloseReason, now: Instant) {
        b.metrics.closed(reason);
        let will = self.extra.take().and_then(|x| x.will);
        let will = if reason == CloseReason::ClientDisconnect {
            None
        } else {
            will
        };
        let Some(session) = self.session.take() else {
            return;
        };
        let goes_on = b.detach(&session, self.loc, now);
        if let Some(w) = will {
            if w.delay_secs == 0 || !goes_on {
                b.publish_will(w.at(now), now);
            } else {
                let mut st = session.state.lock();
                // Taken over by a new connection: the will is cancelled [MQTT-3.1.3-9].
                if st.conn.is_none() && !st.ended {
                    let due = now + Duration::from_secs(w.delay_secs as u64);
                    st.delayed_will = Some(Box::new((due, w.at(due))));
                }
            }
        }
    }
}

/// Checks a topic name or filter against the configured length and level limits.
fn check_topic_limits(b: &Broker, t: &str) -> Result<(), &'static str> {
    let limits = &b.config.limits;
    if t.len() > limits.max_topic_length {
        b.metrics.limit(Limit::MaxTopicLength);
        return Err("topic longer than the configured maximum");
    }
    if t.split('/').count() > limits.max_topic_levels {
        b.metrics.limit(Limit::MaxTopicLevels);
        return Err("topic has more levels than the configured maximum");
    }
    Ok(())
}
