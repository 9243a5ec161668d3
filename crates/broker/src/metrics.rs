//! Counters of one node.
//!
//! Each data-plane thread has its own slot of counters and is the only writer of it, so the hot
//! path does relaxed stores on cache lines no other core writes; a scrape sums the slots.
//! Gauges that several threads change (connections, sessions, retained) are single atomics.

use std::cell::Cell;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering::Relaxed};

/// Why a connection ended. Every close is counted by reason.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CloseReason {
    /// The client sent DISCONNECT (normal).
    ClientDisconnect,
    /// The client sent DISCONNECT 0x04: close, but publish the will.
    ClientDisconnectWithWill,
    /// The client closed the socket without DISCONNECT.
    PeerClosed,
    /// Read or write failed.
    IoError,
    /// Malformed packet or protocol violation; the reason code says which.
    ProtocolError,
    /// A packet larger than the maximum packet size.
    PacketTooLarge,
    /// No CONNECT within the connect timeout.
    ConnectTimeout,
    /// Nothing received for 1.5 x keepalive.
    KeepAliveTimeout,
    /// Another connection took over the session.
    SessionTakenOver,
    /// The outbox could not be drained within the write timeout.
    SlowConsumer,
    /// The connection limit was reached.
    ServerBusy,
    /// CONNECT refused (bad protocol version, client id, ...).
    ConnectRefused,
    /// A client limit was exceeded (receive maximum, topic alias, ...).
    LimitExceeded,
    /// The broker is shutting down.
    ServerShutdown,
    /// A 3.1.1 client's publish could not be stored (3.1.1 has no negative acknowledgement).
    StoreFailure,
}

impl CloseReason {
    pub const ALL: [CloseReason; 15] = [
        CloseReason::ClientDisconnect,
        CloseReason::ClientDisconnectWithWill,
        CloseReason::PeerClosed,
        CloseReason::IoError,
        CloseReason::ProtocolError,
        CloseReason::PacketTooLarge,
        CloseReason::ConnectTimeout,
        CloseReason::KeepAliveTimeout,
        CloseReason::SessionTakenOver,
        CloseReason::SlowConsumer,
        CloseReason::ServerBusy,
        CloseReason::ConnectRefused,
        CloseReason::LimitExceeded,
        CloseReason::ServerShutdown,
        CloseReason::StoreFailure,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            CloseReason::ClientDisconnect => "client_disconnect",
            CloseReason::ClientDisconnectWithWill => "client_disconnect_with_will",
            CloseReason::PeerClosed => "peer_closed",
            CloseReason::IoError => "io_error",
            CloseReason::ProtocolError => "protocol_error",
            CloseReason::PacketTooLarge => "packet_too_large",
            CloseReason::ConnectTimeout => "connect_timeout",
            CloseReason::KeepAliveTimeout => "keepalive_timeout",
            CloseReason::SessionTakenOver => "session_taken_over",
            CloseReason::SlowConsumer => "slow_consumer",
            CloseReason::ServerBusy => "server_busy",
            CloseReason::ConnectRefused => "connect_refused",
            CloseReason::LimitExceeded => "limit_exceeded",
            CloseReason::ServerShutdown => "server_shutdown",
            CloseReason::StoreFailure => "store_failure",
        }
    }

    fn index(self) -> usize {
        CloseReason::ALL
            .iter()
            .position(|r| *r == self)
            .unwrap_or(0)
    }
}

/// A configured limit that was hit. Every hit is counted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Limit {
    MaxConnections,
    ConnectTimeout,
    MaxPacketSize,
    MaxInflight,
    ReceiveMaximum,
    MaxQueuedMessages,
    MaxQueuedBytes,
    MaxOutboxBytes,
    WriteTimeout,
    MaxTopicLength,
    MaxTopicLevels,
    MaxSubscriptions,
    MaxClientIdLength,
    TopicAliasMaximum,
    MaxRetainedMessages,
    OutgoingPacketSize,
    /// A publisher paused because the store's backlog was over `store.max_backlog_bytes`.
    StoreBacklog,
}

impl Limit {
    pub const ALL: [Limit; 17] = [
        Limit::MaxConnections,
        Limit::ConnectTimeout,
        Limit::MaxPacketSize,
        Limit::MaxInflight,
        Limit::ReceiveMaximum,
        Limit::MaxQueuedMessages,
        Limit::MaxQueuedBytes,
        Limit::MaxOutboxBytes,
        Limit::WriteTimeout,
        Limit::MaxTopicLength,
        Limit::MaxTopicLevels,
        Limit::MaxSubscriptions,
        Limit::MaxClientIdLength,
        Limit::TopicAliasMaximum,
        Limit::MaxRetainedMessages,
        Limit::OutgoingPacketSize,
        Limit::StoreBacklog,
    ];

    /// The config key of the limit (under `limits.`), or what was exceeded.
    pub fn as_str(self) -> &'static str {
        match self {
            Limit::MaxConnections => "max_connections",
            Limit::ConnectTimeout => "connect_timeout_ms",
            Limit::MaxPacketSize => "max_packet_size",
            Limit::MaxInflight => "max_inflight",
            Limit::ReceiveMaximum => "receive_maximum",
            Limit::MaxQueuedMessages => "max_queued_messages",
            Limit::MaxQueuedBytes => "max_queued_bytes",
            Limit::MaxOutboxBytes => "max_outbox_bytes",
            Limit::WriteTimeout => "write_timeout_ms",
            Limit::MaxTopicLength => "max_topic_length",
            Limit::MaxTopicLevels => "max_topic_levels",
            Limit::MaxSubscriptions => "max_subscriptions_per_client",
            Limit::MaxClientIdLength => "max_client_id_length",
            Limit::TopicAliasMaximum => "topic_alias_maximum",
            Limit::MaxRetainedMessages => "max_retained_messages",
            Limit::OutgoingPacketSize => "client_maximum_packet_size",
            Limit::StoreBacklog => "store.max_backlog_bytes",
        }
    }

    fn index(self) -> usize {
        Limit::ALL.iter().position(|r| *r == self).unwrap_or(0)
    }
}

/// Counters written by one thread only.
#[repr(align(128))]
pub(crate) struct ThreadCounters {
    pub messages_received: AtomicU64,
    pub messages_sent: AtomicU64,
    pub bytes_received: AtomicU64,
    pub bytes_sent: AtomicU64,
    pub packets_received: AtomicU64,
    pub packets_sent: AtomicU64,
    pub qos0_dropped: AtomicU64,
    pub messages_dropped: AtomicU64,
    pub messages_expired: AtomicU64,
    pub connections_accepted: AtomicU64,
    /// QoS 1/2 publishes refused because the store could not write them.
    pub store_refused: AtomicU64,
    pub closed: [AtomicU64; CloseReason::ALL.len()],
    pub limits: [AtomicU64; Limit::ALL.len()],
    /// Protocol errors by MQTT reason code (0x80..=0xA2 -> index code - 0x80).
    pub protocol_errors: [AtomicU64; 0x23],
}

impl Default for ThreadCounters {
    fn default() -> Self {
        let z = || AtomicU64::new(0);
        ThreadCounters {
            messages_received: z(),
            messages_sent: z(),
            bytes_received: z(),
            bytes_sent: z(),
            packets_received: z(),
            packets_sent: z(),
            qos0_dropped: z(),
            messages_dropped: z(),
            messages_expired: z(),
            connections_accepted: z(),
            store_refused: z(),
            closed: std::array::from_fn(|_| z()),
            limits: std::array::from_fn(|_| z()),
            protocol_errors: std::array::from_fn(|_| z()),
        }
    }
}

#[inline]
pub(crate) fn bump(c: &AtomicU64, n: u64) {
    // Only the owning thread writes its slot, so load + store is enough (no locked add).
    c.store(c.load(Relaxed).wrapping_add(n), Relaxed);
}

thread_local! {
    static SLOT: Cell<usize> = const { Cell::new(usize::MAX) };
}

pub struct Metrics {
    slots: Box<[ThreadCounters]>,
    pub(crate) connections: AtomicI64,
    pub(crate) sessions: AtomicI64,
    pub(crate) retained: AtomicI64,
    pub(crate) subscriptions: AtomicI64,
    /// Slot shared by threads that are not data-plane workers (housekeeping, tests); written
    /// with atomic adds since several threads may use it.
    shared: ThreadCounters,
}

impl Metrics {
    pub(crate) fn new(workers: usize) -> Metrics {
        Metrics {
            slots: (0..workers).map(|_| ThreadCounters::default()).collect(),
            connections: AtomicI64::new(0),
            sessions: AtomicI64::new(0),
            retained: AtomicI64::new(0),
            subscriptions: AtomicI64::new(0),
            shared: ThreadCounters::default(),
        }
    }

    /// Binds the calling thread to slot `i` (each worker calls this once at start).
    pub(crate) fn bind_thread(i: usize) {
        SLOT.with(|s| s.set(i));
    }

    /// Runs `f` on the calling thread's counters.
    #[inline]
    pub(crate) fn with<R>(&self, f: impl FnOnce(&ThreadCounters, bool) -> R) -> R {
        let slot = SLOT.with(|s| s.get());
        match self.slots.get(slot) {
            Some(c) => f(c, true),
            None => f(&self.shared, false),
        }
    }

    pub(crate) fn add(&self, pick: impl Fn(&ThreadCounters) -> &AtomicU64, n: u64) {
        self.with(|c, owned| {
            let a = pick(c);
            if owned {
                bump(a, n)
            } else {
                a.fetch_add(n, Relaxed);
            }
        })
    }

    pub(crate) fn closed(&self, r: CloseReason) {
        self.add(|c| &c.closed[r.index()], 1);
    }

    pub(crate) fn limit(&self, l: Limit) {
        self.add(|c| &c.limits[l.index()], 1);
    }

    pub(crate) fn protocol_error(&self, code: u8) {
        let i = code.saturating_sub(0x80) as usize;
        if i < 0x23 {
            self.add(|c| &c.protocol_errors[i], 1);
        }
    }

    pub fn snapshot(&self) -> MetricsSnapshot {
        let mut s = MetricsSnapshot {
            connections: self.connections.load(Relaxed).max(0) as u64,
            sessions: self.sessions.load(Relaxed).max(0) as u64,
            retained_messages: self.retained.load(Relaxed).max(0) as u64,
            subscriptions: self.subscriptions.load(Relaxed).max(0) as u64,
            ..Default::default()
        };
        let mut closed = [0u64; CloseReason::ALL.len()];
        let mut limits = [0u64; Limit::ALL.len()];
        let mut perr = [0u64; 0x23];
        for c in self.slots.iter().chain(std::iter::once(&self.shared)) {
            s.messages_received += c.messages_received.load(Relaxed);
            s.messages_sent += c.messages_sent.load(Relaxed);
            s.bytes_received += c.bytes_received.load(Relaxed);
            s.bytes_sent += c.bytes_sent.load(Relaxed);
            s.packets_received += c.packets_received.load(Relaxed);
            s.packets_sent += c.packets_sent.load(Relaxed);
            s.qos0_dropped += c.qos0_dropped.load(Relaxed);
            s.messages_dropped += c.messages_dropped.load(Relaxed);
            s.messages_expired += c.messages_expired.load(Relaxed);
            s.connections_accepted += c.connections_accepted.load(Relaxed);
            s.store_refused += c.store_refused.load(Relaxed);
            for (i, v) in c.closed.iter().enumerate() {
                closed[i] += v.load(Relaxed);
            }
            for (i, v) in c.limits.iter().enumerate() {
                limits[i] += v.load(Relaxed);
            }
            for (i, v) in c.protocol_errors.iter().enumerate() {
                perr[i] += v.load(Relaxed);
            }
        }
        // PUBLISH packets are counted as messages sent; `packets_sent` counts the others.
        s.packets_sent += s.messages_sent;
        s.closed = CloseReason::ALL
            .iter()
            .map(|r| (r.as_str(), closed[r.index()]))
            .collect();
        s.limit_hits = Limit::ALL
            .iter()
            .map(|l| (l.as_str(), limits[l.index()]))
            .collect();
        s.protocol_errors = perr
            .iter()
            .enumerate()
            .filter(|(_, v)| **v > 0)
            .map(|(i, v)| (0x80 + i as u8, *v))
            .collect();
        s
    }
}

/// A point-in-time copy of every counter, for `/metrics` and `$SYS`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MetricsSnapshot {
    /// Connections open now.
    pub connections: u64,
    /// Sessions held now (connected or not).
    pub sessions: u64,
    pub retained_messages: u64,
    pub subscriptions: u64,
    pub connections_accepted: u64,
    /// PUBLISH packets received from clients.
    pub messages_received: u64,
    /// PUBLISH packets sent to clients.
    pub messages_sent: u64,
    pub bytes_received: u64,
    pub bytes_sent: u64,
    pub packets_received: u64,
    pub packets_sent: u64,
    /// QoS 0 messages dropped because a subscriber's outbox was full.
    pub qos0_dropped: u64,
    /// QoS 1/2 messages dropped because a session's queue was full.
    pub messages_dropped: u64,
    /// Messages whose message expiry interval passed before delivery.
    pub messages_expired: u64,
    /// Connections closed, by reason.
    pub closed: Vec<(&'static str, u64)>,
    /// Limit hits, by limit (config key under `limits.`).
    pub limit_hits: Vec<(&'static str, u64)>,
    /// Protocol errors, by MQTT 5 reason code (only non-zero entries).
    pub protocol_errors: Vec<(u8, u64)>,
    /// QoS 1/2 publishes refused because the store could not write them.
    pub store_refused: u64,
    /// The store writer's figures; `None` with `durability = "none"`.
    pub store: Option<StoreSnapshot>,
}

/// The store writer's counters.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StoreSnapshot {
    /// Groups committed (one sync each with `fsync`).
    pub commits: u64,
    /// Operations written.
    pub ops: u64,
    pub failed_commits: u64,
    pub failed_ops: u64,
    /// Operations that cancelled out within their group and were not written.
    pub elided_ops: u64,
    /// Time spent committing, in microseconds.
    pub commit_micros: u64,
    /// Operations and bytes waiting to be written.
    pub backlog_ops: u64,
    pub backlog_bytes: u64,
}

impl StoreSnapshot {
    pub fn of(w: &ballast_store::WriterStats) -> StoreSnapshot {
        StoreSnapshot {
            commits: w.commits.load(Relaxed),
            ops: w.ops.load(Relaxed),
            failed_commits: w.failed_commits.load(Relaxed),
            failed_ops: w.failed_ops.load(Relaxed),
            elided_ops: w.elided_ops.load(Relaxed),
            commit_micros: w.commit_micros.load(Relaxed),
            backlog_ops: w.backlog_ops.load(Relaxed),
            backlog_bytes: w.backlog_bytes.load(Relaxed),
        }
    }
}
