//! Helpers shared by Ballast's tests.

pub mod mqtt;

use std::net::SocketAddr;
use std::time::{Duration, Instant};

pub use ballast_broker::{BrokerConfig, BrokerHandle, Durability, Limits, StoreConfig};

/// A broker on ephemeral loopback ports for MQTT and WebSocket, two workers, `$SYS` every
/// second. Shut down when dropped.
pub struct TestBroker {
    pub handle: Option<BrokerHandle>,
    pub mqtt: SocketAddr,
    pub ws: SocketAddr,
}

impl TestBroker {
    pub fn handle(&self) -> &BrokerHandle {
        self.handle.as_ref().expect("broker running")
    }

    /// Port of the MQTT listener (rumqttc takes host and port separately).
    pub fn port(&self) -> u16 {
        self.mqtt.port()
    }

    pub fn metrics(&self) -> ballast_broker::MetricsSnapshot {
        self.handle().metrics()
    }

    /// Graceful shutdown, waiting for the broker's threads.
    pub fn shutdown(mut self) {
        if let Some(h) = self.handle.take() {
            h.shutdown();
        }
    }
}

impl Drop for TestBroker {
    fn drop(&mut self) {
        if let Some(h) = self.handle.take() {
            h.shutdown();
        }
    }
}

/// The configuration `start_broker` uses: loopback, port 0, fast `$SYS`.
pub fn test_config() -> BrokerConfig {
    BrokerConfig {
        mqtt: Some(SocketAddr::from(([127, 0, 0, 1], 0))),
        ws: Some(SocketAddr::from(([127, 0, 0, 1], 0))),
        workers: 2,
        sys_interval_secs: 1,
        store: StoreConfig {
            durability: Durability::None,
            ..StoreConfig::default()
        },
        ..BrokerConfig::default()
    }
}

/// `test_config` with the embedded store in `dir`, synced as in production.
pub fn durable_config(dir: &std::path::Path) -> BrokerConfig {
    BrokerConfig {
        store: StoreConfig {
            durability: Durability::Fsync,
            data_dir: dir.to_path_buf(),
            ..StoreConfig::default()
        },
        ..test_config()
    }
}

pub fn start_broker() -> TestBroker {
    start_broker_with(test_config())
}

/// Starts a broker on a given store backend (the config's durability is not used).
pub fn start_broker_on(
    config: BrokerConfig,
    store: std::sync::Arc<dyn ballast_store::Store>,
) -> TestBroker {
    let handle = ballast_broker::start_with_store(config, Some(store)).expect("broker starts");
    wrap(handle)
}

/// Starts a broker with `config` (its listener addresses should use port 0).
pub fn start_broker_with(config: BrokerConfig) -> TestBroker {
    wrap(ballast_broker::start(config).expect("broker starts"))
}

fn wrap(handle: BrokerHandle) -> TestBroker {
    let mqtt = handle.mqtt_addr().expect("mqtt listener");
    let ws = handle.ws_addr().unwrap_or(mqtt);
    TestBroker {
        handle: Some(handle),
        mqtt,
        ws,
    }
}

/// Polls `cond` every 10 ms until it holds or `timeout` passes; returns whether it held.
pub fn wait_for(timeout: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + timeout;
    loop {
        if cond() {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}
