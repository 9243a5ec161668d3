//! The contract every store backend meets, written once and run against each of them, plus
//! the group-commit writer and the embedded engine's behaviour across reopen, damage and churn.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use ballast_store::{
    FjallStore, MemoryStore, Op, Outcome, Store, StoredMessage, StoredQueued, StoredSession,
    StoredSubscription, Sync, Writer,
};
use bytes::Bytes;

fn session(client_id: &str, sid: u64) -> StoredSession {
    StoredSession {
        client_id: client_id.into(),
        sid,
        expiry_secs: 3600,
        disconnected_at_ms: Some(1_700_000_000_000),
        subscriptions: vec![StoredSubscription {
            filter: "$share/g/a/+".into(),
            qos: 2,
            no_local: false,
            retain_as_published: true,
            retain_handling: 1,
            subscription_id: Some(42),
        }],
    }
}

fn message(topic: &str, payload: &'static [u8]) -> Arc<StoredMessage> {
    Arc::new(StoredMessage {
        topic: topic.into(),
        payload: Bytes::from_static(payload),
        props: Bytes::from_static(&[0x03, 0x00, 0x01, b'x']),
        qos: 1,
        retain: false,
        expires_at_ms: Some(1_800_000_000_000),
    })
}

fn queued(m: &Arc<StoredMessage>) -> StoredQueued {
    StoredQueued {
        qos: 1,
        retain: true,
        subscription_ids: vec![1, 9],
        shared: Some("$share/g/a/+".into()),
        msg: Some(m.clone()),
    }
}

/// Sessions, queues, packet ids and retained messages round-trip; removals take effect;
/// ending a session takes everything it holds with it.
fn contract(store: &dyn Store) {
    let m1 = message("a/1", b"one");
    let m2 = message("a/2", b"two");
    store
        .apply(&[
            Op::PutSession(session("c1", 1)),
            Op::PutSession(session("c2", 2)),
            Op::PutQueued {
                sid: 1,
                seq: 300,
                entry: queued(&m2),
            },
            Op::PutQueued {
                sid: 1,
                seq: 7,
                entry: queued(&m1),
            },
            Op::PutQueued {
                sid: 2,
                seq: 1,
                entry: queued(&m1),
            },
            Op::PutQueued {
                sid: 2,
                seq: 2,
                entry: queued(&m2),
            },
            Op::PutIncoming {
                sid: 1,
                packet_id: 65535,
            },
            Op::PutIncoming {
                sid: 2,
                packet_id: 5,
            },
            Op::PutRetained(m1.clone()),
            Op::PutRetained(m2.clone()),
        ])
        .unwrap();
    let snap = store.load().unwrap();
    assert_eq!(snap.sessions.len(), 2);
    let c1 = &snap.sessions[0];
    assert_eq!(c1.session, session("c1", 1));
    // Queue entries come back in sequence order, whatever order they were written in.
    assert_eq!(c1.queue, vec![(7, queued(&m1)), (300, queued(&m2))]);
    assert_eq!(c1.incoming, vec![65535]);
    assert_eq!(snap.retained, vec![(*m1).clone(), (*m2).clone()]);
    assert_eq!(snap.orphans, 0);

    // Acknowledged, released, replaced, unretained.
    let mut s1 = session("c1", 1);
    s1.subscriptions.clear();
    s1.disconnected_at_ms = None;
    store
        .apply(&[
            Op::RemoveQueued { sid: 1, seq: 7 },
            Op::Release { sid: 1, seq: 300 },
            Op::RemoveIncoming {
                sid: 1,
                packet_id: 65535,
            },
            Op::PutSession(s1.clone()),
            Op::RemoveRetained {
                topic: "a/1".into(),
            },
            // Removing what is not there is not an error.
            Op::RemoveQueued { sid: 9, seq: 9 },
            Op::RemoveRetained {
                topic: "none".into(),
            },
        ])
        .unwrap();
    let snap = store.load().unwrap();
    let c1 = &snap.sessions[0];
    assert_eq!(c1.session, s1);
    assert_eq!(c1.queue, vec![(300, StoredQueued::released())]);
    assert!(c1.incoming.is_empty());
    assert_eq!(snap.retained, vec![(*m2).clone()]);

    // Ending c2 removes its record, queue and packet ids, and nothing of c1's.
    store
        .apply(&[Op::RemoveSession {
            client_id: "c2".into(),
            sid: 2,
        }])
        .unwrap();
    let snap = store.load().unwrap();
    assert_eq!(snap.sessions.len(), 1);
    assert_eq!(snap.sessions[0].session.client_id, "c1");
    assert_eq!(snap.sessions[0].queue.len(), 1);
    assert_eq!(snap.orphans, 0);

    // A group is applied in order: a session ended and started again in one group survives.
    store
        .apply(&[
            Op::RemoveSession {
                client_id: "c1".into(),
                sid: 1,
            },
            Op::PutSession(session("c1", 3)),
            Op::PutQueued {
                sid: 3,
                seq: 1,
                entry: queued(&m1),
            },
        ])
        .unwrap();
    let snap = store.load().unwrap();
    assert_eq!(snap.sessions.len(), 1);
    assert_eq!(snap.sessions[0].session.sid, 3);
    assert_eq!(snap.sessions[0].queue, vec![(1, queued(&m1))]);

    // An older session's record arriving late does not replace a newer one.
    store.apply(&[Op::PutSession(session("c1", 2))]).unwrap();
    assert_eq!(store.load().unwrap().sessions[0].session.sid, 3);

    // Removing an older session of the same client leaves the newer record alone, whether
    // the newer one was written in an earlier group or earlier in the same group.
    store
        .apply(&[Op::RemoveSession {
            client_id: "c1".into(),
            sid: 1,
        }])
        .unwrap();
    store
        .apply(&[
            Op::PutSession(session("c9", 8)),
            Op::RemoveSession {
                client_id: "c9".into(),
                sid: 7,
            },
        ])
        .unwrap();
    let snap = store.load().unwrap();
    let sids: Vec<u64> = snap.sessions.iter().map(|s| s.session.sid).collect();
    assert_eq!(sids, vec![3, 8]);
    assert_eq!(snap.sessions[0].queue.len(), 1);
    assert_eq!(snap.max_sid, 8);

    // Queue entries without a session are reported, not loaded.
    store
        .apply(&[Op::PutQueued {
            sid: 20,
            seq: 1,
            entry: queued(&m1),
        }])
        .unwrap();
    let snap = store.load().unwrap();
    assert_eq!(
        (snap.orphans, snap.orphan_sids.clone(), snap.max_sid),
        (1, vec![20], 20)
    );
    store
        .apply(&[Op::RemoveSession {
            client_id: String::new(),
            sid: 20,
        }])
        .unwrap();
    assert_eq!(store.load().unwrap().orphans, 0);

    // Ending a session takes what the same group gave it earlier, too.
    store
        .apply(&[
            Op::PutSession(session("c5", 30)),
            Op::PutQueued {
                sid: 30,
                seq: 1,
                entry: queued(&m1),
            },
            Op::PutIncoming {
                sid: 30,
                packet_id: 9,
            },
            Op::Release { sid: 30, seq: 2 },
            Op::RemoveSession {
                client_id: "c5".into(),
                sid: 30,
            },
        ])
        .unwrap();
    let snap = store.load().unwrap();
    assert!(snap.sessions.iter().all(|s| s.session.client_id != "c5"));
    assert_eq!(snap.orphans, 0, "{snap:?}");
}

#[test]
fn memory_store_meets_the_contract() {
    contract(&MemoryStore::default());
}

#[test]
fn fjall_store_meets_the_contract_with_fsync_and_os() {
    for sync in [Sync::Fsync, Sync::Os] {
        let dir = tempfile::tempdir().unwrap();
        contract(&FjallStore::open(dir.path(), sync).unwrap());
    }
}

#[test]
fn fjall_store_keeps_everything_across_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let m = message("t", b"kept");
    {
        let s = FjallStore::open(dir.path(), Sync::Fsync).unwrap();
        s.apply(&[
            Op::PutSession(session("c", 1)),
            Op::PutQueued {
                sid: 1,
                seq: 1,
                entry: queued(&m),
            },
            Op::PutIncoming {
                sid: 1,
                packet_id: 3,
            },
            Op::PutRetained(m.clone()),
        ])
        .unwrap();
    }
    let s = FjallStore::open(dir.path(), Sync::Fsync).unwrap();
    let snap = s.load().unwrap();
    assert_eq!(snap.sessions.len(), 1);
    assert_eq!(snap.sessions[0].queue, vec![(1, queued(&m))]);
    assert_eq!(snap.sessions[0].incoming, vec![3]);
    assert_eq!(snap.retained, vec![(*m).clone()]);
}

#[test]
fn a_damaged_data_directory_is_an_error_not_a_panic() {
    let dir = tempfile::tempdir().unwrap();
    {
        let s = FjallStore::open(dir.path(), Sync::Fsync).unwrap();
        s.apply(&[Op::PutSession(session("c", 1))]).unwrap();
    }
    // Overwrite every file with garbage.
    fn scramble(p: &std::path::Path) {
        for e in std::fs::read_dir(p).unwrap() {
            let e = e.unwrap();
            if e.file_type().unwrap().is_dir() {
                scramble(&e.path());
            } else {
                std::fs::write(e.path(), b"\xff\x00garbage\x13\x37").unwrap();
            }
        }
    }
    scramble(dir.path());
    let r = FjallStore::open(dir.path(), Sync::Fsync).and_then(|s| s.load());
    let e = r.expect_err("damaged store must not open cleanly");
    assert!(!e.to_string().is_empty());
}

#[test]
fn a_record_this_build_cannot_read_is_reported_with_its_key() {
    // A value written by a different format: load names the record instead of misreading it.
    let dir = tempfile::tempdir().unwrap();
    {
        let db = fjall::Database::builder(dir.path()).open().unwrap();
        let ks = db
            .keyspace("sessions", fjall::KeyspaceCreateOptions::default)
            .unwrap();
        ks.insert("client-7", [9u8, 1, 2]).unwrap();
        db.persist(fjall::PersistMode::SyncAll).unwrap();
    }
    let s = FjallStore::open(dir.path(), Sync::Fsync).unwrap();
    let e = s.load().unwrap_err().to_string();
    assert!(e.contains("client-7") && e.contains("version 9"), "{e}");
}

#[test]
fn churn_does_not_grow_the_store_without_bound() {
    // Messages written and acknowledged over and over, as a QoS 1 stream through a persistent
    // session does: the space they took is given back.
    let dir = tempfile::tempdir().unwrap();
    let s = FjallStore::open(dir.path(), Sync::Os).unwrap();
    s.apply(&[Op::PutSession(session("c", 1))]).unwrap();
    // Incompressible, so compression cannot hide what is kept.
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    let noise: Vec<u8> = (0..1000)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect();
    let payload: &'static [u8] = Box::leak(noise.into_boxed_slice());
    let m = message("t", payload);
    let round = |base: u64| {
        let puts: Vec<Op> = (0..1000)
            .map(|i| Op::PutQueued {
                sid: 1,
                seq: base + i,
                entry: queued(&m),
            })
            .collect();
        s.apply(&puts).unwrap();
        let acks: Vec<Op> = (0..1000)
            .map(|i| Op::RemoveQueued {
                sid: 1,
                seq: base + i,
            })
            .collect();
        s.apply(&acks).unwrap();
    };
    // ~1 GB of messages pass through (each 1 KB, 1,000,000 of them) ...
    for r in 0..1000u64 {
        round(r * 1000);
    }
    let used = s.disk_space().unwrap();
    eprintln!("store holds {used} bytes after 1 GB of churn");
    // ... and what stays on disk is bounded by the journal limit, not by the traffic.
    assert!(
        used < 400 * 1024 * 1024,
        "store holds {used} bytes after churn"
    );
    assert_eq!(s.load().unwrap().sessions[0].queue.len(), 0);
}

#[test]
fn the_writer_commits_in_groups_and_resolves_tickets_in_order() {
    let store = Arc::new(MemoryStore::default());
    let last = Arc::new(AtomicU64::new(0));
    let seen = last.clone();
    let w = Writer::start(
        store.clone(),
        Box::new(move |t| seen.store(t, Ordering::SeqCst)),
    );
    let mut tickets = Vec::new();
    for i in 0..100u64 {
        let mut ops = vec![Op::PutSession(session(&format!("c{i}"), i + 1))];
        tickets.push(w.submit(&mut ops));
        assert!(ops.is_empty(), "submit takes the operations");
    }
    assert_eq!(w.submit(&mut Vec::new()), 0, "nothing submitted, no ticket");
    assert!(tickets.windows(2).all(|p| p[0] < p[1]));
    assert_eq!(
        w.wait(*tickets.last().unwrap(), Duration::from_secs(10)),
        Outcome::Durable
    );
    for t in &tickets {
        assert_eq!(w.outcome(*t), Outcome::Durable);
    }
    assert_eq!(last.load(Ordering::SeqCst), *tickets.last().unwrap());
    assert_eq!(store.load().unwrap().sessions.len(), 100);
    let st = w.stats();
    assert_eq!(st.ops.load(Ordering::Relaxed), 100);
    assert!(st.commits.load(Ordering::Relaxed) <= 100);
    assert_eq!(st.backlog_ops.load(Ordering::Relaxed), 0);
    assert_eq!(w.backlog_bytes(), 0);
}

#[test]
fn a_failed_group_fails_it_and_every_later_one_until_a_restart() {
    let store = Arc::new(MemoryStore::default());
    let w = Writer::start(store.clone(), Box::new(|_| {}));
    let ok = w.submit(&mut vec![Op::PutSession(session("a", 1))]);
    assert_eq!(w.wait(ok, Duration::from_secs(10)), Outcome::Durable);
    assert!(!w.failed());
    store.set_failing(true);
    let bad1 = w.submit_one(Op::PutSession(session("b", 2)));
    let bad2 = w.submit_one(Op::PutSession(session("c", 3)));
    assert_eq!(w.wait(bad2, Duration::from_secs(10)), Outcome::Failed);
    assert_eq!(w.outcome(bad1), Outcome::Failed);
    assert_eq!(w.outcome(ok), Outcome::Durable);
    assert!(w.failed());
    // The store works again, but what reached it after the failure is unknown: the writer
    // refuses on, so memory and store cannot drift apart.
    store.set_failing(false);
    let later = w.submit_one(Op::PutSession(session("d", 4)));
    assert_eq!(w.wait(later, Duration::from_secs(10)), Outcome::Failed);
    let names: Vec<String> = store
        .load()
        .unwrap()
        .sessions
        .into_iter()
        .map(|s| s.session.client_id)
        .collect();
    assert_eq!(names, vec!["a"]);
    assert_eq!(w.stats().failed_ops.load(Ordering::Relaxed), 3);
    // A new writer (a restart) writes again.
    drop(w);
    let w = Writer::start(store.clone(), Box::new(|_| {}));
    let t = w.submit_one(Op::PutSession(session("e", 5)));
    assert_eq!(w.wait(t, Duration::from_secs(10)), Outcome::Durable);
    assert_eq!(w.last(), t);
}

#[test]
fn close_commits_what_was_submitted() {
    let dir = tempfile::tempdir().unwrap();
    {
        let store = Arc::new(FjallStore::open(dir.path(), Sync::Fsync).unwrap());
        let w = Writer::start(store, Box::new(|_| {}));
        for i in 0..50u64 {
            w.submit(&mut vec![Op::PutSession(session(&format!("c{i}"), i + 1))]);
        }
        w.close();
    }
    let s = FjallStore::open(dir.path(), Sync::Fsync).unwrap();
    assert_eq!(s.load().unwrap().sessions.len(), 50);
}
