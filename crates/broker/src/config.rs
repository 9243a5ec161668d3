//! Configuration of one broker node: listeners and limits.
//!
//! Every limit a client can push against is here, with a default a production node can run
//! with, and `validate()` rejects values that cannot work, naming the key.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct BrokerConfig {
    /// MQTT over TCP. `None` disables the listener.
    pub mqtt: Option<SocketAddr>,
    /// MQTT over WebSocket. `None` disables the listener.
    pub ws: Option<SocketAddr>,
    /// HTTP path the WebSocket listener accepts upgrades on.
    pub ws_path: String,
    /// Event-loop threads for the data plane; 0 means one per core.
    pub workers: usize,
    pub limits: Limits,
    /// Strategy for choosing the member of a shared subscription group.
    pub shared_subscription_strategy: SharedStrategy,
    /// How often `$SYS/broker/...` topics are published, in seconds; 0 disables them.
    pub sys_interval_secs: u64,
    /// What survives a restart, and how durably.
    pub store: StoreConfig,
}

/// How far a QoS 1/2 message for a persistent session, a persistent session's subscriptions
/// and a retained message must be written before the client is told they are taken.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum Durability {
    /// Synced to the disk (group commit: one sync for many messages). Survives power loss.
    Fsync,
    /// Written to the operating system. Survives a crash of the broker, not of the machine.
    Os,
    /// Kept in memory only: nothing survives a restart. For benchmarks and tests.
    None,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct StoreConfig {
    pub durability: Durability,
    /// Where the embedded store keeps its files (created if missing; one broker at a time).
    /// Not read from the file: `ballast serve` sets it from its top-level `data_dir`.
    #[serde(skip)]
    pub data_dir: PathBuf,
    /// Bytes of writes waiting for the store before publishers that need it are paused (their
    /// sockets are not read until the store catches up).
    pub max_backlog_bytes: usize,
    /// Group commit delay in microseconds: while the store is busy, a group starts this long
    /// after the previous one ended, so more messages share it. 0 disables it.
    pub commit_delay_us: u64,
}

impl Default for StoreConfig {
    fn default() -> Self {
        StoreConfig {
            durability: Durability::Fsync,
            data_dir: PathBuf::from("data"),
            max_backlog_bytes: 64 * 1024 * 1024,
            commit_delay_us: 200,
        }
    }
}

impl Default for BrokerConfig {
    fn default() -> Self {
        BrokerConfig {
            mqtt: Some(SocketAddr::from(([0, 0, 0, 0], 1883))),
            ws: Some(SocketAddr::from(([0, 0, 0, 0], 8083))),
            ws_path: "/mqtt".to_string(),
            workers: 0,
            limits: Limits::default(),
            shared_subscription_strategy: SharedStrategy::RoundRobin,
            sys_interval_secs: 10,
            store: StoreConfig::default(),
        }
    }
}

#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum SharedStrategy {
    /// Members take turns; members without a live connection are skipped while any has one.
    RoundRobin,
    /// A uniformly random member with a live connection.
    Random,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct Limits {
    /// Connections held at once; further ones get CONNACK "server busy" and are closed.
    pub max_connections: usize,
    /// Time a new connection has to send its CONNECT (slowloris guard), in milliseconds.
    pub connect_timeout_ms: u64,
    /// Largest packet accepted from a client, in bytes (checked from the fixed header).
    pub max_packet_size: u32,
    /// Outgoing QoS 1/2 messages in flight per client (capped by the client's Receive Maximum).
    /// One subscriber's throughput is at most this many messages per acknowledgement round
    /// trip; 100 lets a wildcard consumer take ~400k msg/s on one core (docs/BENCHMARKS.md).
    pub max_inflight: u16,
    /// Incoming QoS 2 messages a client may have unreleased at once (our Receive Maximum).
    pub receive_maximum: u16,
    /// QoS 1/2 messages queued per session beyond the inflight window. Publishers arrive in
    /// bursts: a consumer that keeps up on average must not lose messages to one, so this is
    /// generous and `max_queued_bytes` is the memory bound.
    pub max_queued_messages: usize,
    /// Bytes of payload queued per session beyond the inflight window.
    pub max_queued_bytes: usize,
    /// Bytes waiting to be written to one connection before QoS 0 messages are dropped for it.
    pub max_outbox_bytes: usize,
    /// A connection that cannot drain its outbox for this long is closed as a slow consumer.
    pub write_timeout_ms: u64,
    /// Longest topic name or filter, in bytes.
    pub max_topic_length: usize,
    /// Most levels in a topic name or filter.
    pub max_topic_levels: usize,
    /// Subscriptions one session may hold.
    pub max_subscriptions_per_client: usize,
    /// Longest client identifier accepted, in bytes.
    pub max_client_id_length: usize,
    /// Largest keepalive granted, in seconds; a 5.0 client asking more (or 0) is told this one.
    pub max_keepalive_secs: u16,
    /// Longest session expiry granted, in seconds.
    pub max_session_expiry_secs: u32,
    /// Topic aliases a 5.0 client may use toward us.
    pub topic_alias_maximum: u16,
    /// Retained messages held at once; past it new retained topics are not stored.
    pub max_retained_messages: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_connections: 100_000,
            connect_timeout_ms: 10_000,
            max_packet_size: 1024 * 1024,
            max_inflight: 100,
            receive_maximum: 128,
            max_queued_messages: 10_000,
            max_queued_bytes: 16 * 1024 * 1024,
            max_outbox_bytes: 4 * 1024 * 1024,
            write_timeout_ms: 30_000,
            max_topic_length: 1024,
            max_topic_levels: 32,
            max_subscriptions_per_client: 1000,
            max_client_id_length: 256,
            max_keepalive_secs: 3600,
            max_session_expiry_secs: 7 * 24 * 3600,
            topic_alias_maximum: 64,
            max_retained_messages: 1_000_000,
        }
    }
}

/// A configuration value that cannot work, naming its key.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid value for `{key}`: {reason}")]
pub struct ConfigError {
    pub key: String,
    pub reason: String,
}

fn bad(key: &str, reason: impl Into<String>) -> ConfigError {
    ConfigError {
        key: key.to_string(),
        reason: reason.into(),
    }
}

impl BrokerConfig {
    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.mqtt.is_none() && self.ws.is_none() {
            return Err(bad("mqtt", "at least one of `mqtt` and `ws` must be set"));
        }
        if !self.ws_path.starts_with('/') {
            return Err(bad("ws_path", "must start with '/'"));
        }
        if self.workers > 256 {
            return Err(bad("workers", "at most 256"));
        }
        if self.store.durability != Durability::None && self.store.data_dir.as_os_str().is_empty() {
            return Err(bad("store.data_dir", "must not be empty"));
        }
        if self.store.max_backlog_bytes < 1024 * 1024 {
            return Err(bad("store.max_backlog_bytes", "must be at least 1048576"));
        }
        if self.store.commit_delay_us > 100_000 {
            return Err(bad("store.commit_delay_us", "at most 100000 (0.1 s)"));
        }
        self.limits.validate()
    }

    pub fn worker_count(&self) -> usize {
        if self.workers == 0 {
            std::thread::available_parallelism()
                .map(|n| n.get())
                .unwrap_or(1)
        } else {
            self.workers
        }
    }
}

impl Limits {
    pub fn validate(&self) -> Result<(), ConfigError> {
        let l = self;
        if l.max_connections == 0 {
            return Err(bad("limits.max_connections", "must be at least 1"));
        }
        if l.connect_timeout_ms == 0 {
            return Err(bad("limits.connect_timeout_ms", "must be at least 1"));
        }
        if !(64..=ballast_codec::MAX_REMAINING_LENGTH as u32 + 5).contains(&l.max_packet_size) {
            return Err(bad(
                "limits.max_packet_size",
                "must be between 64 and 268435460",
            ));
        }
        if l.max_inflight == 0 {
            return Err(bad("limits.max_inflight", "must be at least 1"));
        }
        if l.receive_maximum == 0 {
            return Err(bad("limits.receive_maximum", "must be at least 1"));
        }
        if l.max_outbox_bytes < l.max_packet_size as usize {
            return Err(bad(
                "limits.max_outbox_bytes",
                "must be at least limits.max_packet_size",
            ));
        }
        if l.write_timeout_ms == 0 {
            return Err(bad("limits.write_timeout_ms", "must be at least 1"));
        }
        if !(1..=65535).contains(&l.max_topic_length) {
            return Err(bad(
                "limits.max_topic_length",
                "must be between 1 and 65535",
            ));
        }
        if l.max_topic_levels == 0 {
            return Err(bad("limits.max_topic_levels", "must be at least 1"));
        }
        if !(23..=65535).contains(&l.max_client_id_length) {
            return Err(bad(
                "limits.max_client_id_length",
                "must be between 23 and 65535",
            ));
        }
        Ok(())
    }

    pub fn connect_timeout(&self) -> Duration {
        Duration::from_millis(self.connect_timeout_ms)
    }

    pub fn write_timeout(&self) -> Duration {
        Duration::from_millis(self.write_timeout_ms)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_valid() {
        BrokerConfig::default().validate().unwrap();
    }

    #[test]
    fn errors_name_the_key() {
        let mut c = BrokerConfig::default();
        c.limits.max_inflight = 0;
        assert_eq!(c.validate().unwrap_err().key, "limits.max_inflight");
        let mut c = BrokerConfig::default();
        c.limits.max_packet_size = 10;
        assert_eq!(c.validate().unwrap_err().key, "limits.max_packet_size");
        let c = BrokerConfig {
            mqtt: None,
            ws: None,
            ..BrokerConfig::default()
        };
        assert_eq!(c.validate().unwrap_err().key, "mqtt");
    }
}
