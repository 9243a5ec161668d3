//! What the protocol core asks the store to write, collected per thread.
//!
//! Handling one packet can touch several sessions (a publish reaches every persistent
//! subscriber). Each change is recorded here as it happens, and the connection submits the
//! whole list to the store writer as one submission when it answers the packet; the answer
//! waits for that submission's ticket (see `Connection::respond`). Loop turns and housekeeping
//! submit whatever is left at their end, so nothing recorded stays behind.

use std::cell::RefCell;
use std::sync::Arc;
use std::time::{Instant, SystemTime};

use ballast_store::{unix_ms, Op, StoredMessage, StoredQueued, StoredSession, StoredSubscription};

use super::message::Message;
use super::session::{SessionState, Subscription};

thread_local! {
    static OPS: RefCell<Vec<Op>> = const { RefCell::new(Vec::new()) };
}

pub fn record(op: Op) {
    OPS.with(|o| o.borrow_mut().push(op));
}

/// Moves everything recorded on this thread into `into`.
pub fn take(into: &mut Vec<Op>) {
    OPS.with(|o| into.append(&mut o.borrow_mut()));
}

pub fn is_empty() -> bool {
    OPS.with(|o| o.borrow().is_empty())
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
    if ms >= wall_now {
        now + std::time::Duration::from_millis(ms - wall_now)
    } else {
        now.checked_sub(std::time::Duration::from_millis(wall_now - ms))
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
        .subscriptions
        .iter()
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
