//! What the protocol core asks the store to write.
//!
//! Each change is submitted to the store writer as it happens, while the caller holds the lock
//! of the state it describes (a session's, the retained map's): the store then sees the changes
//! to one thing in the order they were made, whichever threads made them. Handling one packet
//! can make several (a publish reaches every persistent subscriber); the highest ticket this
//! thread got since the packet's handling began is what its answer waits for (see
//! `Connection::respond`).

use std::cell::Cell;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use ballast_store::{
    unix_ms, Op, StoredMessage, StoredQueued, StoredSession, StoredSubscription, Writer,
};

use super::message::Message;
use super::session::{SessionState, Subscription};

thread_local! {
    /// The highest ticket submitted by this thread since `begin`.
    static LAST: Cell<u64> = const { Cell::new(0) };
    /// This thread submitted something since it last kicked the writer.
    static DIRTY: Cell<bool> = const { Cell::new(false) };
}

/// Submits a change to the store (nothing without a writer). The writer starts on it at the
/// next `kick`.
pub fn record(w: Option<&Writer>, op: Op) {
    if let Some(w) = w {
        let t = w.submit_one(op);
        LAST.with(|l| l.set(l.get().max(t)));
        DIRTY.with(|d| d.set(true));
    }
}

/// Wakes the writer for what this thread submitted (once per loop turn: one wake-up, one
/// group, however many messages).
pub fn kick(w: Option<&Writer>) {
    if DIRTY.with(|d| d.replace(false)) {
        if let Some(w) = w {
            w.kick();
        }
    }
}

/// Starts the handling of a packet: earlier submissions of this thread are not its concern.
pub fn begin() {
    LAST.with(|l| l.set(0));
}

/// The ticket covering everything this thread submitted since `begin` (0: nothing).
pub fn ticket() -> u64 {
    LAST.with(|l| l.get())
}

/// Wall-clock time for an instant, for records that must mean the same after a restart.
pub fn to_unix_ms(t: Instant, now: Instant) -> u64 {
    let wall = SystemTime::now();
    let wall = if t >= now {
        wall + (t - now)
    } else {
        wall - (now - t)
    };
    unix_ms(wall)
}

/// The instant a stored wall-clock time corresponds to in this process.
pub fn from_unix_ms(ms: u64, now: Instant) -> Instant {
    let wall_now = unix_ms(SystemTime::now());
    // Clamped: a stored time far in the future (or damaged) must not overflow an Instant.
    if ms >= wall_now {
        let ahead = Duration::from_millis((ms - wall_now).min(100 * 365 * 24 * 3600 * 1000));
        now.checked_add(ahead).unwrap_or(now)
    } else {
        now.checked_sub(Duration::from_millis(wall_now - ms))
            .unwrap_or(now)
    }
}

pub fn stored_message(m: &Message, now: Instant) -> Arc<StoredMessage> {
    Arc::new(StoredMessage {
        topic: m.topic.clone(),
        payload: m.payload.clone(),
        props: m.props.clone(),
        qos: m.qos as u8,
        retain: m.retain,
        expires_at_ms: m.expires_at.map(|t| to_unix_ms(t, now)),
    })
}

pub fn queued_entry(
    msg: Arc<StoredMessage>,
    qos: ballast_codec::QoS,
    retain: bool,
    sub_ids: &[u32],
    shared: Option<&Arc<str>>,
) -> StoredQueued {
    StoredQueued {
        qos: qos as u8,
        retain,
        subscription_ids: sub_ids.to_vec(),
        shared: shared.map(|s| s.to_string()),
        msg: Some(msg),
    }
}

/// The record of a session as it stands.
pub fn session_record(client_id: &str, sid: u64, st: &SessionState, now: Instant) -> StoredSession {
    let mut subscriptions: Vec<StoredSubscription> = st
        .subscriptions()
        .map(|(filter, s): (&String, &Subscription)| StoredSubscription {
            filter: filter.clone(),
            qos: s.options.qos as u8,
            no_local: s.options.no_local,
            retain_as_published: s.options.retain_as_published,
            retain_handling: s.options.retain_handling,
            subscription_id: s.subscription_id,
        })
        .collect();
    subscriptions.sort_by(|a, b| a.filter.cmp(&b.filter));
    StoredSession {
        client_id: client_id.to_string(),
        sid,
        expiry_secs: st.expiry_secs,
        disconnected_at_ms: st.disconnected_at.map(|t| to_unix_ms(t, now)),
        subscriptions,
    }
}
