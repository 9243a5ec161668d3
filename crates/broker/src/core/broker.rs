//! The state one node shares between its loop threads: sessions, the topic index, retained
//! messages, counters, and the inboxes through which threads ask each other to act.

use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::hash::BuildHasher;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use ballast_codec::{topic, QoS, ReasonCode, SubOptions};
use ballast_store::{Op, Snapshot, StoredMessage, Writer};
use parking_lot::{Mutex, RwLock};

use super::journal;
use super::message::Message;
use super::session::{
    packet_id_of, ClientParams, ConnLoc, Inflight, Offered, QueueLimits, Queued, Refusal, Session,
    SessionState, Subscription,
};
use crate::config::{BrokerConfig, SharedStrategy};
use crate::metrics::{CloseReason, Limit, Metrics};
use crate::topic_index::{Match, Subscriber, TopicIndex};

/// What one loop thread is asked to do by another.
#[derive(Debug, Clone, Copy)]
pub enum Cmd {
    /// Write what the session of this connection has in its outbox.
    Flush(ConnLoc),
    /// Close this connection, sending DISCONNECT with the code first to 5.0 clients.
    Close(ConnLoc, CloseReason, Option<ReasonCode>),
}

/// A loop thread's mailbox. Senders push and wake the thread at most once per batch: the
/// flag stays set until the thread drains the box.
pub struct Inbox {
    cmds: Mutex<Vec<Cmd>>,
    notified: AtomicBool,
    waker: mio::Waker,
    /// The thread holds acknowledgements back until store writes are durable.
    pub wants_durable: AtomicBool,
}

impl Inbox {
    pub fn new(waker: mio::Waker) -> Inbox {
        Inbox {
            cmds: Mutex::new(Vec::new()),
            notified: AtomicBool::new(false),
            waker,
            wants_durable: AtomicBool::new(false),
        }
    }

    /// After a store commit: wake the thread if it waits for one.
    pub fn durable_advanced(&self) {
        if self.wants_durable.load(Ordering::SeqCst) && !self.notified.swap(true, Ordering::SeqCst)
        {
            self.wake();
        }
    }

    /// Takes every queued command (called by the owning thread).
    pub fn drain(&self, into: &mut Vec<Cmd>) {
        self.notified.store(false, Ordering::SeqCst);
        into.append(&mut self.cmds.lock());
    }

    pub fn wake(&self) {
        let _ = self.waker.wake();
    }
}

thread_local! {
    /// The loop thread this is, if any: sends to one's own inbox need no wake-up.
    static CURRENT_WORKER: Cell<u16> = const { Cell::new(u16::MAX) };
    static TARGETS: RefCell<Vec<Target>> = const { RefCell::new(Vec::new()) };
}

pub fn set_current_worker(i: u16) {
    CURRENT_WORKER.with(|c| c.set(i));
}

/// One session a message goes to, after overlapping subscriptions are merged.
struct Target {
    session: Arc<Session>,
    qos: QoS,
    retain_as_published: bool,
    sub_ids: Vec<u32>,
    /// Set when the target was picked from a shared subscription group.
    shared: Option<Arc<str>>,
}

/// What happened to a publish.
#[derive(Debug, Default, Clone, Copy)]
pub struct Routed {
    /// Some session's queue was full (a 5.0 publisher is told 0x97 Quota exceeded).
    pub quota_exceeded: bool,
}

const SHARDS: usize = 16;

pub struct Broker {
    pub config: BrokerConfig,
    pub queue_limits: QueueLimits,
    pub index: RwLock<TopicIndex<Arc<Session>>>,
    /// The store writer; `None` with `durability = "none"`.
    pub writer: Option<Writer>,
    pub retained: RwLock<HashMap<Arc<str>, Arc<Message>>>,
    sessions: Vec<Mutex<HashMap<Arc<str>, Arc<Session>>>>,
    hasher: std::collections::hash_map::RandomState,
    pub metrics: Metrics,
    pub inboxes: Arc<[Inbox]>,
    next_session_id: AtomicU64,
    pub started: Instant,
    pub shutting_down: AtomicBool,
}

impl Broker {
    pub fn new(config: BrokerConfig, inboxes: Arc<[Inbox]>, writer: Option<Writer>) -> Broker {
        let l = &config.limits;
        let queue_limits = QueueLimits {
            max_messages: l.max_queued_messages,
            max_bytes: l.max_queued_bytes,
            max_outbox: l.max_outbox_bytes,
        };
        Broker {
            metrics: Metrics::new(inboxes.len()),
            config,
            queue_limits,
            index: RwLock::new(TopicIndex::default()),
            writer,
            retained: RwLock::new(HashMap::new()),
            sessions: (0..SHARDS).map(|_| Mutex::new(HashMap::new())).collect(),
            hasher: Default::default(),
            inboxes,
            next_session_id: AtomicU64::new(1),
            started: Instant::now(),
            shutting_down: AtomicBool::new(false),
        }
    }

    fn shard(&self, client_id: &str) -> &Mutex<HashMap<Arc<str>, Arc<Session>>> {
        &self.sessions[self.hasher.hash_one(client_id) as usize % SHARDS]
    }

    fn w(&self) -> Option<&Writer> {
        self.writer.as_ref()
    }

    /// Records the session's current record (subscriptions, expiry, connection state) for the
    /// store, when it is stored.
    pub fn journal_session(&self, session: &Session, st: &SessionState, now: Instant) {
        if st.stored {
            journal::record(
                self.w(),
                Op::PutSession(journal::session_record(
                    &session.client_id,
                    session.id,
                    st,
                    now,
                )),
            );
        }
    }

    /// Marks a session stored or not after its expiry was set: a session with an expiry
    /// outlives its connection and is written to the store; one without is removed from it.
    /// A session that becomes stored brings what it already holds along (its queue, the
    /// messages in flight, received QoS 2 packet ids).
    fn set_stored(&self, session: &Session, st: &mut SessionState, now: Instant) {
        let want = st.expiry_secs > 0 && self.writer.is_some();
        if want {
            let was = std::mem::replace(&mut st.stored, true);
            self.journal_session(session, st, now);
            if !was {
                self.journal_contents(session.id, st, now);
            }
        } else {
            self.unstore(session, st);
        }
    }

    /// Removes a stored session from the store (it ended, or no longer outlives its connection).
    fn unstore(&self, session: &Session, st: &mut SessionState) {
        if std::mem::replace(&mut st.stored, false) {
            journal::record(
                self.w(),
                Op::RemoveSession {
                    client_id: session.client_id.to_string(),
                    sid: session.id,
                },
            );
        }
    }

    /// Writes everything a session holds (for a session that was not stored until now).
    fn journal_contents(&self, sid: u64, st: &SessionState, now: Instant) {
        let w = self.w();
        for q in &st.fl().queue {
            let m = journal::stored_message(&q.msg, now);
            let entry =
                journal::queued_entry(m, q.qos, q.retain, &q.subscription_ids, q.shared.as_ref());
            journal::record(
                w,
                Op::PutQueued {
                    sid,
                    seq: q.seq,
                    entry,
                },
            );
        }
        for f in &st.fl().inflight {
            let op = if f.released {
                Op::Release { sid, seq: f.seq }
            } else {
                let m = journal::stored_message(&f.msg, now);
                let entry = journal::queued_entry(
                    m,
                    f.qos,
                    f.retain,
                    &f.subscription_ids,
                    f.shared.as_ref(),
                );
                Op::PutQueued {
                    sid,
                    seq: f.seq,
                    entry,
                }
            };
            journal::record(w, op);
        }
        for &packet_id in &st.fl().incoming_qos2 {
            journal::record(w, Op::PutIncoming { sid, packet_id });
        }
    }

    /// Queues a command at the loop thread that owns `loc`, waking it if needed.
    pub fn send(&self, loc: ConnLoc, cmd: Cmd) {
        let Some(inbox) = self.inboxes.get(loc.worker as usize) else {
            return;
        };
        inbox.cmds.lock().push(cmd);
        let own = CURRENT_WORKER.with(|c| c.get()) == loc.worker;
        if !own && !inbox.notified.swap(true, Ordering::SeqCst) {
            inbox.wake();
        }
    }

    /// After writing into a session's outbox: make sure its loop will flush it.
    pub fn schedule_flush(&self, st: &mut SessionState) {
        if let Some(loc) = st.conn {
            if !st.flush_pending && !st.out.is_empty() {
                st.flush_pending = true;
                self.send(loc, Cmd::Flush(loc));
            }
        }
    }

    // ---- sessions -------------------------------------------------------------------------

    /// Binds a new connection to the session of `client_id`, creating or taking it over.
    /// Returns the session and whether it existed (CONNACK session present).
    pub fn attach(
        &self,
        client_id: &str,
        clean_start: bool,
        expiry_secs: u32,
        loc: ConnLoc,
        params: ClientParams,
        now: Instant,
    ) -> (Arc<Session>, bool) {
        let mut ended = None;
        let result = {
            let mut shard = self.shard(client_id).lock();
            let existing = shard.get(client_id).cloned();
            let reused = match existing {
                Some(s) if !clean_start => {
                    let mut st = s.state.lock();
                    if let Some(old) = st.conn.replace(loc) {
                        self.send(
                            old,
                            Cmd::Close(
                                old,
                                CloseReason::SessionTakenOver,
                                Some(ReasonCode::SessionTakenOver),
                            ),
                        );
                    }
                    // Bytes encoded for the old connection (its aliases, its protocol) must not
                    // reach the new one; QoS 1/2 messages among them are resent from inflight.
                    st.out.clear();
                    st.flush_pending = false;
                    st.backlog = 0;
                    st.aliases = None;
                    st.params = params;
                    st.expiry_secs = expiry_secs;
                    st.disconnected_at = None;
                    // A new connection before the will delay passed cancels the will
                    // [MQTT-3.1.3-9].
                    st.delayed_will = None;
                    self.set_stored(&s, &mut st, now);
                    s.connected.store(true, Ordering::Relaxed);
                    drop(st);
                    Some((s, true))
                }
                Some(s) => {
                    shard.remove(client_id);
                    ended = Some(s);
                    None
                }
                None => None,
            };
            match reused {
                Some(r) => r,
                None => {
                    let id = self.next_session_id.fetch_add(1, Ordering::Relaxed);
                    let s = Arc::new(Session::new(id, client_id.into()));
                    {
                        let mut st = s.state.lock();
                        st.conn = Some(loc);
                        st.params = params;
                        st.expiry_secs = expiry_secs;
                        self.set_stored(&s, &mut st, now);
                    }
                    s.connected.store(true, Ordering::Relaxed);
                    shard.insert(s.client_id.clone(), s.clone());
                    self.metrics.sessions.fetch_add(1, Ordering::Relaxed);
                    (s, false)
                }
            }
        };
        if let Some(old) = ended {
            // Clean start: the old session ends here; its connection (if any) is taken over.
            let loc_old = old.state.lock().conn.take();
            if let Some(o) = loc_old {
                self.send(
                    o,
                    Cmd::Close(
                        o,
                        CloseReason::SessionTakenOver,
                        Some(ReasonCode::SessionTakenOver),
                    ),
                );
            }
            self.end_session(&old, now);
        }
        result
    }

    /// The connection at `loc` closed. Returns true when the session goes on (it has an expiry
    /// or another connection took it over), false when it ended now.
    pub fn detach(&self, session: &Arc<Session>, loc: ConnLoc, now: Instant) -> bool {
        let end = {
            let mut st = session.state.lock();
            if st.conn != Some(loc) {
                return !st.ended; // taken over: the session belongs to the new connection
            }
            st.conn = None;
            st.out.clear();
            st.flush_pending = false;
            st.backlog = 0;
            st.aliases = None;
            st.disconnected_at = Some(now);
            session.connected.store(false, Ordering::Relaxed);
            let end = st.expiry_secs == 0;
            if !end {
                self.journal_session(session, &st, now);
            }
            (end, st.take_shared(), st.stored)
        };
        let (end, shared, stored) = end;
        if !shared.is_empty() {
            let left = self.redistribute(session.id, stored, shared, now);
            if !end && !left.is_empty() {
                // No other member to take them: they wait for this one to come back.
                let mut st = session.state.lock();
                for q in left {
                    let fl = st.fl_mut();
                    fl.queued_bytes += q.msg.cost();
                    fl.queue.push_back(q);
                }
            }
        }
        if end {
            self.end_session(session, now);
        }
        !end
    }

    /// Removes a session for good: from the registry, its subscriptions from the index; a will
    /// still waiting for its delay is published now [MQTT-3.1.2-8].
    pub fn end_session(&self, session: &Arc<Session>, now: Instant) {
        {
            let mut shard = self.shard(&session.client_id).lock();
            if shard
                .get(&session.client_id)
                .is_some_and(|s| Arc::ptr_eq(s, session))
            {
                shard.remove(&session.client_id);
            }
        }
        let (subs, will, shared) = {
            let mut st = session.state.lock();
            if st.ended {
                return;
            }
            st.ended = true;
            let shared = st.take_shared();
            st.clear_flows();
            self.unstore(session, &mut st);
            (st.take_subscriptions(), st.delayed_will.take(), shared)
        };
        self.metrics.sessions.fetch_sub(1, Ordering::Relaxed);
        if !subs.is_empty() {
            let mut index = self.index.write();
            for filter in subs.keys() {
                let (group, f) = split_shared(filter);
                if index.remove(f, group, session.id) {
                    self.metrics.subscriptions.fetch_sub(1, Ordering::Relaxed);
                }
            }
        }
        if !shared.is_empty() {
            // The session's records are removed as a whole above.
            self.redistribute(session.id, false, shared, now);
        }
        if let Some(will) = will {
            self.publish_will(will.1, now);
        }
    }

    /// Publishes a will: stored as retained too when its retain flag is set.
    pub fn publish_will(&self, msg: Arc<Message>, now: Instant) {
        if msg.retain {
            self.retain(&msg, now);
        }
        self.publish(msg, now);
    }

    /// Sessions without a connection: publish wills whose delay passed, end sessions whose
    /// expiry passed.
    pub fn expire_sessions(&self, now: Instant) {
        let mut wills = Vec::new();
        let mut expired = Vec::new();
        for shard in &self.sessions {
            for s in shard.lock().values() {
                let mut st = s.state.lock();
                if st.conn.is_some() {
                    continue;
                }
                if st.delayed_will.as_ref().is_some_and(|w| w.0 <= now) {
                    if let Some(w) = st.delayed_will.take() {
                        wills.push(w.1);
                    }
                }
                if let Some(at) = st.disconnected_at {
                    if st.expiry_secs != u32::MAX
                        && now.saturating_duration_since(at)
                            >= Duration::from_secs(st.expiry_secs as u64)
                    {
                        expired.push(s.clone());
                    }
                }
            }
        }
        for w in wills {
            self.publish_will(w, now);
        }
        for s in expired {
            self.end_session(&s, now);
        }
    }

    // ---- subscriptions --------------------------------------------------------------------

    /// Adds a subscription to the index. Returns true when it is new for this session.
    pub fn subscribe(&self, session: &Arc<Session>, filter: &str, s: &Subscription) -> bool {
        let (group, f) = split_shared(filter);
        let sub = Subscriber {
            id: session.id,
            target: session.clone(),
            options: s.options,
            subscription_id: s.subscription_id,
        };
        let new = self.index.write().insert(f, group, sub);
        if new {
            self.metrics.subscriptions.fetch_add(1, Ordering::Relaxed);
        }
        new
    }

    pub fn unsubscribe(&self, session: &Arc<Session>, filter: &str) -> bool {
        let (group, f) = split_shared(filter);
        let removed = self.index.write().remove(f, group, session.id);
        if removed {
            self.metrics.subscriptions.fetch_sub(1, Ordering::Relaxed);
        }
        removed
    }

    // ---- retained -------------------------------------------------------------------------

    /// Stores, replaces or (empty payload) clears the retained message of a topic
    /// [MQTT-3.3.1-5, -6]. Returns false when the store is full and the topic is new.
    pub fn retain(&self, msg: &Arc<Message>, now: Instant) -> bool {
        // `$SYS` figures are made anew by each process; they are not stored.
        let store = self.writer.is_some() && !msg.topic.starts_with("$SYS");
        let mut r = self.retained.write();
        if msg.payload.is_empty() {
            if r.remove(&msg.topic).is_some() {
                self.metrics.retained.fetch_sub(1, Ordering::Relaxed);
                if store {
                    journal::record(
                        self.w(),
                        Op::RemoveRetained {
                            topic: msg.topic.clone(),
                        },
                    );
                }
            }
            return true;
        }
        if !r.contains_key(&msg.topic) {
            if r.len() >= self.config.limits.max_retained_messages {
                self.metrics.limit(Limit::MaxRetainedMessages);
                return false;
            }
            self.metrics.retained.fetch_add(1, Ordering::Relaxed);
        }
        r.insert(msg.topic.clone(), msg.clone());
        if store {
            journal::record(self.w(), Op::PutRetained(journal::stored_message(msg, now)));
        }
        true
    }

    /// Retained messages matching a filter, dropping expired ones.
    pub fn retained_matching(&self, filter: &str, now: Instant) -> Vec<Arc<Message>> {
        let mut expired = Vec::new();
        let out: Vec<Arc<Message>> = {
            let r = self.retained.read();
            r.values()
                .filter(|m| topic::matches(filter, &m.topic))
                .filter(|m| {
                    if m.is_expired(now) {
                        expired.push(m.topic.clone());
                        false
                    } else {
                        true
                    }
                })
                .cloned()
                .collect()
        };
        if !expired.is_empty() {
            let mut r = self.retained.write();
            for t in expired {
                if r.get(&t).is_some_and(|m| m.is_expired(now)) {
                    r.remove(&t);
                    self.metrics.retained.fetch_sub(1, Ordering::Relaxed);
                    if self.writer.is_some() {
                        journal::record(self.w(), Op::RemoveRetained { topic: t });
                    }
                }
            }
        }
        out
    }

    // ---- delivery -------------------------------------------------------------------------

    /// Routes a message to every matching session on this node. This is the hot path: it runs
    /// on the publisher's thread and encodes straight into each subscriber's outbox.
    ///
    /// (A cluster forwards to remote nodes here, once per node that wants the topic.)
    pub fn publish(&self, msg: Arc<Message>, now: Instant) -> Routed {
        TARGETS.with(|t| {
            let mut targets = t.borrow_mut();
            targets.clear();
            self.collect_targets(&msg, &mut targets);
            let routed = self.deliver(&msg, &targets, now);
            targets.clear();
            routed
        })
    }

    fn collect_targets(&self, msg: &Message, targets: &mut Vec<Target>) {
        let index = self.index.read();
        index.for_each_match(&msg.topic, |m| {
            let (s, shared) = match m {
                Match::Direct(s) => {
                    // No-local: not to the publisher's own subscription [MQTT-3.8.3-3].
                    if s.options.no_local && s.id == msg.origin {
                        return;
                    }
                    (s, None)
                }
                Match::Shared(g) => match self.pick_member(&g.members, &g.cursor, 0) {
                    Some(s) => (s, Some(g.key.clone())),
                    None => return,
                },
            };
            targets.push(Target {
                session: s.target.clone(),
                qos: msg.qos.min(s.options.qos),
                retain_as_published: s.options.retain_as_published,
                sub_ids: s.subscription_id.into_iter().collect(),
                shared,
            });
        });
        drop(index);
        if targets.len() > 1 {
            // Overlapping subscriptions of one session: one delivery at the highest QoS with
            // every subscription identifier [MQTT-3.3.4-2, -3, -5].
            targets.sort_by_key(|t| t.session.id);
            targets.dedup_by(|later, kept| {
                if later.session.id != kept.session.id {
                    return false;
                }
                kept.qos = kept.qos.max(later.qos);
                kept.retain_as_published |= later.retain_as_published;
                kept.sub_ids.append(&mut later.sub_ids);
                true
            });
        }
    }

    /// Picks the member of a shared group that gets a message; `exclude` is a session id
    /// that must not be picked (0 for none).
    fn pick_member<'a>(
        &self,
        members: &'a [Subscriber<Arc<Session>>],
        cursor: &std::sync::atomic::AtomicUsize,
        exclude: u64,
    ) -> Option<&'a Subscriber<Arc<Session>>> {
        if members.is_empty() {
            return None;
        }
        let n = members.len();
        let start = match self.config.shared_subscription_strategy {
            SharedStrategy::RoundRobin => cursor.fetch_add(1, Ordering::Relaxed),
            SharedStrategy::Random => rand::random::<u32>() as usize,
        };
        // Prefer a member with a live connection, so messages are not parked with a member
        // that went away while others are there to take them.
        let candidates = (0..n)
            .map(|k| &members[(start + k) % n])
            .filter(|s| s.id != exclude);
        candidates
            .clone()
            .find(|s| s.target.is_connected())
            .or_else(|| candidates.clone().next())
    }

    /// Hands messages that a departed member of a shared subscription had not finished to
    /// another member of its group, so they are not stranded. Returns those no other member
    /// could take.
    /// `from_stored`: the departed session is stored, so each message handed on is removed
    /// from its stored queue.
    fn redistribute(
        &self,
        from: u64,
        from_stored: bool,
        items: Vec<Queued>,
        now: Instant,
    ) -> Vec<Queued> {
        let mut left = Vec::new();
        for q in items {
            let Some(key) = q.shared.clone() else {
                continue;
            };
            let (group, filter) = split_shared(&key);
            let picked = {
                let index = self.index.read();
                group
                    .and_then(|g| index.shared_group(filter, g))
                    .and_then(|g| self.pick_member(&g.members, &g.cursor, from))
                    .map(|s| (s.target.clone(), s.options.qos, s.subscription_id))
            };
            let Some((session, granted, sub_id)) = picked else {
                left.push(q);
                continue;
            };
            let ids: Vec<u32> = sub_id.into_iter().collect();
            let mut st = session.state.lock();
            let qos = q.msg.qos.min(granted);
            let offered = self.offer(
                session.id,
                &mut st,
                &q.msg,
                (qos, q.retain),
                &ids,
                Some(&key),
                &mut None,
                now,
            );
            if from_stored {
                journal::record(
                    self.w(),
                    Op::RemoveQueued {
                        sid: from,
                        seq: q.seq,
                    },
                );
            }
            match offered {
                Ok(o) => {
                    if o.sent > 0 {
                        self.metrics.add(|c| &c.messages_sent, o.sent as u64);
                        self.schedule_flush(&mut st);
                    }
                }
                Err(r) => {
                    drop(st);
                    self.refused(r, &mut Routed::default());
                }
            }
        }
        left
    }

    /// Offers a message to one session (see `SessionState::offer`) and, when the session is
    /// stored, journals it into the session's stored queue. `stored_msg` caches the stored form
    /// of the message across the sessions of one publish.
    #[allow(clippy::too_many_arguments)]
    pub fn offer(
        &self,
        sid: u64,
        st: &mut SessionState,
        msg: &Arc<Message>,
        (qos, retain): (QoS, bool),
        sub_ids: &[u32],
        shared: Option<&Arc<str>>,
        stored_msg: &mut Option<Arc<StoredMessage>>,
        now: Instant,
    ) -> Result<Offered, Refusal> {
        let o = st.offer(msg, qos, retain, sub_ids, shared, &self.queue_limits, now)?;
        if let (Some(seq), true) = (o.seq, st.stored) {
            let m = stored_msg
                .get_or_insert_with(|| journal::stored_message(msg, now))
                .clone();
            let entry = journal::queued_entry(m, qos, retain, sub_ids, shared);
            journal::record(self.w(), Op::PutQueued { sid, seq, entry });
        }
        Ok(o)
    }

    fn deliver(&self, msg: &Arc<Message>, targets: &[Target], now: Instant) -> Routed {
        let mut routed = Routed::default();
        let mut sent = 0u64;
        // Made once per message, when the first stored session takes it.
        let mut stored_msg: Option<Arc<StoredMessage>> = None;
        for t in targets {
            let mut st = t.session.state.lock();
            let retain = t.retain_as_published && msg.retain;
            let connected = st.conn.is_some();
            let result = self.offer(
                t.session.id,
                &mut st,
                msg,
                (t.qos, retain),
                &t.sub_ids,
                t.shared.as_ref(),
                &mut stored_msg,
                now,
            );
            // A QoS 1/2 message for a live connection that had to wait: the window was full.
            let waited = match &result {
                Ok(o) => o.sent == 0 && o.seq.is_some(),
                Err(r) => matches!(r, Refusal::QueueFull | Refusal::QueueBytesFull),
            };
            if connected && waited {
                self.metrics.limit(Limit::MaxInflight);
            }
            match result {
                Ok(o) => {
                    sent += o.sent as u64;
                    if o.sent > 0 {
                        self.schedule_flush(&mut st);
                    }
                }
                Err(r) => {
                    drop(st);
                    self.refused(r, &mut routed);
                }
            }
        }
        if sent > 0 {
            self.metrics.add(|c| &c.messages_sent, sent);
        }
        routed
    }

    // ---- restart ---------------------------------------------------------------------------

    /// Rebuilds what the store held: sessions with their subscriptions, queues, inflight QoS 2
    /// releases and received packet ids, and retained messages. Runs before any listener
    /// accepts. Messages that may have been sent before the restart go out again with DUP and
    /// their original packet ids. Returns the number of sessions restored.
    pub fn restore(&self, snap: Snapshot, now: Instant) -> usize {
        self.next_session_id
            .fetch_max(snap.max_sid + 1, Ordering::Relaxed);
        for sid in &snap.orphan_sids {
            journal::record(
                self.w(),
                Op::RemoveSession {
                    client_id: String::new(),
                    sid: *sid,
                },
            );
        }
        let count = snap.sessions.len();
        // Released QoS 2 deliveries need only their packet id; they share one placeholder.
        let released = Arc::new(Message::new(
            "",
            bytes::Bytes::new(),
            QoS::ExactlyOnce,
            false,
        ));
        for loaded in snap.sessions {
            let rec = loaded.session;
            let s = Arc::new(Session::new(rec.sid, rec.client_id.as_str().into()));
            let mut subs = Vec::with_capacity(rec.subscriptions.len());
            {
                let mut st = s.state.lock();
                st.stored = true;
                st.expiry_secs = rec.expiry_secs;
                // Connected when the broker stopped: the session's time starts now.
                st.disconnected_at = Some(
                    rec.disconnected_at_ms
                        .map_or(now, |ms| journal::from_unix_ms(ms, now)),
                );
                for f in rec.subscriptions {
                    let sub = Subscription {
                        options: SubOptions {
                            qos: QoS::from_u8(f.qos).unwrap_or(QoS::AtMostOnce),
                            no_local: f.no_local,
                            retain_as_published: f.retain_as_published,
                            retain_handling: f.retain_handling,
                        },
                        subscription_id: f.subscription_id,
                    };
                    st.add_subscription(f.filter.clone(), sub.clone());
                    subs.push((f.filter, sub));
                }
                for (seq, e) in loaded.queue {
                    st.next_seq = st.next_seq.max(seq + 1);
                    let qos = QoS::from_u8(e.qos).unwrap_or(QoS::AtLeastOnce);
                    let shared = e.shared.map(|g| Arc::<str>::from(g.as_str()));
                    match e.msg {
                        None => st.fl_mut().inflight.push_back(Inflight {
                            seq,
                            packet_id: packet_id_of(seq),
                            msg: released.clone(),
                            qos: QoS::ExactlyOnce,
                            retain: false,
                            subscription_ids: Box::new([]),
                            released: true,
                            shared,
                        }),
                        Some(m) => {
                            let msg = Arc::new(Message::from_stored(&m, now));
                            let fl = st.fl_mut();
                            fl.queued_bytes += msg.cost();
                            fl.queue.push_back(Queued {
                                seq,
                                dup: true,
                                msg,
                                qos,
                                retain: e.retain,
                                subscription_ids: e.subscription_ids.into(),
                                shared,
                            });
                        }
                    }
                }
                if !loaded.incoming.is_empty() {
                    st.fl_mut().incoming_qos2 = loaded.incoming;
                }
            }
            for (filter, sub) in &subs {
                self.subscribe(&s, filter, sub);
            }
            self.shard(&s.client_id)
                .lock()
                .insert(s.client_id.clone(), s.clone());
            self.metrics.sessions.fetch_add(1, Ordering::Relaxed);
        }
        {
            let mut r = self.retained.write();
            for m in snap.retained {
                let msg = Arc::new(Message::from_stored(&m, now));
                if r.insert(msg.topic.clone(), msg).is_none() {
                    self.metrics.retained.fetch_add(1, Ordering::Relaxed);
                }
            }
        }
        count
    }

    pub fn refused(&self, r: Refusal, routed: &mut Routed) {
        match r {
            Refusal::OutboxFull => {
                self.metrics.add(|c| &c.qos0_dropped, 1);
                self.metrics.limit(Limit::MaxOutboxBytes);
            }
            Refusal::QueueFull => {
                self.metrics.add(|c| &c.messages_dropped, 1);
                self.metrics.limit(Limit::MaxQueuedMessages);
                routed.quota_exceeded = true;
            }
            Refusal::QueueBytesFull => {
                self.metrics.add(|c| &c.messages_dropped, 1);
                self.metrics.limit(Limit::MaxQueuedBytes);
                routed.quota_exceeded = true;
            }
            Refusal::TooLarge => self.metrics.limit(Limit::OutgoingPacketSize),
            Refusal::Expired => self.metrics.add(|c| &c.messages_expired, 1),
        }
    }
}

/// Splits `$share/group/filter` into (Some(group), filter); other filters into (None, filter).
pub fn split_shared(filter: &str) -> (Option<&str>, &str) {
    match topic::parse_shared(filter) {
        Some((g, f)) => (Some(g), f),
        None => (None, filter),
    }
}
