//! Durable state behind one trait.
//!
//! The broker keeps its working state in memory and tells a [`Store`] what must outlive a
//! restart: sessions that outlive their connection (with their subscriptions), each such
//! session's queued and inflight QoS 1/2 messages, the QoS 2 packet ids it has received and
//! not yet released, and retained messages.
//!
//! Writes go through a [`Writer`]: any thread submits operations and gets a ticket back; one
//! writer thread commits everything submitted so far as one group (one fsync for many
//! messages) and then publishes the highest durable ticket. The broker holds back a PUBACK or
//! PUBREC until the ticket of every write it depends on is durable. A backend only has to apply
//! a group of operations and say when they are durable, which an embedded engine does with one
//! journal sync and a Cassandra backend with concurrent prepared statements awaited together.
//!
//! Backends: [`FjallStore`] (the embedded default, see docs/STORAGE.md for why this engine)
//! and [`MemoryStore`] (for tests; nothing survives the process). `durability = "none"` uses
//! no store at all.

mod engine;
mod memory;
mod record;
mod writer;

use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use serde::{Deserialize, Serialize};

pub use engine::{FjallStore, Sync};
pub use memory::MemoryStore;
pub use writer::{Outcome, Writer, WriterStats};

/// A stored subscription.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StoredSubscription {
    /// The filter as subscribed, with any `$share/group/` prefix.
    pub filter: String,
    pub qos: u8,
    pub no_local: bool,
    pub retain_as_published: bool,
    pub retain_handling: u8,
    pub subscription_id: Option<u32>,
}

/// A session that outlives its connection.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StoredSession {
    pub client_id: String,
    /// The broker's numeric id of the session: the prefix of its queue and packet-id keys.
    pub sid: u64,
    /// Session Expiry Interval in seconds (u32::MAX: never).
    pub expiry_secs: u32,
    /// When its last connection closed (Unix milliseconds); `None` while connected.
    pub disconnected_at_ms: Option<u64>,
    pub subscriptions: Vec<StoredSubscription>,
}

/// An application message as stored: in a session's queue, or as the retained message of
/// its topic.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StoredMessage {
    pub topic: Arc<str>,
    pub payload: Bytes,
    /// MQTT 5 properties forwarded to subscribers, encoded.
    pub props: Bytes,
    /// QoS as published.
    pub qos: u8,
    pub retain: bool,
    /// When the Message Expiry Interval runs out (Unix milliseconds).
    pub expires_at_ms: Option<u64>,
}

/// One message in a session's queue (waiting, or sent and not yet acknowledged).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StoredQueued {
    /// QoS of this delivery (the publish QoS capped by the subscription's).
    pub qos: u8,
    pub retain: bool,
    pub subscription_ids: Vec<u32>,
    /// The shared subscription (`$share/g/f`) it came through, if any.
    pub shared: Option<String>,
    /// The message; `None` once a QoS 2 delivery is released (PUBREC received, PUBREL due).
    pub msg: Option<Arc<StoredMessage>>,
}

impl StoredQueued {
    /// A QoS 2 delivery after PUBREC: only its packet id (from the key) and the released mark
    /// matter from here on.
    pub fn released() -> StoredQueued {
        StoredQueued {
            qos: 2,
            retain: false,
            subscription_ids: Vec::new(),
            shared: None,
            msg: None,
        }
    }
}

/// One change to durable state. A group of them is applied in order.
#[derive(Debug, Clone)]
pub enum Op {
    /// Creates or replaces a session record; a record of a newer session (higher sid) of the
    /// same client is left alone.
    PutSession(StoredSession),
    /// Removes a session with everything it holds (queue, received packet ids). The record
    /// under `client_id` is removed only while it still belongs to `sid`: a newer session of
    /// the same client, written earlier by another thread, is left alone.
    RemoveSession {
        client_id: String,
        sid: u64,
    },
    /// Adds or replaces message `seq` of session `sid`.
    PutQueued {
        sid: u64,
        seq: u64,
        entry: StoredQueued,
    },
    /// Outgoing QoS 2: PUBREC received; only the PUBREL is left to deliver.
    Release {
        sid: u64,
        seq: u64,
    },
    /// The message is acknowledged for good.
    RemoveQueued {
        sid: u64,
        seq: u64,
    },
    /// Incoming QoS 2: packet id received and PUBREC'd.
    PutIncoming {
        sid: u64,
        packet_id: u16,
    },
    /// Incoming QoS 2: PUBREL received.
    RemoveIncoming {
        sid: u64,
        packet_id: u16,
    },
    PutRetained(Arc<StoredMessage>),
    RemoveRetained {
        topic: Arc<str>,
    },
}

impl Op {
    /// Approximate bytes this operation holds while it waits (for the writer's backlog limit).
    pub fn cost(&self) -> usize {
        let msg = |m: &StoredMessage| m.topic.len() + m.payload.len() + m.props.len();
        64 + match self {
            Op::PutSession(s) => {
                s.client_id.len()
                    + s.subscriptions
                        .iter()
                        .map(|f| f.filter.len() + 16)
                        .sum::<usize>()
            }
            Op::RemoveSession { client_id, .. } => client_id.len(),
            Op::PutQueued { entry, .. } => entry.msg.as_deref().map_or(0, msg),
            Op::PutRetained(m) => msg(m),
            Op::RemoveRetained { topic } => topic.len(),
            _ => 0,
        }
    }
}

/// A session as loaded at start, with its queue in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LoadedSession {
    pub session: StoredSession,
    /// (seq, entry), ascending by seq.
    pub queue: Vec<(u64, StoredQueued)>,
    /// Incoming QoS 2 packet ids not yet released.
    pub incoming: Vec<u16>,
}

/// Everything a store holds, read once at start.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Snapshot {
    pub sessions: Vec<LoadedSession>,
    pub retained: Vec<StoredMessage>,
    /// Queue entries and packet ids whose session record was missing (skipped).
    pub orphans: usize,
    /// The session ids those belong to, for removal.
    pub orphan_sids: Vec<u64>,
    /// The highest session id found anywhere: new sessions are numbered above it.
    pub max_sid: u64,
}

impl Snapshot {
    fn orphan(&mut self, sid: u64) {
        self.orphans += 1;
        self.max_sid = self.max_sid.max(sid);
        if !self.orphan_sids.contains(&sid) {
            self.orphan_sids.push(sid);
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("store I/O error: {0}")]
    Io(#[from] std::io::Error),
    #[error("store engine error: {0}")]
    Engine(String),
    #[error("store data is corrupt: {0}")]
    Corrupt(String),
    #[error("store is closed")]
    Closed,
}

/// What must survive a restart. `apply` returns once the group is as durable as the
/// backend was opened to make it; the writer calls it from one thread, in order.
pub trait Store: Send + std::marker::Sync + 'static {
    fn apply(&self, ops: &[Op]) -> Result<(), StoreError>;
    fn load(&self) -> Result<Snapshot, StoreError>;
}

/// Now as Unix milliseconds.
pub fn unix_ms(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH)
        .unwrap_or(Duration::ZERO)
        .as_millis()
        .min(u64::MAX as u128) as u64
}
