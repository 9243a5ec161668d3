//! `ballast serve`: one broker node with its HTTP endpoints.
//!
//! Start-up order: config (exit 2 if bad), logging, open-files limit, data directory, the
//! HTTP listener, the broker's listeners and threads, then serve HTTP until SIGTERM or SIGINT.
//! Shutdown runs the other way: stop HTTP, then `BrokerHandle::shutdown` (stop accepting,
//! DISCONNECT 0x8B to MQTT 5 clients, flush, join) on a blocking thread, then exit 0.

use std::future::IntoFuture;
use std::io::IsTerminal;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{anyhow, Context};
use tokio::signal::unix::{signal, Signal, SignalKind};
use tokio_util::sync::CancellationToken;
use tracing::{error, info, warn};

use crate::cli::ServeArgs;
use crate::config::{self, ServeConfig};
use crate::http::{self, BrokerSlot};
use crate::sys;

/// Exit code for a configuration the node cannot run with (clap uses 2 for bad flags too).
const EXIT_CONFIG: u8 = 2;

/// How long in-flight HTTP requests get to finish at shutdown before the broker stops anyway.
const HTTP_DRAIN: Duration = Duration::from_secs(5);

pub fn run(args: ServeArgs) -> ExitCode {
    let config = match config::load(&args, std::env::var("RUST_LOG").ok()) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("{e}");
            return ExitCode::from(EXIT_CONFIG);
        }
    };
    init_logging(&config.log_level);
    match serve(config) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            error!("{e:#}");
            ExitCode::FAILURE
        }
    }
}

fn init_logging(filter: &str) {
    // `config::validate` already parsed the filter, so this cannot fail; fall back to info
    // rather than panic if it ever does.
    let filter = tracing_subscriber::EnvFilter::builder()
        .parse(filter)
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    // Logs go to stderr: stdout is left for commands that print results.
    let ansi = std::io::stderr().is_terminal();
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(ansi)
        .init();
}

/// Both shutdown signals, registered before anything starts so an early SIGTERM is handled
/// rather than killing the process with the default action.
struct Signals {
    term: Signal,
    int: Signal,
}

impl Signals {
    fn register() -> anyhow::Result<Signals> {
        Ok(Signals {
            term: signal(SignalKind::terminate()).context("cannot handle SIGTERM")?,
            int: signal(SignalKind::interrupt()).context("cannot handle SIGINT")?,
        })
    }

    async fn next(&mut self) -> &'static str {
        tokio::select! {
            _ = self.term.recv() => "SIGTERM",
            _ = self.int.recv() => "SIGINT",
        }
    }
}

fn serve(config: ServeConfig) -> anyhow::Result<()> {
    info!(
        version = env!("CARGO_PKG_VERSION"),
        "ballast serve starting"
    );
    match sys::raise_nofile_limit() {
        Ok((before, after)) if after > before => {
            info!("open files limit raised from {before} to {after}")
        }
        Ok((_, after)) => info!("open files limit is {after}"),
        Err(e) => warn!("cannot raise the open files limit: {e}"),
    }

    let mut config = config;
    std::fs::create_dir_all(&config.data_dir)
        .with_context(|| format!("cannot create data directory {}", config.data_dir.display()))?;
    let data_dir = config
        .data_dir
        .canonicalize()
        .unwrap_or_else(|_| config.data_dir.clone());
    info!(
        durability = ?config.broker.store.durability,
        "data directory {}",
        data_dir.display()
    );
    config.broker.store.data_dir = data_dir;

    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_name("ballast-http")
        .enable_all()
        .build()
        .context("cannot start the tokio runtime")?;
    runtime.block_on(run_node(config))
}

async fn run_node(config: ServeConfig) -> anyhow::Result<()> {
    let mut signals = Signals::register()?;
    let http_listener = tokio::net::TcpListener::bind(config.http)
        .await
        .with_context(|| format!("cannot listen for HTTP on {}", config.http))?;
    let http_addr = http_listener.local_addr()?;

    let ws_path = config.broker.ws_path.clone();
    let handle = ballast_broker::start(config.broker)
        .map_err(|e| anyhow!("cannot start the broker: {e}"))?;
    if let Some(addr) = handle.mqtt_addr() {
        info!("mqtt listening on {addr}");
    }
    if let Some(addr) = handle.ws_addr() {
        info!("websocket listening on ws://{addr}{ws_path}");
    }
    info!("http listening on http://{http_addr} (GET /healthz, GET /metrics)");

    let broker = Arc::new(BrokerSlot::new(handle));
    let stop_http = CancellationToken::new();
    let mut http_task = tokio::spawn(
        axum::serve(http_listener, http::router(broker.clone()))
            .with_graceful_shutdown(stop_http.clone().cancelled_owned())
            .into_future(),
    );

    let http_failed = tokio::select! {
        which = signals.next() => {
            info!("{which} received, shutting down");
            false
        }
        result = &mut http_task => {
            match result {
                Ok(Ok(())) => error!("the HTTP server stopped unexpectedly"),
                Ok(Err(e)) => error!("the HTTP server failed: {e}"),
                Err(e) => error!("the HTTP server task failed: {e}"),
            }
            true
        }
    };

    // A second signal during shutdown means "now": exit without waiting.
    tokio::spawn(async move {
        let which = signals.next().await;
        eprintln!("{which} received again, exiting without a graceful shutdown");
        std::process::exit(130);
    });

    if !http_failed {
        stop_http.cancel();
        match tokio::time::timeout(HTTP_DRAIN, &mut http_task).await {
            Ok(_) => info!("http stopped"),
            Err(_) => {
                warn!("http requests still open after {HTTP_DRAIN:?}; stopping the broker anyway");
                http_task.abort();
            }
        }
    }

    if let Some(handle) = broker.take() {
        tokio::task::spawn_blocking(move || handle.shutdown())
            .await
            .context("broker shutdown panicked")?;
    }
    info!("broker stopped");
    if http_failed {
        return Err(anyhow!("stopped because the HTTP server failed"));
    }
    Ok(())
}
