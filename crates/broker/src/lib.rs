//! One Ballast node.
//!
//! The data plane (MQTT over TCP and WebSocket) runs on a few event-loop threads of our own over
//! `mio`, one per core, each owning its connections in a slab (see `server`). A tokio task per
//! connection costs 0.76-1.0 KiB of memory before any MQTT state; a slab entry costs a few
//! bytes, and the memory budget per idle connection is 0.5 KiB all told. This loop is the core
//! the project competes on, so it is ours rather than a framework's.
//!
//! The protocol logic (`core`) is plain code driven with decoded packets and the current time;
//! it writes encoded packets into per-session outboxes and tells the loop what to do. A publish
//! is matched and encoded on the publisher's thread straight into each subscriber's outbox; the
//! subscriber's thread is woken once per batch and writes the whole outbox with one syscall.

pub mod config;
mod core;
pub mod metrics;
mod server;
pub mod topic_index;

pub use config::{BrokerConfig, ConfigError, Durability, Limits, SharedStrategy, StoreConfig};
pub use metrics::{CloseReason, Limit, MetricsSnapshot, StoreSnapshot};
pub use server::{start, start_with_store, BrokerHandle, StartError};
