//! `p2p`: the Apus experiment (seed 004). N clients, each subscribed to a topic of its own;
//! each sends one message per interval to a random other client, M messages in all; then
//! everyone waits for stragglers. Reports the delivery rate and the delivery latency.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use ballast_codec::{Packet, Properties, Protocol, PubAck, Publish, QoS};
use bytes::Bytes;
use rand::Rng;
use serde::Serialize;
use tokio::io::AsyncWriteExt;
use tokio::task::JoinSet;

use crate::client::{self, ConnectOptions, HEADER};
use crate::{now_ns, Latency};

#[derive(Debug, Clone, clap::Args, Serialize)]
pub struct P2pArgs {
    #[arg(long, default_value = "127.0.0.1:1883")]
    pub addr: SocketAddr,
    /// Clients (N).
    #[arg(long, short = 'n', default_value_t = 1000)]
    pub clients: u32,
    /// Messages each client sends (M).
    #[arg(long, short = 'm', default_value_t = 100)]
    pub messages: u32,
    /// Milliseconds between a client's messages.
    #[arg(long, default_value_t = 1000)]
    pub interval_ms: u64,
    /// Seconds to wait for late deliveries after the last send.
    #[arg(long, default_value_t = 20.0)]
    pub drain: f64,
    #[arg(long, default_value_t = 0, value_parser = clap::value_parser!(u8).range(0..=2))]
    pub qos: u8,
    #[arg(long, default_value_t = 64)]
    pub payload: usize,
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u8).range(4..=5))]
    pub protocol: u8,
    /// Connection attempts in flight at once.
    #[arg(long, default_value_t = 256)]
    pub concurrency: usize,
    /// Source addresses used (127.0.2.1, 127.0.2.2, ...).
    #[arg(long, default_value_t = 4)]
    pub sources: u8,
}

#[derive(Debug, Clone, Serialize)]
pub struct P2pResult {
    pub args: P2pArgs,
    pub sent: u64,
    pub received: u64,
    pub delivery_rate: f64,
    pub latency: Latency,
    /// Percent of each CPU's time the hypervisor took while messages flowed (see
    /// [`crate::steal`]).
    pub steal_pct: Vec<f64>,
}

struct Counters {
    sent: AtomicU64,
    received: AtomicU64,
}

pub async fn run(a: &P2pArgs) -> Result<P2pResult> {
    if a.clients < 2 {
        bail!("--clients must be at least 2");
    }
    if a.payload < HEADER {
        bail!("--payload must be at least {HEADER}");
    }
    let protocol = if a.protocol == 5 {
        Protocol::V5
    } else {
        Protocol::V3_1_1
    };
    let qos = QoS::from_u8(a.qos).context("qos")?;
    let run_id: u32 = rand::random();
    let counters = Arc::new(Counters {
        sent: AtomicU64::new(0),
        received: AtomicU64::new(0),
    });

    // Connect and subscribe everyone first.
    eprintln!("connecting {} clients", a.clients);
    let mut conns: Vec<Option<(tokio::net::TcpStream, client::Reader)>> =
        (0..a.clients).map(|_| None).collect();
    let mut set = JoinSet::new();
    let mut i = 0;
    while i < a.clients || !set.is_empty() {
        while i < a.clients && set.len() < a.concurrency {
            let src = IpAddr::V4(Ipv4Addr::new(
                127,
                0,
                2,
                1 + (i % a.sources.max(1) as u32) as u8,
            ));
            let o = ConnectOptions {
                protocol,
                keep_alive: 600,
                clean: true,
                session_expiry: None,
                bind: Some(src),
            };
            let addr = a.addr;
            let topic = format!("p2p/{run_id:08x}/{i}");
            set.spawn(async move {
                let (mut s, mut r) =
                    client::connect(addr, &format!("p2p-{run_id:08x}-{i}"), &o).await?;
                client::subscribe(&mut s, &mut r, protocol, topic, qos).await?;
                Ok::<_, anyhow::Error>((i, s, r))
            });
            i += 1;
        }
        if let Some(res) = set.join_next().await {
            let (k, s, r) = res??;
            conns[k as usize] = Some((s, r));
        }
    }
    eprintln!("all connected; sending {} messages each", a.messages);

    let cpu_before = crate::steal::CpuTimes::sample();
    let started = Instant::now();
    let hist = crate::shared_hist();
    let mut tasks = JoinSet::new();
    for (k, c) in conns.into_iter().enumerate() {
        let (s, r) = c.context("missing connection")?;
        let a = a.clone();
        let counters = counters.clone();
        tasks.spawn(client_task(
            k as u32,
            s,
            r,
            a,
            protocol,
            qos,
            run_id,
            counters,
            hist.clone(),
        ));
    }
    let progress = {
        let counters = counters.clone();
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(Duration::from_secs(1)).await;
                eprintln!(
                    "  {:>6.1}s sent {:>9} received {:>9}",
                    started.elapsed().as_secs_f64(),
                    counters.sent.load(Relaxed),
                    counters.received.load(Relaxed)
                );
            }
        })
    };
    while let Some(r) = tasks.join_next().await {
        r??;
    }
    progress.abort();
    let steal_pct = crate::steal::CpuTimes::sample().steal_percent_since(&cpu_before);
    let sent = counters.sent.load(Relaxed);
    let received = counters.received.load(Relaxed);
    let latency = Latency::from_hist(&hist.lock().unwrap_or_else(|e| e.into_inner()));
    Ok(P2pResult {
        args: a.clone(),
        sent,
        received,
        delivery_rate: if sent == 0 {
            0.0
        } else {
            received as f64 / sent as f64
        },
        latency,
        steal_pct,
    })
}

#[allow(clippy::too_many_arguments)]
async fn client_task(
    me: u32,
    mut s: tokio::net::TcpStream,
    mut r: client::Reader,
    a: P2pArgs,
    protocol: Protocol,
    qos: QoS,
    run_id: u32,
    counters: Arc<Counters>,
    hist: crate::SharedHist,
) -> Result<()> {
    let (mut rd, mut wr) = s.split();
    let mut lat = Vec::new();
    let interval = Duration::from_millis(a.interval_ms.max(1));
    // A random phase so the clients do not all send in the same instant.
    let phase = Duration::from_millis(rand::rng().random_range(0..a.interval_ms.max(1)));
    let first = tokio::time::Instant::now() + phase;
    let mut ticker = tokio::time::interval_at(first, interval);
    let end = first + interval * a.messages + Duration::from_secs_f64(a.drain);
    let mut payload = vec![0u8; a.payload];
    let (mut sent, mut pid) = (0u32, 0u16);
    let mut buf = Vec::new();
    let mut packets = Vec::new();
    loop {
        tokio::select! {
            _ = ticker.tick(), if sent < a.messages => {
                let to = loop {
                    let k = rand::rng().random_range(0..a.clients);
                    if k != me { break k; }
                };
                client::put_header(&mut payload, now_ns(), me, sent);
                pid = if pid == u16::MAX { 1 } else { pid + 1 };
                Packet::Publish(Publish {
                    dup: false,
                    qos,
                    retain: false,
                    topic: format!("p2p/{run_id:08x}/{to}"),
                    packet_id: if qos == QoS::AtMostOnce { 0 } else { pid },
                    payload: Bytes::copy_from_slice(&payload),
                    properties: Properties::default(),
                }).encode(protocol, &mut buf);
                sent += 1;
                counters.sent.fetch_add(1, Relaxed);
            }
            res = r.read_batch(&mut rd, protocol, &mut packets) => {
                res?;
                let now = now_ns();
                for p in packets.drain(..) {
                    match p {
                        Packet::Publish(p) => {
                            if let Some((t, _, _)) = client::read_header(&p.payload) {
                                counters.received.fetch_add(1, Relaxed);
                                lat.push(now.saturating_sub(t) / 1000);
                            }
                            match p.qos {
                                QoS::AtLeastOnce => Packet::PubAck(PubAck { packet_id: p.packet_id, code: 0, properties: Properties::default() }).encode(protocol, &mut buf),
                                QoS::ExactlyOnce => Packet::PubRec(PubAck { packet_id: p.packet_id, code: 0, properties: Properties::default() }).encode(protocol, &mut buf),
                                QoS::AtMostOnce => {}
                            }
                        }
                        Packet::PubRec(a) => Packet::PubRel(PubAck { packet_id: a.packet_id, code: 0, properties: Properties::default() }).encode(protocol, &mut buf),
                        Packet::PubRel(a) => Packet::PubComp(PubAck { packet_id: a.packet_id, code: 0, properties: Properties::default() }).encode(protocol, &mut buf),
                        _ => {}
                    }
                }
            }
            _ = tokio::time::sleep_until(end) => break,
        }
        crate::record_all(&hist, &mut lat);
        if !buf.is_empty() {
            wr.write_all(&buf).await?;
            buf.clear();
        }
    }
    Ok(())
}

pub fn print(r: &P2pResult) {
    let l = &r.latency;
    println!(
        "p2p N={} M={} qos={}: sent {} received {} delivery rate {:.3}%",
        r.args.clients,
        r.args.messages,
        r.args.qos,
        r.sent,
        r.received,
        r.delivery_rate * 100.0
    );
    println!(
        "  latency ms  mean {:.3}  p50 {:.3}  p99 {:.3}  max {:.3}",
        l.mean_ms, l.p50_ms, l.p99_ms, l.max_ms
    );
    if !r.steal_pct.is_empty() {
        let per_cpu: Vec<String> = r.steal_pct.iter().map(|p| format!("{p:.1}")).collect();
        println!("  host steal  {}% per CPU", per_cpu.join(" / "));
    }
}
