//! Group commit: many submitters, one writer thread, one sync per group.
//!
//! A submitter appends an operation under a short lock and gets a ticket (the number of its
//! submission). The broker submits each change while it holds the lock of the state the change
//! describes (a session, the retained map), so the store sees changes to one thing in the order
//! they happened. The writer thread takes everything submitted so far, applies it as one group,
//! then publishes the highest ticket it covered and calls the commit hook, which the broker uses
//! to wake the loop threads holding acknowledgements back. Tickets resolve in order, so
//! "ticket <= durable" is the whole completion protocol.
//!
//! A failed group fails every later one too, until the process restarts: after an I/O error
//! the store cannot know what reached the disk (fjall poisons itself for the same reason), and
//! writing on would let the stored state drift from the one in memory.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};

use crate::{Op, Store};

/// How a submission ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    Pending,
    Durable,
    Failed,
}

/// Counters of the writer, read by the metrics endpoint.
#[derive(Debug, Default)]
pub struct WriterStats {
    pub commits: AtomicU64,
    pub ops: AtomicU64,
    pub failed_commits: AtomicU64,
    pub failed_ops: AtomicU64,
    /// Operations dropped before writing because they cancel out within their group (a
    /// message queued and acknowledged before the group was committed).
    pub elided_ops: AtomicU64,
    /// Sum of commit durations in microseconds.
    pub commit_micros: AtomicU64,
    /// Operations submitted and not yet committed.
    pub backlog_ops: AtomicU64,
    pub backlog_bytes: AtomicU64,
}

type Hook = Box<dyn Fn(u64) + Send + Sync>;

struct Pending {
    ops: Vec<Op>,
    bytes: usize,
    /// Ticket of the latest submission.
    last: u64,
    closed: bool,
    /// The writer thread is waiting for work.
    idle: bool,
}

struct Shared {
    store: Arc<dyn Store>,
    pending: Mutex<Pending>,
    wake: Condvar,
    /// Every ticket up to this one is resolved (durable, or failed).
    durable: AtomicU64,
    /// Ticket of the latest submission (mirrors `Pending::last` for lock-free reads).
    submitted: AtomicU64,
    /// The first ticket of the first failed group; u64::MAX while none failed.
    failed_from: AtomicU64,
    /// Under load, how long after a group the next one starts (microseconds).
    commit_delay_us: AtomicU64,
    stats: WriterStats,
    on_commit: Hook,
}

pub struct Writer {
    shared: Arc<Shared>,
    thread: Mutex<Option<JoinHandle<()>>>,
}

impl Writer {
    /// Starts the writer thread. `on_commit(ticket)` runs on it after each group resolves.
    pub fn start(store: Arc<dyn Store>, on_commit: Hook) -> Writer {
        let shared = Arc::new(Shared {
            store,
            pending: Mutex::new(Pending {
                ops: Vec::new(),
                bytes: 0,
                last: 0,
                closed: false,
                idle: false,
            }),
            wake: Condvar::new(),
            durable: AtomicU64::new(0),
            submitted: AtomicU64::new(0),
            failed_from: AtomicU64::new(u64::MAX),
            commit_delay_us: AtomicU64::new(0),
            stats: WriterStats::default(),
            on_commit,
        });
        let s = shared.clone();
        let thread = std::thread::Builder::new()
            .name("ballast-store".into())
            .spawn(move || run(&s))
            .expect("spawn store writer");
        Writer {
            shared,
            thread: Mutex::new(Some(thread)),
        }
    }

    /// Queues one operation; returns its ticket. The writer is not woken: the caller calls
    /// `kick` once it has submitted what it has (a loop thread, once per turn), so a burst of
    /// submissions costs one wake-up and forms one group. An idle writer also looks for work
    /// every few milliseconds on its own.
    pub fn submit_one(&self, op: Op) -> u64 {
        let bytes = op.cost();
        let mut p = self.shared.pending.lock();
        p.ops.push(op);
        self.account(&mut p, 1, bytes, false)
    }

    /// Group commit delay: when a group starts within `d` of the end of the previous one (the
    /// writer is busy), it waits until `d` has passed, so more submissions join it. Fewer, larger
    /// groups cost less per message; an idle writer starts at once, so a lone publish does not
    /// wait. (PostgreSQL's `commit_delay` and MySQL's `binlog_group_commit_sync_delay` do the
    /// same.)
    pub fn set_commit_delay(&self, d: Duration) {
        let us = d.as_micros().min(u64::MAX as u128) as u64;
        self.shared.commit_delay_us.store(us, Ordering::Relaxed);
    }

    /// Wakes the writer if it is waiting and there is something to write.
    pub fn kick(&self) {
        let p = self.shared.pending.lock();
        if p.idle && !p.ops.is_empty() {
            self.shared.wake.notify_one();
        }
    }

    /// Queues operations (taken out of `ops`) as one submission; returns its ticket, or 0
    /// when there was nothing to submit.
    pub fn submit(&self, ops: &mut Vec<Op>) -> u64 {
        if ops.is_empty() {
            return 0;
        }
        let bytes: usize = ops.iter().map(Op::cost).sum();
        let n = ops.len() as u64;
        let mut p = self.shared.pending.lock();
        let was_empty = p.ops.is_empty();
        p.ops.append(ops);
        self.account(&mut p, n, bytes, was_empty)
    }

    /// Counts a submission under the pending lock (so the writer never subtracts first) and
    /// wakes the writer if it was idle.
    fn account(&self, p: &mut Pending, n: u64, bytes: usize, was_empty: bool) -> u64 {
        let st = &self.shared.stats;
        p.bytes += bytes;
        p.last += 1;
        st.backlog_ops.fetch_add(n, Ordering::Relaxed);
        st.backlog_bytes.fetch_add(bytes as u64, Ordering::Relaxed);
        self.shared.submitted.store(p.last, Ordering::SeqCst);
        if was_empty {
            self.shared.wake.notify_one();
        }
        p.last
    }

    /// The highest ticket resolved so far.
    pub fn durable(&self) -> u64 {
        self.shared.durable.load(Ordering::SeqCst)
    }

    /// The ticket of the latest submission from any thread: waiting for it covers everything
    /// submitted so far.
    pub fn last(&self) -> u64 {
        self.shared.submitted.load(Ordering::SeqCst)
    }

    pub fn outcome(&self, ticket: u64) -> Outcome {
        if ticket > self.durable() {
            Outcome::Pending
        } else if ticket >= self.shared.failed_from.load(Ordering::SeqCst) {
            Outcome::Failed
        } else {
            Outcome::Durable
        }
    }

    /// A group failed: nothing more is written until a restart.
    pub fn failed(&self) -> bool {
        self.shared.failed_from.load(Ordering::SeqCst) != u64::MAX
    }

    /// Bytes submitted and not yet committed.
    pub fn backlog_bytes(&self) -> u64 {
        self.shared.stats.backlog_bytes.load(Ordering::Relaxed)
    }

    pub fn stats(&self) -> &WriterStats {
        &self.shared.stats
    }

    /// Commits what is queued and stops the thread. Later submissions are dropped.
    pub fn close(&self) {
        self.shared.pending.lock().closed = true;
        self.shared.wake.notify_one();
        if let Some(t) = self.thread.lock().take() {
            let _ = t.join();
        }
    }

    /// Waits until `ticket` is resolved (for code outside the loop threads: start-up, tests).
    pub fn wait(&self, ticket: u64, timeout: Duration) -> Outcome {
        let deadline = Instant::now() + timeout;
        while self.outcome(ticket) == Outcome::Pending && Instant::now() < deadline {
            std::thread::sleep(Duration::from_micros(200));
        }
        self.outcome(ticket)
    }
}

impl Drop for Writer {
    fn drop(&mut self) {
        self.close();
    }
}

/// How often an idle writer looks for submissions nobody kicked it for.
const IDLE_LOOK: Duration = Duration::from_millis(5);

fn run(s: &Shared) {
    let mut last_end: Option<Instant> = None;
    loop {
        let delay = Duration::from_micros(s.commit_delay_us.load(Ordering::Relaxed));
        if let Some(end) = last_end {
            let since = end.elapsed();
            if since < delay {
                std::thread::sleep(delay - since);
            }
        }
        let (ops, bytes, upto) = {
            let mut p = s.pending.lock();
            while p.ops.is_empty() && !p.closed {
                p.idle = true;
                s.wake.wait_for(&mut p, IDLE_LOOK);
                p.idle = false;
            }
            if p.ops.is_empty() {
                return;
            }
            let bytes = std::mem::take(&mut p.bytes);
            (std::mem::take(&mut p.ops), bytes, p.last)
        };
        let started = Instant::now();
        let n = ops.len() as u64;
        let st = &s.stats;
        let first = s.durable.load(Ordering::SeqCst) + 1;
        let result = if s.failed_from.load(Ordering::SeqCst) != u64::MAX {
            Err(None)
        } else {
            let (ops, elided) = elide(ops);
            st.elided_ops.fetch_add(elided as u64, Ordering::Relaxed);
            s.store
                .apply(&ops)
                .map(|()| n - elided as u64)
                .map_err(Some)
        };
        st.commits.fetch_add(1, Ordering::Relaxed);
        st.commit_micros
            .fetch_add(started.elapsed().as_micros() as u64, Ordering::Relaxed);
        st.backlog_ops.fetch_sub(n, Ordering::Relaxed);
        st.backlog_bytes.fetch_sub(bytes as u64, Ordering::Relaxed);
        match result {
            Ok(written) => {
                st.ops.fetch_add(written, Ordering::Relaxed);
            }
            Err(e) => {
                st.failed_commits.fetch_add(1, Ordering::Relaxed);
                st.failed_ops.fetch_add(n, Ordering::Relaxed);
                if let Some(e) = e {
                    s.failed_from.store(first, Ordering::SeqCst);
                    tracing::error!(
                        error = %e,
                        ops = n,
                        "store write failed; durable publishes are refused until a restart"
                    );
                }
            }
        }
        s.durable.store(upto, Ordering::SeqCst);
        (s.on_commit)(upto);
        last_end = Some(Instant::now());
    }
}

/// Drops the operations of a group that cancel out: a message queued, perhaps released, and
/// acknowledged within the group never needs to reach the disk. With subscribers online this
/// is most messages under load, since they acknowledge faster than a sync completes. Returns
/// the operations left, in order, and how many were dropped.
fn elide(ops: Vec<Op>) -> (Vec<Op>, usize) {
    if !ops.iter().any(|o| matches!(o, Op::RemoveQueued { .. })) {
        return (ops, 0);
    }
    // (sid, seq) -> indexes of the put and of any release after it, for keys whose first
    // operation in the group is the put (otherwise the group must write what it says).
    let mut open: HashMap<(u64, u64), Vec<usize>> = HashMap::new();
    let mut touched: HashSet<(u64, u64)> = HashSet::new();
    let mut dead = vec![false; ops.len()];
    for (i, op) in ops.iter().enumerate() {
        match op {
            Op::PutQueued { sid, seq, .. } if touched.insert((*sid, *seq)) => {
                open.insert((*sid, *seq), vec![i]);
            }
            Op::Release { sid, seq } => {
                touched.insert((*sid, *seq));
                if let Some(v) = open.get_mut(&(*sid, *seq)) {
                    v.push(i);
                }
            }
            Op::RemoveQueued { sid, seq } => {
                touched.insert((*sid, *seq));
                if let Some(v) = open.remove(&(*sid, *seq)) {
                    for j in v {
                        dead[j] = true;
                    }
                    dead[i] = true;
                }
            }
            // A removed session takes its entries with it; its keys are not elided after it.
            Op::RemoveSession { sid, .. } => {
                open.retain(|k, _| k.0 != *sid);
                touched.retain(|k| k.0 != *sid);
            }
            _ => {}
        }
    }
    let n = dead.iter().filter(|d| **d).count();
    if n == 0 {
        return (ops, 0);
    }
    let kept = ops
        .into_iter()
        .zip(dead)
        .filter_map(|(op, d)| (!d).then_some(op))
        .collect();
    (kept, n)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{StoredQueued, StoredSession};

    fn put(sid: u64, seq: u64) -> Op {
        Op::PutQueued {
            sid,
            seq,
            entry: StoredQueued::released(),
        }
    }

    fn keys(ops: &[Op]) -> Vec<String> {
        ops.iter()
            .map(|o| match o {
                Op::PutQueued { sid, seq, .. } => format!("put {sid}/{seq}"),
                Op::Release { sid, seq } => format!("rel {sid}/{seq}"),
                Op::RemoveQueued { sid, seq } => format!("rm {sid}/{seq}"),
                Op::PutSession(s) => format!("session {}", s.sid),
                Op::RemoveSession { sid, .. } => format!("end {sid}"),
                _ => "other".into(),
            })
            .collect()
    }

    #[test]
    fn a_message_queued_and_acknowledged_in_one_group_is_not_written() {
        let session = StoredSession {
            client_id: "c".into(),
            sid: 1,
            expiry_secs: 9,
            disconnected_at_ms: None,
            subscriptions: vec![],
        };
        let ops = vec![
            Op::PutSession(session),
            put(1, 1),
            put(1, 2),
            put(2, 1),
            Op::Release { sid: 1, seq: 2 },
            Op::RemoveQueued { sid: 1, seq: 2 },
            Op::RemoveQueued { sid: 1, seq: 1 },
            // Acknowledged, but queued in an earlier group: the removal must be written.
            Op::RemoveQueued { sid: 3, seq: 7 },
            // Released but not acknowledged: both stay.
            put(2, 2),
            Op::Release { sid: 2, seq: 2 },
        ];
        let (kept, n) = elide(ops);
        assert_eq!(n, 5);
        assert_eq!(
            keys(&kept),
            vec!["session 1", "put 2/1", "rm 3/7", "put 2/2", "rel 2/2"]
        );
    }

    #[test]
    fn a_key_whose_group_starts_with_a_release_is_written_as_it_stands() {
        let ops = vec![
            Op::Release { sid: 1, seq: 1 },
            put(1, 1),
            Op::RemoveQueued { sid: 1, seq: 1 },
        ];
        let (kept, n) = elide(ops);
        assert_eq!(n, 0);
        assert_eq!(kept.len(), 3);
    }

    #[test]
    fn an_ended_session_is_not_confused_with_its_earlier_puts() {
        let ops = vec![
            put(1, 1),
            Op::RemoveSession {
                client_id: "c".into(),
                sid: 1,
            },
            Op::RemoveQueued { sid: 1, seq: 1 },
        ];
        let (kept, n) = elide(ops);
        assert_eq!(n, 0);
        assert_eq!(kept.len(), 3);
    }
}
