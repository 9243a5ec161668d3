//! Sessions: the state that outlives a connection, and the outgoing QoS flows.
//!
//! A session is shared (`Arc<Session>`) between the registry, the topic index and at most one
//! connection. Everything that changes is behind one mutex, held briefly: a publisher on any
//! thread locks the session, encodes the PUBLISH into `out`, and, when `out` went from empty to
//! non-empty, tells the owning loop thread to flush it. The session knows only where its
//! connection lives (`ConnLoc`), never the connection itself.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Instant;

use ballast_codec::{Packet, Protocol, PubAck, QoS, SubOptions};
use ballast_store::{Op, Writer};
use parking_lot::Mutex;

use super::journal;
use super::message::{encode_publish, publish_len, Delivery, Message};

/// Where a session's live connection is: loop thread, slab token, and a generation that tells
/// a reused token apart.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConnLoc {
    pub worker: u16,
    pub token: u32,
    pub gen: u32,
}

#[derive(Debug, Clone)]
pub struct Subscription {
    pub options: SubOptions,
    pub subscription_id: Option<u32>,
}

/// The packet id of a session's QoS 1/2 message number `seq`.
///
/// Derived rather than allocated so that it survives a restart without a write of its own:
/// a message resent after a crash carries the id the client may already hold (a QoS 2
/// receiver must see the same id to recognise a duplicate). Ids repeat every 65,535
/// messages; a message whose id is still in flight waits in the queue.
pub fn packet_id_of(seq: u64) -> u16 {
    (seq % 65_535) as u16 + 1
}

/// A QoS 1/2 message sent and not yet fully acknowledged.
#[derive(Debug)]
pub struct Inflight {
    pub seq: u64,
    pub packet_id: u16,
    pub msg: Arc<Message>,
    pub qos: QoS,
    pub retain: bool,
    pub subscription_ids: Box<[u32]>,
    /// QoS 2: PUBREC received and PUBREL sent; waiting for PUBCOMP.
    pub released: bool,
    /// The shared subscription (`$share/g/f`) it came through, if any.
    pub shared: Option<Arc<str>>,
}

/// A message waiting for an inflight slot or for the client to come back.
#[derive(Debug)]
pub struct Queued {
    /// Number within the session (gives its packet id and its store key).
    pub seq: u64,
    /// Restored after a restart: it may have been sent before, so it goes out with DUP.
    pub dup: bool,
    pub msg: Arc<Message>,
    pub qos: QoS,
    pub retain: bool,
    pub subscription_ids: Box<[u32]>,
    pub shared: Option<Arc<str>>,
}

/// The client's parameters for the current connection (from its CONNECT).
#[derive(Debug, Clone, Copy)]
pub struct ClientParams {
    pub protocol: Protocol,
    /// Outgoing window: min(our max_inflight, the client's Receive Maximum).
    pub window: u16,
    pub max_packet_size: u32,
    pub topic_alias_max: u16,
    /// 5.0 Request Problem Information: reason strings only when true.
    pub problem_info: bool,
}

impl Default for ClientParams {
    fn default() -> Self {
        ClientParams {
            protocol: Protocol::V3_1_1,
            window: 32,
            max_packet_size: u32::MAX,
            topic_alias_max: 0,
            problem_info: true,
        }
    }
}

/// Why a message was not delivered or queued.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// QoS 0 and the outbox is full.
    OutboxFull,
    /// The session's queue is at its message limit.
    QueueFull,
    /// The session's queue is at its byte limit.
    QueueBytesFull,
    /// Larger than the client's Maximum Packet Size.
    TooLarge,
    /// Message expiry passed.
    Expired,
}

/// A session's QoS 1/2 flows.
#[derive(Debug, Default)]
pub struct Flows {
    pub inflight: VecDeque<Inflight>,
    pub queue: VecDeque<Queued>,
    pub queued_bytes: usize,
    /// Incoming QoS 2 packet ids PUBREC'd and not yet released (at most our Receive
    /// Maximum; a short list costs less than a set).
    pub incoming_qos2: Vec<u16>,
}

/// What a session without flows reads.
static NO_FLOWS: Flows = Flows {
    inflight: VecDeque::new(),
    queue: VecDeque::new(),
    queued_bytes: 0,
    incoming_qos2: Vec::new(),
};

#[derive(Debug, Default)]
pub struct SessionState {
    pub conn: Option<ConnLoc>,
    pub params: ClientParams,
    /// Encoded packets waiting for the connection's loop to write them.
    pub out: Vec<u8>,
    /// A flush request for `out` is already queued at the owning loop.
    pub flush_pending: bool,
    /// Bytes the connection took from `out` but has not written yet.
    pub backlog: u32,
    /// Number of the next QoS 1/2 message.
    pub next_seq: u64,
    /// QoS 1/2 state, allocated on first use: an idle session (and a QoS 0 one) has none,
    /// and pays 8 bytes instead of 96.
    flows: Option<Box<Flows>>,
    /// Filter (with any `$share/group/` prefix) -> options; allocated with the first
    /// subscription (8 bytes instead of a map's 48 for a session without any).
    #[allow(clippy::box_collection)]
    subs: Option<Box<HashMap<String, Subscription>>>,
    /// Outgoing topic aliases for this connection. Boxed so a session whose client allows
    /// none (most) pays 8 bytes instead of a map's 48.
    #[allow(clippy::box_collection)]
    pub aliases: Option<Box<HashMap<Arc<str>, u16>>>,
    /// Session Expiry Interval in seconds (u32::MAX: never).
    pub expiry_secs: u32,
    pub disconnected_at: Option<Instant>,
    /// A will waiting for its delay to pass.
    pub delayed_will: Option<Box<(Instant, Arc<Message>)>>,
    /// Removed from the registry; nothing may be added.
    pub ended: bool,
    /// Written to the store: changes to it are journaled.
    pub stored: bool,
}

pub struct Session {
    pub id: u64,
    pub client_id: Arc<str>,
    /// Mirrors `state.conn.is_some()` for lock-free checks (shared subscription picks).
    pub connected: AtomicBool,
    pub state: Mutex<SessionState>,
}

impl std::fmt::Debug for Session {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Session")
            .field("id", &self.id)
            .field("client_id", &self.client_id)
            .finish()
    }
}

impl Session {
    pub fn new(id: u64, client_id: Arc<str>) -> Session {
        Session {
            id,
            client_id,
            connected: AtomicBool::new(false),
            state: Mutex::new(SessionState::default()),
        }
    }

    pub fn is_connected(&self) -> bool {
        self.connected.load(Ordering::Relaxed)
    }
}

/// What `offer` did with a message.
#[derive(Debug, Clone, Copy, Default)]
pub struct Offered {
    /// PUBLISH packets written (0 or 1).
    pub sent: usize,
    /// The number given to a QoS 1/2 message (queued or in flight); the caller journals it for
    /// a stored session.
    pub seq: Option<u64>,
}

/// Limits applied to one session's queues.
#[derive(Debug, Clone, Copy)]
pub struct QueueLimits {
    pub max_messages: usize,
    pub max_bytes: usize,
    pub max_outbox: usize,
}

impl SessionState {
    /// The QoS 1/2 flows, empty when there are none.
    pub fn fl(&self) -> &Flows {
        self.flows.as_deref().unwrap_or(&NO_FLOWS)
    }

    /// The QoS 1/2 flows for changing, allocated on first use.
    pub fn fl_mut(&mut self) -> &mut Flows {
        self.flows.get_or_insert_with(Default::default)
    }

    /// Drops every queued and inflight message (the session ends).
    pub fn clear_flows(&mut self) {
        if let Some(f) = self.flows.as_mut() {
            f.queue.clear();
            f.inflight.clear();
            f.queued_bytes = 0;
        }
    }

    pub fn subscription(&self, filter: &str) -> Option<&Subscription> {
        self.subs.as_ref().and_then(|m| m.get(filter))
    }

    pub fn subscription_count(&self) -> usize {
        self.subs.as_ref().map_or(0, |m| m.len())
    }

    pub fn subscriptions(&self) -> impl Iterator<Item = (&String, &Subscription)> {
        self.subs.iter().flat_map(|m| m.iter())
    }

    pub fn add_subscription(&mut self, filter: String, s: Subscription) {
        self.subs
            .get_or_insert_with(Default::default)
            .insert(filter, s);
    }

    pub fn remove_subscription(&mut self, filter: &str) -> Option<Subscription> {
        self.subs.as_mut().and_then(|m| m.remove(filter))
    }

    pub fn take_subscriptions(&mut self) -> HashMap<String, Subscription> {
        self.subs.take().map(|b| *b).unwrap_or_default()
    }

    fn has_window(&self) -> bool {
        self.conn.is_some() && self.fl().inflight.len() < self.params.window as usize
    }

    /// Message `seq` may go out now: there is room in the window and its packet id is not
    /// still in flight [MQTT-2.2.1-3].
    fn can_send(&self, seq: u64) -> bool {
        let id = packet_id_of(seq);
        self.has_window() && !self.fl().inflight.iter().any(|f| f.packet_id == id)
    }

    fn take_seq(&mut self) -> u64 {
        let seq = self.next_seq;
        self.next_seq += 1;
        seq
    }

    /// Encodes a PUBLISH into `out`, choosing a topic alias when the client allows them.
    #[allow(clippy::too_many_arguments)]
    fn write_publish(
        &mut self,
        msg: &Message,
        qos: QoS,
        retain: bool,
        dup: bool,
        packet_id: u16,
        sub_ids: &[u32],
        now: Instant,
    ) {
        let mut d = Delivery {
            qos,
            retain,
            dup,
            packet_id,
            alias: None,
            alias_only: false,
            subscription_ids: sub_ids,
        };
        if self.params.topic_alias_max > 0 && self.params.protocol.is_v5() {
            let aliases = self.aliases.get_or_insert_with(Default::default);
            if let Some(a) = aliases.get(&msg.topic) {
                d.alias = Some(*a);
                d.alias_only = true;
            } else if aliases.len() < self.params.topic_alias_max as usize {
                let a = aliases.len() as u16 + 1;
                aliases.insert(msg.topic.clone(), a);
                d.alias = Some(a);
            }
        }
        encode_publish(&mut self.out, self.params.protocol, msg, &d, now);
    }

    fn fits(&self, msg: &Message, qos: QoS, sub_ids: &[u32], now: Instant) -> bool {
        if self.params.max_packet_size == u32::MAX {
            return true;
        }
        // Measured without an alias-only topic: the largest form we might send.
        let d = Delivery {
            qos,
            retain: true,
            dup: false,
            packet_id: 1,
            alias: None,
            alias_only: false,
            subscription_ids: sub_ids,
        };
        publish_len(self.params.protocol, msg, &d, now) <= self.params.max_packet_size as usize
    }

    /// Delivers one message to this session: straight into the outbox when connected (QoS 0,
    /// or QoS 1/2 within the window), otherwise into the queue. Returns how many PUBLISH
    /// packets were written (0 or 1).
    #[allow(clippy::too_many_arguments)]
    pub fn offer(
        &mut self,
        msg: &Arc<Message>,
        qos: QoS,
        retain: bool,
        sub_ids: &[u32],
        shared: Option<&Arc<str>>,
        limits: &QueueLimits,
        now: Instant,
    ) -> Result<Offered, Refusal> {
        if self.ended {
            return Ok(Offered::default());
        }
        if msg.is_expired(now) {
            return Err(Refusal::Expired);
        }
        if !self.fits(msg, qos, sub_ids, now) {
            return Err(Refusal::TooLarge);
        }
        if qos == QoS::AtMostOnce {
            // QoS 0 goes only to a live connection with room in its outbox.
            if self.conn.is_none() {
                return Ok(Offered::default());
            }
            if self.out.len() + self.backlog as usize >= limits.max_outbox {
                return Err(Refusal::OutboxFull);
            }
            self.write_publish(msg, qos, retain, false, 0, sub_ids, now);
            return Ok(Offered { sent: 1, seq: None });
        }
        if self.fl().queue.is_empty() && self.can_send(self.next_seq) {
            let seq = self.take_seq();
            let packet_id = packet_id_of(seq);
            self.write_publish(msg, qos, retain, false, packet_id, sub_ids, now);
            self.fl_mut().inflight.push_back(Inflight {
                seq,
                packet_id,
                msg: msg.clone(),
                qos,
                retain,
                subscription_ids: sub_ids.into(),
                released: false,
                shared: shared.cloned(),
            });
            return Ok(Offered {
                sent: 1,
                seq: Some(seq),
            });
        }
        if self.fl().queue.len() >= limits.max_messages {
            return Err(Refusal::QueueFull);
        }
        if self.fl().queued_bytes + msg.cost() > limits.max_bytes {
            return Err(Refusal::QueueBytesFull);
        }
        let seq = self.take_seq();
        let fl = self.fl_mut();
        fl.queued_bytes += msg.cost();
        fl.queue.push_back(Queued {
            seq,
            dup: false,
            msg: msg.clone(),
            qos,
            retain,
            subscription_ids: sub_ids.into(),
            shared: shared.cloned(),
        });
        Ok(Offered {
            sent: 0,
            seq: Some(seq),
        })
    }

    /// Moves queued messages into the inflight window while it has room. Returns
    /// (PUBLISH packets written, messages dropped as expired). `sid` is the session's id, for
    /// journaling the removal of expired messages of a stored session.
    pub fn drain_queue(&mut self, w: Option<&Writer>, sid: u64, now: Instant) -> (usize, usize) {
        let (mut sent, mut expired) = (0, 0);
        while let Some(front) = self.fl().queue.front() {
            if !self.can_send(front.seq) {
                break;
            }
            let fl = self.fl_mut();
            let q = fl.queue.pop_front().expect("front exists");
            fl.queued_bytes = fl.queued_bytes.saturating_sub(q.msg.cost());
            if q.msg.is_expired(now) {
                expired += 1;
                if self.stored {
                    journal::record(w, Op::RemoveQueued { sid, seq: q.seq });
                }
                continue;
            }
            let packet_id = packet_id_of(q.seq);
            self.write_publish(
                &q.msg,
                q.qos,
                q.retain,
                q.dup,
                packet_id,
                &q.subscription_ids,
                now,
            );
            self.fl_mut().inflight.push_back(Inflight {
                seq: q.seq,
                packet_id,
                msg: q.msg,
                qos: q.qos,
                retain: q.retain,
                subscription_ids: q.subscription_ids,
                released: false,
                shared: q.shared,
            });
            sent += 1;
        }
        (sent, expired)
    }

    /// Resends everything in flight after a reconnect: PUBLISH with DUP set, or PUBREL for
    /// QoS 2 messages already received by the client [MQTT-4.4.0-1]. With `pubrel` false the
    /// PUBRELs are not written but their packet ids returned, for the caller to send later.
    /// Returns the PUBLISH packets written and those packet ids.
    pub fn resend_inflight(&mut self, now: Instant, pubrel: bool) -> (usize, Vec<u16>) {
        let proto = self.params.protocol;
        // Taken out while writing: `write_publish` needs `&mut self` for the alias table.
        let Some(flows) = self.flows.as_mut() else {
            return (0, Vec::new());
        };
        let inflight = std::mem::take(&mut flows.inflight);
        let mut sent = 0;
        let mut releases = Vec::new();
        for f in &inflight {
            if f.released && !pubrel {
                releases.push(f.packet_id);
            } else if f.released {
                let p = Packet::PubRel(PubAck {
                    packet_id: f.packet_id,
                    code: 0,
                    properties: Default::default(),
                });
                p.encode(proto, &mut self.out);
            } else {
                self.write_publish(
                    &f.msg,
                    f.qos,
                    f.retain,
                    true,
                    f.packet_id,
                    &f.subscription_ids,
                    now,
                );
                sent += 1;
            }
        }
        self.fl_mut().inflight = inflight;
        (sent, releases)
    }

    /// PUBACK (QoS 1) or PUBCOMP (QoS 2) from the client: the message is done.
    pub fn complete(
        &mut self,
        w: Option<&Writer>,
        sid: u64,
        packet_id: u16,
        expect_qos: QoS,
    ) -> bool {
        match self
            .fl()
            .inflight
            .iter()
            .position(|f| f.packet_id == packet_id && f.qos == expect_qos)
        {
            Some(i) => {
                if let Some(f) = self.fl_mut().inflight.remove(i) {
                    if self.stored {
                        journal::record(w, Op::RemoveQueued { sid, seq: f.seq });
                    }
                }
                true
            }
            None => false,
        }
    }

    /// PUBREC from the client: mark released; the caller sends PUBREL (once the release is
    /// durable, for a stored session: a PUBREL the client answers makes it forget the packet
    /// id, so a resend of the PUBLISH after a restart would be a second delivery).
    pub fn received(&mut self, w: Option<&Writer>, sid: u64, packet_id: u16) -> bool {
        let stored = self.stored;
        let Some(flows) = self.flows.as_mut() else {
            return false;
        };
        match flows
            .inflight
            .iter_mut()
            .find(|f| f.packet_id == packet_id && f.qos == QoS::ExactlyOnce)
        {
            Some(f) => {
                if !f.released && stored {
                    journal::record(w, Op::Release { sid, seq: f.seq });
                }
                f.released = true;
                true
            }
            None => false,
        }
    }

    /// Takes out the messages that came through shared subscriptions and are not yet with the
    /// client for good (queued, or sent and not acknowledged), so another member can have them.
    pub fn take_shared(&mut self) -> Vec<Queued> {
        let mut out = Vec::new();
        let Some(fl) = self.flows.as_mut() else {
            return out;
        };
        let mut keep = VecDeque::with_capacity(fl.queue.len());
        for q in fl.queue.drain(..) {
            if q.shared.is_some() {
                fl.queued_bytes = fl.queued_bytes.saturating_sub(q.msg.cost());
                out.push(q);
            } else {
                keep.push_back(q);
            }
        }
        fl.queue = keep;
        let mut keep = VecDeque::with_capacity(fl.inflight.len());
        for f in fl.inflight.drain(..) {
            if f.shared.is_some() && !f.released {
                out.push(Queued {
                    seq: f.seq,
                    dup: false,
                    msg: f.msg,
                    qos: f.qos,
                    retain: f.retain,
                    subscription_ids: f.subscription_ids,
                    shared: f.shared,
                });
            } else {
                keep.push_back(f);
            }
        }
        fl.inflight = keep;
        out
    }

    /// Writes any packet into the outbox.
    pub fn write(&mut self, p: &Packet) {
        p.encode(self.params.protocol, &mut self.out);
    }
}
