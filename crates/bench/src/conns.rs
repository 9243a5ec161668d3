//! `conns`: opens N idle MQTT connections (long keepalive, clean session), spread over many
//! source addresses in 127.0.0.0/8 (one source address gives ~28k ephemeral ports), and
//! reports the connect rate and, given the broker's pid, its resident memory per connection.
//!
//! One process may hold at most as many connections as it may open files; run several
//! generator processes (distinct `--id-prefix`) to go past that.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use ballast_codec::Protocol;
use serde::Serialize;
use tokio::task::JoinSet;

use crate::client::{self, ConnectOptions};

#[derive(Debug, Clone, clap::Args, Serialize)]
pub struct ConnsArgs {
    #[arg(long, default_value = "127.0.0.1:1883")]
    pub addr: SocketAddr,
    /// Connections to open.
    #[arg(long, short = 'n', default_value_t = 10_000)]
    pub count: u32,
    /// Measure memory after each of this many equal steps.
    #[arg(long, default_value_t = 4)]
    pub steps: u32,
    /// Connection attempts in flight at once.
    #[arg(long, default_value_t = 256)]
    pub concurrency: usize,
    /// Keepalive asked for, in seconds (long: idle connections should cost no traffic).
    #[arg(long, default_value_t = 3600)]
    pub keepalive: u16,
    /// Source addresses used (127.0.1.1, 127.0.1.2, ...).
    #[arg(long, default_value_t = 8)]
    pub sources: u8,
    /// Pid of the broker, to read its resident memory from /proc.
    #[arg(long)]
    pub pid: Option<u32>,
    /// Seconds to wait after each step before reading memory.
    #[arg(long, default_value_t = 2.0)]
    pub settle: f64,
    /// MQTT protocol level: 4 (3.1.1) or 5.
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u8).range(4..=5))]
    pub protocol: u8,
    #[arg(long, default_value = "idle")]
    pub id_prefix: String,
}

#[derive(Debug, Clone, Serialize)]
pub struct ConnsStep {
    pub connections: u32,
    pub rss_kib: Option<u64>,
    /// (rss - rss before any connection) / connections.
    pub kib_per_connection: Option<f64>,
}

#[derive(Debug, Clone, Serialize)]
pub struct ConnsResult {
    pub args: ConnsArgs,
    pub connected: u32,
    pub failed: u32,
    pub connect_seconds: f64,
    pub connects_per_second: f64,
    pub rss_before_kib: Option<u64>,
    pub steps: Vec<ConnsStep>,
}

/// Resident memory of a process in KiB.
pub fn rss_kib(pid: u32) -> Result<u64> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .with_context(|| format!("read /proc/{pid}/status"))?;
    let line = s
        .lines()
        .find(|l| l.starts_with("VmRSS:"))
        .context("no VmRSS")?;
    let kib = line
        .split_whitespace()
        .nth(1)
        .context("VmRSS value")?
        .parse()?;
    Ok(kib)
}

pub async fn run(a: &ConnsArgs) -> Result<ConnsResult> {
    if a.count == 0 || a.steps == 0 || a.sources == 0 {
        bail!("--count, --steps and --sources must be at least 1");
    }
    let protocol = if a.protocol == 5 {
        Protocol::V5
    } else {
        Protocol::V3_1_1
    };
    let rss_before = a.pid.map(rss_kib).transpose()?;
    let mut held = Vec::with_capacity(a.count as usize);
    let mut steps = Vec::new();
    let mut failed = 0u32;
    let mut connect_time = Duration::ZERO;
    let per_step = a.count.div_ceil(a.steps);
    let mut next = 0u32;
    while next < a.count {
        let step_end = (next + per_step).min(a.count);
        let t0 = Instant::now();
        let mut set = JoinSet::new();
        let mut i = next;
        while i < step_end || !set.is_empty() {
            while i < step_end && set.len() < a.concurrency {
                let src = IpAddr::V4(Ipv4Addr::new(127, 0, 1, 1 + (i % a.sources as u32) as u8));
                let o = ConnectOptions {
                    protocol,
                    keep_alive: a.keepalive,
                    clean: true,
                    session_expiry: None,
                    bind: Some(src),
                };
                let id = format!("{}-{i}", a.id_prefix);
                let addr = a.addr;
                set.spawn(async move { client::connect(addr, &id, &o).await });
                i += 1;
            }
            match set.join_next().await {
                Some(Ok(Ok((s, _)))) => held.push(s),
                Some(Ok(Err(e))) => {
                    failed += 1;
                    if failed <= 5 {
                        eprintln!("  connect failed: {e:#}");
                    }
                }
                Some(Err(e)) => bail!("connect task: {e}"),
                None => {}
            }
        }
        connect_time += t0.elapsed();
        next = step_end;
        tokio::time::sleep(Duration::from_secs_f64(a.settle)).await;
        let rss = a.pid.map(rss_kib).transpose()?;
        let n = held.len() as u32;
        let per = match (rss, rss_before) {
            (Some(r), Some(b)) if n > 0 => Some((r as f64 - b as f64) / n as f64),
            _ => None,
        };
        eprintln!(
            "  {:>7} connected ({} failed){}",
            n,
            failed,
            per.map(|p| format!(", {p:.3} KiB per connection"))
                .unwrap_or_default()
        );
        steps.push(ConnsStep {
            connections: n,
            rss_kib: rss,
            kib_per_connection: per,
        });
    }
    let connected = held.len() as u32;
    drop(held);
    Ok(ConnsResult {
        args: a.clone(),
        connected,
        failed,
        connect_seconds: connect_time.as_secs_f64(),
        connects_per_second: connected as f64 / connect_time.as_secs_f64().max(1e-9),
        rss_before_kib: rss_before,
        steps,
    })
}

pub fn print(r: &ConnsResult) {
    println!(
        "conns: {} connected, {} failed, {:.0} connects/s",
        r.connected, r.failed, r.connects_per_second
    );
    println!("{:>12} {:>12} {:>14}", "connections", "rss KiB", "KiB/conn");
    for s in &r.steps {
        println!(
            "{:>12} {:>12} {:>14}",
            s.connections,
            s.rss_kib.map(|v| v.to_string()).unwrap_or("-".into()),
            s.kib_per_connection
                .map(|v| format!("{v:.3}"))
                .unwrap_or("-".into())
        );
    }
}
