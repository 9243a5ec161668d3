//! The I/O shell: listeners, loop threads, housekeeping, and the handle that stops them.

mod housekeeping;
mod worker;
mod ws;

use std::net::SocketAddr;
use std::sync::Arc;
use std::thread::JoinHandle;

use mio::{Poll, Token, Waker};
use socket2::{Domain, Protocol, Socket, Type};

use ballast_store::{FjallStore, Store, StoreError, Writer};

use crate::config::{BrokerConfig, ConfigError, Durability};
use crate::core::{Broker, Inbox};
use crate::metrics::MetricsSnapshot;

pub(crate) const WAKER: Token = Token(usize::MAX - 1);

#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        addr: SocketAddr,
        source: std::io::Error,
    },
    #[error("cannot start the event loop: {0}")]
    Io(#[from] std::io::Error),
    #[error("cannot open the store in {dir}: {source}")]
    Store { dir: String, source: StoreError },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ListenerKind {
    Mqtt,
    Ws,
}

/// One listening socket per loop thread on the same address (SO_REUSEPORT): the kernel spreads
/// new connections over the threads, and no thread hands sockets to another.
fn bind_group(
    addr: SocketAddr,
    n: usize,
) -> Result<(SocketAddr, Vec<std::net::TcpListener>), StartError> {
    let bind_one = |a: SocketAddr| -> std::io::Result<std::net::TcpListener> {
        let s = Socket::new(Domain::for_address(a), Type::STREAM, Some(Protocol::TCP))?;
        s.set_reuse_address(true)?;
        s.set_reuse_port(true)?;
        s.set_nonblocking(true)?;
        s.bind(&a.into())?;
        s.listen(1024)?;
        Ok(s.into())
    };
    // SO_REUSEPORT would let a second process join our port silently; a plain bind first
    // fails with "address in use" when anyone holds it (and picks the port for port 0).
    let probe =
        std::net::TcpListener::bind(addr).map_err(|source| StartError::Bind { addr, source })?;
    let actual = probe.local_addr()?;
    drop(probe);
    let first = bind_one(actual).map_err(|source| StartError::Bind {
        addr: actual,
        source,
    })?;
    let mut all = vec![first];
    for _ in 1..n {
        all.push(bind_one(actual).map_err(|source| StartError::Bind {
            addr: actual,
            source,
        })?);
    }
    Ok((actual, all))
}

/// Starts a broker node: opens its store and restores what it holds, binds its listeners,
/// starts its loop threads and housekeeping, and returns at once.
pub fn start(config: BrokerConfig) -> Result<BrokerHandle, StartError> {
    config.validate()?;
    let store: Option<Arc<dyn Store>> = match config.store.durability {
        Durability::None => None,
        d => {
            let sync = match d {
                Durability::Os => ballast_store::Sync::Os,
                _ => ballast_store::Sync::Fsync,
            };
            let dir = &config.store.data_dir;
            let s = FjallStore::open(dir, sync).map_err(|source| StartError::Store {
                dir: dir.display().to_string(),
                source,
            })?;
            Some(Arc::new(s))
        }
    };
    start_with_store(config, store)
}

/// Starts a broker node on a given store backend (`None`: nothing is stored).
pub fn start_with_store(
    config: BrokerConfig,
    store: Option<Arc<dyn Store>>,
) -> Result<BrokerHandle, StartError> {
    config.validate()?;
    let snapshot = match &store {
        Some(s) => Some(s.load().map_err(|source| StartError::Store {
            dir: config.store.data_dir.display().to_string(),
            source,
        })?),
        None => None,
    };
    let n = config.worker_count();
    let mut listeners: Vec<Vec<(ListenerKind, std::net::TcpListener)>> =
        (0..n).map(|_| Vec::new()).collect();
    let mut mqtt_addr = None;
    let mut ws_addr = None;
    for (kind, addr) in [
        (ListenerKind::Mqtt, config.mqtt),
        (ListenerKind::Ws, config.ws),
    ] {
        let Some(addr) = addr else { continue };
        let (actual, group) = bind_group(addr, n)?;
        match kind {
            ListenerKind::Mqtt => mqtt_addr = Some(actual),
            ListenerKind::Ws => ws_addr = Some(actual),
        }
        for (i, l) in group.into_iter().enumerate() {
            listeners[i].push((kind, l));
        }
    }
    let mut polls = Vec::with_capacity(n);
    let mut inboxes = Vec::with_capacity(n);
    for _ in 0..n {
        let poll = Poll::new()?;
        let waker = Waker::new(poll.registry(), WAKER)?;
        inboxes.push(Inbox::new(waker));
        polls.push(poll);
    }
    let inboxes: Arc<[Inbox]> = inboxes.into();
    let writer = store.map(|s| {
        let wake = inboxes.clone();
        Writer::start(
            s,
            Box::new(move |_| {
                for inbox in wake.iter() {
                    inbox.durable_advanced();
                }
            }),
        )
    });
    if let Some(w) = &writer {
        w.set_commit_delay(std::time::Duration::from_micros(
            config.store.commit_delay_us,
        ));
    }
    let broker = Arc::new(Broker::new(config, inboxes, writer));
    if let Some(snap) = snapshot {
        let orphans = snap.orphans;
        let (sessions, retained) = (snap.sessions.len(), snap.retained.len());
        broker.restore(snap, std::time::Instant::now());
        tracing::info!(
            sessions,
            retained,
            orphans,
            dir = %broker.config.store.data_dir.display(),
            "store loaded"
        );
    }
    let mut threads = Vec::with_capacity(n + 1);
    for (i, (poll, ls)) in polls.into_iter().zip(listeners).enumerate() {
        let b = broker.clone();
        let t = std::thread::Builder::new()
            .name(format!("ballast-loop-{i}"))
            .spawn(move || worker::run(i as u16, poll, ls, b))?;
        threads.push(t);
    }
    let stop = Arc::new(housekeeping::Stop::default());
    {
        let b = broker.clone();
        let stop = stop.clone();
        threads.push(
            std::thread::Builder::new()
                .name("ballast-housekeeping".into())
                .spawn(move || housekeeping::run(b, stop))?,
        );
    }
    if let Some(a) = mqtt_addr {
        tracing::info!(%a, workers = n, "mqtt listening");
    }
    if let Some(a) = ws_addr {
        tracing::info!(%a, path = %broker.config.ws_path, "mqtt over websocket listening");
    }
    Ok(BrokerHandle {
        broker,
        threads,
        stop,
        mqtt_addr,
        ws_addr,
    })
}

/// A running node. `shutdown` stops it gracefully.
pub struct BrokerHandle {
    broker: Arc<Broker>,
    threads: Vec<JoinHandle<()>>,
    stop: Arc<housekeeping::Stop>,
    mqtt_addr: Option<SocketAddr>,
    ws_addr: Option<SocketAddr>,
}

impl BrokerHandle {
    pub fn mqtt_addr(&self) -> Option<SocketAddr> {
        self.mqtt_addr
    }

    pub fn ws_addr(&self) -> Option<SocketAddr> {
        self.ws_addr
    }

    pub fn metrics(&self) -> MetricsSnapshot {
        let mut m = self.broker.metrics.snapshot();
        m.store = self
            .broker
            .writer
            .as_ref()
            .map(|w| crate::metrics::StoreSnapshot::of(w.stats()));
        m
    }

    /// Stops accepting, sends 5.0 clients DISCONNECT 0x8B (server shutting down), flushes
    /// what is queued for each connection, and waits for the threads to end.
    pub fn shutdown(self) {
        self.broker
            .shutting_down
            .store(true, std::sync::atomic::Ordering::SeqCst);
        for inbox in self.broker.inboxes.iter() {
            inbox.wake();
        }
        self.stop.stop();
        for t in self.threads {
            let _ = t.join();
        }
        // What the last connections recorded is written before the store closes.
        if let Some(w) = &self.broker.writer {
            w.close();
        }
        tracing::info!("broker stopped");
    }
}
