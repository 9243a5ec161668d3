//! Compares embedded engines on the broker's write pattern: QoS 1 messages written into
//! persistent sessions' queues and deleted again once acknowledged, committed in groups with
//! one sync per group. The figures and the choice they led to are in docs/STORAGE.md.
//!
//! `cargo run --release -p ballast-store --example engines -- [seconds per case] [dir]`

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

const SESSIONS: u64 = 100;
const PAYLOAD: usize = 100;

fn key(sid: u64, seq: u64) -> [u8; 16] {
    let mut k = [0u8; 16];
    k[..8].copy_from_slice(&sid.to_be_bytes());
    k[8..].copy_from_slice(&seq.to_be_bytes());
    k
}

/// One queued message as the broker stores it: a small header, the topic and the payload.
fn value(seq: u64) -> Vec<u8> {
    let mut v = Vec::with_capacity(PAYLOAD + 40);
    v.extend_from_slice(&seq.to_le_bytes());
    v.extend_from_slice(b"sensors/building-7/floor-3/temp");
    v.resize(PAYLOAD + 40, 0x5a);
    v
}

trait Engine {
    /// Inserts `new` keys and removes `acked` keys in one group, made durable per the mode.
    fn commit(&mut self, new: &[(u64, u64)], acked: &[(u64, u64)]);
}

#[derive(Clone, Copy, Debug)]
enum Sync {
    Fsync,
    Os,
}

struct Fjall {
    db: fjall::Database,
    ks: fjall::Keyspace,
    sync: Sync,
}

impl Fjall {
    fn open(dir: &Path, sync: Sync) -> Fjall {
        let db = fjall::Database::builder(dir).open().expect("open fjall");
        let ks = db
            .keyspace("queue", fjall::KeyspaceCreateOptions::default)
            .expect("keyspace");
        Fjall { db, ks, sync }
    }
}

impl Engine for Fjall {
    fn commit(&mut self, new: &[(u64, u64)], acked: &[(u64, u64)]) {
        let mut b = self.db.batch();
        for &(s, q) in new {
            b.insert(&self.ks, key(s, q), value(q));
        }
        for &(s, q) in acked {
            b.remove(&self.ks, key(s, q));
        }
        let b = match self.sync {
            Sync::Fsync => b.durability(Some(fjall::PersistMode::SyncData)),
            Sync::Os => b,
        };
        b.commit().expect("commit");
    }
}

struct Redb {
    db: redb::Database,
}

const QUEUE: redb::TableDefinition<&[u8], &[u8]> = redb::TableDefinition::new("queue");

impl Engine for Redb {
    fn commit(&mut self, new: &[(u64, u64)], acked: &[(u64, u64)]) {
        let tx = self.db.begin_write().expect("begin");
        {
            let mut t = tx.open_table(QUEUE).expect("table");
            for &(s, q) in new {
                t.insert(&key(s, q)[..], &value(q)[..]).expect("insert");
            }
            for &(s, q) in acked {
                t.remove(&key(s, q)[..]).expect("remove");
            }
        }
        tx.commit().expect("commit");
    }
}

/// Runs groups of `group` messages for `secs`; each group also deletes the previous group's
/// messages (acknowledged by then). Returns messages per second.
fn run(engine: &mut dyn Engine, group: usize, secs: f64) -> (f64, f64) {
    let mut seq = 0u64;
    let mut prev: Vec<(u64, u64)> = Vec::new();
    let mut msgs = 0u64;
    let mut groups = 0u64;
    let start = Instant::now();
    while start.elapsed() < Duration::from_secs_f64(secs) {
        let new: Vec<(u64, u64)> = (0..group)
            .map(|_| {
                seq += 1;
                (seq % SESSIONS, seq)
            })
            .collect();
        engine.commit(&new, &prev);
        prev = new;
        msgs += group as u64;
        groups += 1;
    }
    let t = start.elapsed().as_secs_f64();
    (msgs as f64 / t, groups as f64 / t)
}

fn fresh(base: &Path, name: &str) -> PathBuf {
    let d = base.join(name);
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).expect("create dir");
    d
}

fn main() {
    let mut args = std::env::args().skip(1);
    let secs: f64 = args.next().and_then(|s| s.parse().ok()).unwrap_or(3.0);
    let base = PathBuf::from(args.next().unwrap_or_else(|| "target/engine-bench".into()));
    println!("| engine | sync | group | msg/s | commits/s |");
    println!("|---|---|---|---|---|");
    for group in [1usize, 16, 64, 256, 1024] {
        for (name, sync) in [
            ("fjall", Sync::Fsync),
            ("fjall", Sync::Os),
            ("redb", Sync::Fsync),
        ] {
            let dir = fresh(&base, &format!("{name}-{sync:?}-{group}"));
            let (rate, commits) = match name {
                "fjall" => run(&mut Fjall::open(&dir, sync), group, secs),
                _ => {
                    let db = redb::Database::create(dir.join("db.redb")).expect("open redb");
                    run(&mut Redb { db }, group, secs)
                }
            };
            println!("| {name} | {sync:?} | {group} | {rate:.0} | {commits:.0} |");
            let _ = std::fs::remove_dir_all(&dir);
        }
    }
}
