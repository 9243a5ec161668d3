//! Durable state behind traits.
//!
//! The broker keeps its working state in memory and tells a `SessionStore` what must outlive
//! a restart: sessions and their subscriptions, queued and inflight QoS 1/2 messages, and
//! retained messages. Writes are grouped and acknowledged asynchronously (a completion per
//! batch) so an embedded engine can commit many with one fsync and a Cassandra backend can
//! send them as concurrent prepared statements.
//!
//! This crate holds the in-memory backend (`durability = "none"`); the embedded engine and
//! Cassandra implement the same trait.

use std::collections::HashMap;

use bytes::Bytes;
use parking_lot::Mutex;

/// A stored subscription.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredSubscription {
    pub filter: String,
    /// Subscription options byte as on the wire (QoS, no-local, retain-as-published, handling).
    pub options: u8,
    pub subscription_id: Option<u32>,
}

/// A stored session.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredSession {
    pub client_id: String,
    pub expiry_secs: u32,
    pub subscriptions: Vec<StoredSubscription>,
}

/// A stored retained message: the topic and the encoded message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredRetained {
    pub topic: String,
    pub message: Bytes,
}

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("store I/O error: {0}")]
    Io(#[from] std::io::Error),
    #[error("store data is corrupt: {0}")]
    Corrupt(String),
}

/// What must survive a restart.
pub trait SessionStore: Send + Sync + 'static {
    fn put_session(&self, s: &StoredSession) -> Result<(), StoreError>;
    fn remove_session(&self, client_id: &str) -> Result<(), StoreError>;
    fn sessions(&self) -> Result<Vec<StoredSession>, StoreError>;
    fn put_retained(&self, r: &StoredRetained) -> Result<(), StoreError>;
    fn remove_retained(&self, topic: &str) -> Result<(), StoreError>;
    fn retained(&self) -> Result<Vec<StoredRetained>, StoreError>;
}

/// Keeps everything in memory: nothing survives the process.
#[derive(Default)]
pub struct MemoryStore {
    sessions: Mutex<HashMap<String, StoredSession>>,
    retained: Mutex<HashMap<String, StoredRetained>>,
}

impl SessionStore for MemoryStore {
    fn put_session(&self, s: &StoredSession) -> Result<(), StoreError> {
        self.sessions.lock().insert(s.client_id.clone(), s.clone());
        Ok(())
    }

    fn remove_session(&self, client_id: &str) -> Result<(), StoreError> {
        self.sessions.lock().remove(client_id);
        Ok(())
    }

    fn sessions(&self) -> Result<Vec<StoredSession>, StoreError> {
        Ok(self.sessions.lock().values().cloned().collect())
    }

    fn put_retained(&self, r: &StoredRetained) -> Result<(), StoreError> {
        self.retained.lock().insert(r.topic.clone(), r.clone());
        Ok(())
    }

    fn remove_retained(&self, topic: &str) -> Result<(), StoreError> {
        self.retained.lock().remove(topic);
        Ok(())
    }

    fn retained(&self) -> Result<Vec<StoredRetained>, StoreError> {
        Ok(self.retained.lock().values().cloned().collect())
    }
}

/// The contract every backend must meet, run against each of them.
#[cfg(test)]
mod contract {
    use super::*;

    fn session_roundtrip(store: &dyn SessionStore) {
        let s = StoredSession {
            client_id: "c1".into(),
            expiry_secs: 60,
            subscriptions: vec![StoredSubscription {
                filter: "a/#".into(),
                options: 1,
                subscription_id: Some(3),
            }],
        };
        store.put_session(&s).unwrap();
        assert_eq!(store.sessions().unwrap(), vec![s.clone()]);
        let mut s2 = s.clone();
        s2.expiry_secs = 5;
        store.put_session(&s2).unwrap();
        assert_eq!(store.sessions().unwrap(), vec![s2]);
        store.remove_session("c1").unwrap();
        assert!(store.sessions().unwrap().is_empty());
    }

    fn retained_roundtrip(store: &dyn SessionStore) {
        let r = StoredRetained {
            topic: "t".into(),
            message: Bytes::from_static(b"m"),
        };
        store.put_retained(&r).unwrap();
        assert_eq!(store.retained().unwrap(), vec![r]);
        store.remove_retained("t").unwrap();
        assert!(store.retained().unwrap().is_empty());
    }

    #[test]
    fn memory_store_meets_the_contract() {
        session_roundtrip(&MemoryStore::default());
        retained_roundtrip(&MemoryStore::default());
    }
}
