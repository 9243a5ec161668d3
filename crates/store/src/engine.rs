//! The embedded backend: fjall, a log-structured engine (journal + LSM trees).
//!
//! Why fjall (measured in docs/STORAGE.md): the broker's write pattern is "append a message,
//! delete it moments later", which an LSM absorbs as sequential journal appends; a group
//! commit is one journal write and one sync; and its journal can be flushed to the OS without
//! a sync, which gives the `os` durability mode (survives a process crash) at several times the
//! rate of a synced commit. redb, the B-tree alternative we measured, is as fast with large
//! synced groups but has no crash-safe commit without a sync.
//!
//! Layout: four keyspaces. `sessions` (client id -> session record), `queue` (sid, seq ->
//! message), `incoming` (sid, packet id -> empty), `retained` (topic -> message).

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use parking_lot::Mutex;

use crate::record::{self, incoming_key, queue_key};
use crate::{
    LoadedSession, Op, Snapshot, Store, StoreError, StoredMessage, StoredQueued, StoredSession,
};

/// How far a commit goes before it counts as durable.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sync {
    /// The journal is synced to the device (`fdatasync`): survives power loss.
    Fsync,
    /// The journal is written to the operating system: survives a crash of the process, not of
    /// the machine.
    Os,
}

pub struct FjallStore {
    db: fjall::Database,
    sessions: fjall::Keyspace,
    queue: fjall::Keyspace,
    incoming: fjall::Keyspace,
    retained: fjall::Keyspace,
    sync: Sync,
    path: PathBuf,
    /// Serialises `apply` (the writer is the only caller; this keeps the trait honest).
    apply_lock: Mutex<()>,
}

fn engine(path: &Path, e: fjall::Error) -> StoreError {
    match e {
        fjall::Error::Io(io) => StoreError::Io(io),
        other => StoreError::Engine(format!("{}: {other}", path.display())),
    }
}

impl FjallStore {
    /// Opens (or creates) the store in `dir`. A directory another process has open, or one
    /// whose files are damaged, is an error naming the directory.
    pub fn open(dir: &Path, sync: Sync) -> Result<FjallStore, StoreError> {
        std::fs::create_dir_all(dir).map_err(|e| {
            StoreError::Io(std::io::Error::new(
                e.kind(),
                format!("cannot create data directory {}: {e}", dir.display()),
            ))
        })?;
        let db = fjall::Database::builder(dir)
            .worker_threads(1)
            .cache_size(16 * 1024 * 1024)
            .max_journaling_size(128 * 1024 * 1024)
            .open()
            .map_err(|e| engine(dir, e))?;
        let ks = |name: &str| {
            db.keyspace(name, fjall::KeyspaceCreateOptions::default)
                .map_err(|e| engine(dir, e))
        };
        Ok(FjallStore {
            sessions: ks("sessions")?,
            queue: ks("queue")?,
            incoming: ks("incoming")?,
            retained: ks("retained")?,
            db,
            sync,
            path: dir.to_path_buf(),
            apply_lock: Mutex::new(()),
        })
    }

    /// Bytes on disk (journals and tables).
    pub fn disk_space(&self) -> Result<u64, StoreError> {
        self.db.disk_space().map_err(|e| engine(&self.path, e))
    }

    /// The sid of the stored record of `client_id`, if there is one.
    fn session_sid(&self, client_id: &str) -> Result<Option<u64>, StoreError> {
        let Some(v) = self
            .sessions
            .get(client_id.as_bytes())
            .map_err(|e| engine(&self.path, e))?
        else {
            return Ok(None);
        };
        let s: StoredSession = record::decode("session", client_id.as_bytes(), &v)?;
        Ok(Some(s.sid))
    }

    fn remove_prefix(
        &self,
        batch: &mut fjall::OwnedWriteBatch,
        ks: &fjall::Keyspace,
        prefix: &[u8],
    ) -> Result<(), StoreError> {
        for kv in ks.prefix(prefix) {
            let key = kv.key().map_err(|e| engine(&self.path, e))?;
            batch.remove(ks, key);
        }
        Ok(())
    }
}

impl Store for FjallStore {
    fn apply(&self, ops: &[Op]) -> Result<(), StoreError> {
        let _one = self.apply_lock.lock();
        let mut b = self.db.batch();
        // What this group wrote so far, which the keyspaces cannot show before the commit:
        // the owner of each session record (None: removed), and queue and packet-id keys by
        // session.
        let mut owner: HashMap<&str, Option<u64>> = HashMap::new();
        let mut queued: HashMap<u64, Vec<[u8; 16]>> = HashMap::new();
        let mut incoming: HashMap<u64, Vec<[u8; 10]>> = HashMap::new();
        for op in ops {
            match op {
                Op::PutSession(s) => {
                    let current = match owner.get(s.client_id.as_str()) {
                        Some(&o) => o,
                        None => self.session_sid(&s.client_id)?,
                    };
                    // Session ids only grow: a record of an older session arriving late (from
                    // another thread) must not replace a newer one.
                    if current.is_none_or(|c| c <= s.sid) {
                        owner.insert(&s.client_id, Some(s.sid));
                        b.insert(&self.sessions, s.client_id.as_bytes(), record::encode(s))
                    }
                }
                Op::RemoveSession { client_id, sid } => {
                    let current = match owner.get(client_id.as_str()) {
                        Some(&o) => o,
                        None => self.session_sid(client_id)?,
                    };
                    if current == Some(*sid) {
                        owner.insert(client_id, None);
                        b.remove(&self.sessions, client_id.as_bytes());
                    }
                    let prefix = sid.to_be_bytes();
                    self.remove_prefix(&mut b, &self.queue, &prefix)?;
                    self.remove_prefix(&mut b, &self.incoming, &prefix)?;
                    for k in queued.remove(sid).unwrap_or_default() {
                        b.remove(&self.queue, k);
                    }
                    for k in incoming.remove(sid).unwrap_or_default() {
                        b.remove(&self.incoming, k);
                    }
                }
                Op::PutQueued { sid, seq, entry } => {
                    let k = queue_key(*sid, *seq);
                    queued.entry(*sid).or_default().push(k);
                    b.insert(&self.queue, k, record::encode(entry))
                }
                Op::Release { sid, seq } => {
                    let k = queue_key(*sid, *seq);
                    queued.entry(*sid).or_default().push(k);
                    b.insert(&self.queue, k, record::encode(&StoredQueued::released()))
                }
                Op::RemoveQueued { sid, seq } => b.remove(&self.queue, queue_key(*sid, *seq)),
                Op::PutIncoming { sid, packet_id } => {
                    let k = incoming_key(*sid, *packet_id);
                    incoming.entry(*sid).or_default().push(k);
                    b.insert(&self.incoming, k, [])
                }
                Op::RemoveIncoming { sid, packet_id } => {
                    b.remove(&self.incoming, incoming_key(*sid, *packet_id))
                }
                Op::PutRetained(m) => {
                    b.insert(&self.retained, m.topic.as_bytes(), record::encode(&**m))
                }
                Op::RemoveRetained { topic } => b.remove(&self.retained, topic.as_bytes()),
            }
        }
        let b = match self.sync {
            Sync::Fsync => b.durability(Some(fjall::PersistMode::SyncData)),
            // A commit writes the journal to the OS; that is what survives a process crash.
            Sync::Os => b,
        };
        b.commit().map_err(|e| engine(&self.path, e))
    }

    fn load(&self) -> Result<Snapshot, StoreError> {
        let e = |err| engine(&self.path, err);
        let mut snap = Snapshot::default();
        let mut by_sid = HashMap::new();
        for kv in self.sessions.iter() {
            let (k, v) = kv.into_inner().map_err(e)?;
            let s: StoredSession = record::decode("session", &k, &v)?;
            snap.max_sid = snap.max_sid.max(s.sid);
            by_sid.insert(s.sid, snap.sessions.len());
            snap.sessions.push(LoadedSession {
                session: s,
                queue: Vec::new(),
                incoming: Vec::new(),
            });
        }
        for kv in self.queue.iter() {
            let (k, v) = kv.into_inner().map_err(e)?;
            let (sid, seq) = record::parse_queue_key(&k)?;
            let entry: StoredQueued = record::decode("queue", &k, &v)?;
            match by_sid.get(&sid) {
                Some(&i) => snap.sessions[i].queue.push((seq, entry)),
                None => snap.orphan(sid),
            }
        }
        for kv in self.incoming.iter() {
            let (k, _) = kv.into_inner().map_err(e)?;
            let (sid, pid) = record::parse_incoming_key(&k)?;
            match by_sid.get(&sid) {
                Some(&i) => snap.sessions[i].incoming.push(pid),
                None => snap.orphan(sid),
            }
        }
        for kv in self.retained.iter() {
            let (k, v) = kv.into_inner().map_err(e)?;
            let m: StoredMessage = record::decode("retained", &k, &v)?;
            snap.retained.push(m);
        }
        Ok(snap)
    }
}
