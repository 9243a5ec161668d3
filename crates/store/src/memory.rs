//! A backend that keeps everything in memory: the contract suite's reference, and a store the
//! broker's restore logic can be tested against without a disk. Nothing survives the process.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;

use crate::{
    LoadedSession, Op, Snapshot, Store, StoreError, StoredMessage, StoredQueued, StoredSession,
};

#[derive(Default)]
struct State {
    sessions: HashMap<String, StoredSession>,
    queue: BTreeMap<(u64, u64), StoredQueued>,
    incoming: BTreeSet<(u64, u16)>,
    retained: HashMap<Arc<str>, StoredMessage>,
}

#[derive(Default)]
pub struct MemoryStore {
    state: Mutex<State>,
    /// When set, `apply` fails (tests of the broker's answer to a failing store).
    failing: AtomicBool,
}

impl MemoryStore {
    /// Makes every later `apply` fail (true) or succeed again (false).
    pub fn set_failing(&self, on: bool) {
        self.failing.store(on, Ordering::SeqCst);
    }
}

impl Store for MemoryStore {
    fn apply(&self, ops: &[Op]) -> Result<(), StoreError> {
        if self.failing.load(Ordering::SeqCst) {
            return Err(StoreError::Io(std::io::Error::other("injected failure")));
        }
        let mut st = self.state.lock();
        for op in ops {
            match op {
                Op::PutSession(s) => {
                    // Session ids only grow: an older session's record never replaces a newer.
                    if st.sessions.get(&s.client_id).is_none_or(|c| c.sid <= s.sid) {
                        st.sessions.insert(s.client_id.clone(), s.clone());
                    }
                }
                Op::RemoveSession { client_id, sid } => {
                    if st.sessions.get(client_id).is_some_and(|s| s.sid == *sid) {
                        st.sessions.remove(client_id);
                    }
                    let sid = *sid;
                    st.queue.retain(|k, _| k.0 != sid);
                    st.incoming.retain(|k| k.0 != sid);
                }
                Op::PutQueued { sid, seq, entry } => {
                    st.queue.insert((*sid, *seq), entry.clone());
                }
                Op::Release { sid, seq } => {
                    st.queue.insert((*sid, *seq), StoredQueued::released());
                }
                Op::RemoveQueued { sid, seq } => {
                    st.queue.remove(&(*sid, *seq));
                }
                Op::PutIncoming { sid, packet_id } => {
                    st.incoming.insert((*sid, *packet_id));
                }
                Op::RemoveIncoming { sid, packet_id } => {
                    st.incoming.remove(&(*sid, *packet_id));
                }
                Op::PutRetained(m) => {
                    st.retained.insert(m.topic.clone(), (**m).clone());
                }
                Op::RemoveRetained { topic } => {
                    st.retained.remove(topic);
                }
            }
        }
        Ok(())
    }

    fn load(&self) -> Result<Snapshot, StoreError> {
        let st = self.state.lock();
        let mut snap = Snapshot::default();
        let mut by_sid = HashMap::new();
        let mut sessions: Vec<&StoredSession> = st.sessions.values().collect();
        sessions.sort_by(|a, b| a.client_id.cmp(&b.client_id));
        for s in sessions {
            snap.max_sid = snap.max_sid.max(s.sid);
            by_sid.insert(s.sid, snap.sessions.len());
            snap.sessions.push(LoadedSession {
                session: s.clone(),
                queue: Vec::new(),
                incoming: Vec::new(),
            });
        }
        for (&(sid, seq), e) in &st.queue {
            match by_sid.get(&sid) {
                Some(&i) => snap.sessions[i].queue.push((seq, e.clone())),
                None => snap.orphan(sid),
            }
        }
        for &(sid, pid) in &st.incoming {
            match by_sid.get(&sid) {
                Some(&i) => snap.sessions[i].incoming.push(pid),
                None => snap.orphan(sid),
            }
        }
        let mut retained: Vec<StoredMessage> = st.retained.values().cloned().collect();
        retained.sort_by(|a, b| a.topic.cmp(&b.topic));
        snap.retained = retained;
        Ok(snap)
    }
}
