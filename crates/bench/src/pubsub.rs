//! `pubsub`: P publishers, S subscribers, a topic layout, a QoS, a payload size and a rate.
//!
//! Every payload starts with the send time and a (publisher, sequence) pair, so subscribers
//! measure latency and find lost and duplicated messages. Only messages sent inside the
//! measurement window (after the warm-up) are counted.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use ballast_codec::{Packet, Properties, Protocol, PubAck, Publish, QoS};
use bytes::Bytes;
use serde::Serialize;
use tokio::io::AsyncWriteExt;

use crate::client::{self, ConnectOptions, HEADER};
use crate::{now_ns, Latency};

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Layout {
    /// Publisher i writes `bench/RUN/i`; every subscriber takes `bench/RUN/+`.
    FanIn,
    /// Every publisher writes `bench/RUN/0`; every subscriber takes it.
    FanOut,
    /// Publisher i writes `bench/RUN/i`; subscriber i takes only that (P must equal S).
    Pairwise,
}

#[derive(Debug, Clone, clap::Args, Serialize)]
pub struct PubSubArgs {
    /// Broker to drive.
    #[arg(long, default_value = "127.0.0.1:1883")]
    pub addr: SocketAddr,
    /// Publishing connections.
    #[arg(long, short = 'p', default_value_t = 10)]
    pub publishers: u32,
    /// Subscribing connections.
    #[arg(long, short = 's', default_value_t = 1)]
    pub subscribers: u32,
    #[arg(long, value_enum, default_value = "fan-in")]
    pub layout: Layout,
    /// QoS of publishes and subscriptions (0, 1 or 2).
    #[arg(long, default_value_t = 0, value_parser = clap::value_parser!(u8).range(0..=2))]
    pub qos: u8,
    /// Payload bytes per message (at least 16, the benchmark header).
    #[arg(long, default_value_t = 100)]
    pub payload: usize,
    /// Total publish rate in messages per second over all publishers; 0 = as fast as the
    /// broker takes them.
    #[arg(long, default_value_t = 0)]
    pub rate: u64,
    /// Seconds measured.
    #[arg(long, default_value_t = 10.0)]
    pub duration: f64,
    /// Seconds of load before measuring.
    #[arg(long, default_value_t = 2.0)]
    pub warmup: f64,
    /// MQTT protocol level: 4 (3.1.1) or 5.
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u8).range(4..=5))]
    pub protocol: u8,
    /// Unacknowledged QoS 1/2 messages per publisher.
    #[arg(long, default_value_t = 64)]
    pub window: u32,
    /// Publishers send what is due every this many milliseconds, in one write.
    #[arg(long, default_value_t = 5)]
    pub tick_ms: u64,
    /// Subscribers hold persistent sessions (3.1.1 clean session 0; 5.0 a session expiry of
    /// an hour), so QoS 1/2 deliveries go through the broker's durable store. The sessions are
    /// ended at the end of the run.
    #[arg(long, default_value_t = false)]
    pub persistent: bool,
    /// Client id prefix (lets several generator processes share a broker).
    #[arg(long, default_value = "bench")]
    pub id_prefix: String,
    /// Print progress every second to stderr.
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    pub progress: bool,
}

#[derive(Debug, Clone, Serialize)]
pub struct PubSubResult {
    pub args: PubSubArgs,
    /// Messages published inside the measurement window.
    pub sent: u64,
    /// Deliveries expected for those (sent x subscribers each reaches).
    pub expected: u64,
    /// Distinct deliveries received of those.
    pub received: u64,
    pub lost: u64,
    pub duplicates: u64,
    /// Published messages per second in the window.
    pub send_rate: f64,
    /// Deliveries per second in the window.
    pub delivery_rate: f64,
    /// received / expected.
    pub delivered_ratio: f64,
    pub latency: Latency,
    /// Percent of each CPU's time the hypervisor took while the run lasted (see
    /// [`crate::steal`]); empty where not measurable.
    pub steal_pct: Vec<f64>,
}

struct Shared {
    window_start_ns: u64,
    window_end_ns: u64,
    sent: AtomicU64,
    received: AtomicU64,
    stop_publishing: AtomicBool,
}

/// How subscribers connect: clean, or with a session that outlives the connection.
fn sub_options(a: &PubSubArgs) -> ConnectOptions {
    let protocol = proto(a.protocol);
    ConnectOptions {
        protocol,
        clean: !a.persistent,
        session_expiry: (a.persistent && protocol == Protocol::V5).then_some(3600),
        ..Default::default()
    }
}

fn proto(v: u8) -> Protocol {
    if v == 5 {
        Protocol::V5
    } else {
        Protocol::V3_1_1
    }
}

pub async fn run(a: &PubSubArgs) -> Result<PubSubResult> {
    if a.payload < HEADER {
        bail!("--payload must be at least {HEADER} bytes");
    }
    if a.layout == Layout::Pairwise && a.publishers != a.subscribers {
        bail!("--layout pairwise needs as many publishers as subscribers");
    }
    if a.publishers == 0 || a.subscribers == 0 {
        bail!("need at least one publisher and one subscriber");
    }
    let run_id: u32 = rand::random();
    let protocol = proto(a.protocol);
    let qos = QoS::from_u8(a.qos).context("qos")?;
    let topic = |i: u32| format!("bench/{run_id:08x}/{i}");

    // Subscribers first, each confirmed by SUBACK.
    let mut subs = Vec::new();
    for i in 0..a.subscribers {
        let filter = match a.layout {
            Layout::FanIn => format!("bench/{run_id:08x}/+"),
            Layout::FanOut => topic(0),
            Layout::Pairwise => topic(i),
        };
        let id = format!("{}-s{i}-{run_id:08x}", a.id_prefix);
        let (mut s, mut r) = client::connect(a.addr, &id, &sub_options(a)).await?;
        client::subscribe(&mut s, &mut r, protocol, filter, qos).await?;
        subs.push((s, r));
    }
    let per_message = match a.layout {
        Layout::FanIn | Layout::FanOut => a.subscribers as u64,
        Layout::Pairwise => 1,
    };

    let cpu_before = crate::steal::CpuTimes::sample();
    let start = Instant::now();
    let base = now_ns();
    let warm = Duration::from_secs_f64(a.warmup);
    let dur = Duration::from_secs_f64(a.duration);
    let shared = Arc::new(Shared {
        window_start_ns: base + warm.as_nanos() as u64,
        window_end_ns: base + (warm + dur).as_nanos() as u64,
        sent: AtomicU64::new(0),
        received: AtomicU64::new(0),
        stop_publishing: AtomicBool::new(false),
    });
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);

    let hist = crate::shared_hist();
    let mut sub_tasks = Vec::new();
    for (s, r) in subs {
        let sh = shared.clone();
        let stop = stop_rx.clone();
        let n = a.publishers as usize;
        sub_tasks.push(tokio::spawn(subscriber(
            s,
            r,
            protocol,
            n,
            sh,
            hist.clone(),
            stop,
        )));
    }
    let mut pub_tasks = Vec::new();
    for i in 0..a.publishers {
        let id = format!("{}-p{i}-{run_id:08x}", a.id_prefix);
        let o = ConnectOptions {
            protocol,
            ..Default::default()
        };
        let (s, r) = client::connect(a.addr, &id, &o).await?;
        let t = match a.layout {
            Layout::FanOut => topic(0),
            _ => topic(i),
        };
        let sh = shared.clone();
        let args = a.clone();
        pub_tasks.push(tokio::spawn(publisher(s, r, i, t, qos, protocol, args, sh)));
    }

    // Progress while publishing.
    let total = warm + dur;
    let mut last = (0u64, 0u64);
    while start.elapsed() < total {
        tokio::time::sleep(Duration::from_secs(1).min(total.saturating_sub(start.elapsed()))).await;
        if a.progress {
            let (s, r) = (shared.sent.load(Relaxed), shared.received.load(Relaxed));
            eprintln!(
                "  {:>5.1}s  sent {:>10} ({:>9}/s)  received {:>10} ({:>9}/s)",
                start.elapsed().as_secs_f64(),
                s,
                s - last.0,
                r,
                r - last.1
            );
            last = (s, r);
        }
    }
    shared.stop_publishing.store(true, Relaxed);
    let mut sent_in_window = 0;
    for t in pub_tasks {
        sent_in_window += t.await.context("publisher task")??;
    }
    // Let deliveries catch up: stop when everything arrived or nothing moved for 2 s.
    let expected = sent_in_window * per_message;
    let drain_deadline = Instant::now() + Duration::from_secs(10);
    let mut seen = shared.received.load(Relaxed);
    let mut still_since = Instant::now();
    while Instant::now() < drain_deadline {
        tokio::time::sleep(Duration::from_millis(50)).await;
        let now = shared.received.load(Relaxed);
        if now != seen {
            seen = now;
            still_since = Instant::now();
        } else if still_since.elapsed() > Duration::from_secs(2) {
            break;
        }
        // Every delivery of every message sent (warm-up included) has arrived.
        if now >= shared.sent.load(Relaxed) * per_message {
            break;
        }
    }
    let _ = stop_tx.send(true);
    let steal_pct = crate::steal::CpuTimes::sample().steal_percent_since(&cpu_before);
    let (mut received, mut dups) = (0, 0);
    for t in sub_tasks {
        let s = t.await.context("subscriber task")??;
        received += s.received;
        dups += s.duplicates;
    }
    if a.persistent {
        // End the persistent sessions: a clean connection of the same id replaces each.
        for i in 0..a.subscribers {
            let id = format!("{}-s{i}-{run_id:08x}", a.id_prefix);
            let o = ConnectOptions {
                protocol,
                ..Default::default()
            };
            let (mut s, _) = client::connect(a.addr, &id, &o).await?;
            let mut buf = Vec::new();
            Packet::Disconnect(Default::default()).encode(protocol, &mut buf);
            s.write_all(&buf).await?;
        }
    }
    let secs = a.duration;
    let latency = Latency::from_hist(&hist.lock().unwrap_or_else(|e| e.into_inner()));
    Ok(PubSubResult {
        args: a.clone(),
        sent: sent_in_window,
        expected,
        received,
        lost: expected.saturating_sub(received),
        duplicates: dups,
        send_rate: sent_in_window as f64 / secs,
        delivery_rate: received as f64 / secs,
        delivered_ratio: if expected == 0 {
            0.0
        } else {
            received as f64 / expected as f64
        },
        latency,
        steal_pct,
    })
}

#[allow(clippy::too_many_arguments)]
async fn publisher(
    mut s: tokio::net::TcpStream,
    mut r: client::Reader,
    index: u32,
    topic: String,
    qos: QoS,
    protocol: Protocol,
    a: PubSubArgs,
    sh: Arc<Shared>,
) -> Result<u64> {
    let (mut rd, mut wr) = s.split();
    let per_pub_rate = a.rate as f64 / a.publishers as f64;
    let tick = Duration::from_millis(a.tick_ms.max(1));
    let mut ticker = tokio::time::interval(tick);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    let mut payload = vec![0u8; a.payload];
    let mut buf = Vec::with_capacity(64 * 1024);
    let mut packets = Vec::new();
    let (mut seq, mut inflight, mut in_window) = (0u32, 0u32, 0u64);
    let started = Instant::now();
    let topic: String = topic;
    let window = if qos == QoS::AtMostOnce {
        u32::MAX
    } else {
        a.window
    };
    loop {
        let stopping = sh.stop_publishing.load(Relaxed);
        if stopping && inflight == 0 {
            break;
        }
        let may_send = !stopping && inflight < window;
        tokio::select! {
            biased;
            res = r.read_batch(&mut rd, protocol, &mut packets), if qos != QoS::AtMostOnce => {
                res?;
                for p in packets.drain(..) {
                    match p {
                        Packet::PubAck(_) | Packet::PubComp(_) => inflight = inflight.saturating_sub(1),
                        Packet::PubRec(a) => Packet::PubRel(PubAck { packet_id: a.packet_id, code: 0, properties: Properties::default() }).encode(protocol, &mut buf),
                        _ => {}
                    }
                }
            }
            _ = ticker.tick(), if may_send && a.rate > 0 => {}
            _ = std::future::ready(()), if may_send && a.rate == 0 => {
                let mut n = 0;
                while n < 256 && inflight < window {
                    in_window += encode_one(&mut buf, &mut payload, &topic, qos, protocol, index, seq, &sh);
                    seq = seq.wrapping_add(1);
                    n += 1;
                    if qos != QoS::AtMostOnce { inflight += 1; }
                }
            }
            _ = tokio::time::sleep(Duration::from_millis(50)), if stopping || !may_send => {
                if stopping && started.elapsed() > Duration::from_secs_f64(a.warmup + a.duration + 10.0) {
                    break; // acknowledgements that never came are counted as lost by subscribers
                }
            }
        }
        // At a fixed rate, send what is due now: after a tick, and also after acknowledgements
        // freed the window (else a full window would cap the rate at window per tick).
        if a.rate > 0 && !sh.stop_publishing.load(Relaxed) {
            let due = (started.elapsed().as_secs_f64() * per_pub_rate) as u64;
            while (seq as u64) < due && inflight < window {
                in_window += encode_one(
                    &mut buf,
                    &mut payload,
                    &topic,
                    qos,
                    protocol,
                    index,
                    seq,
                    &sh,
                );
                seq = seq.wrapping_add(1);
                if qos != QoS::AtMostOnce {
                    inflight += 1;
                }
            }
        }
        if !buf.is_empty() {
            wr.write_all(&buf).await?;
            buf.clear();
        }
    }
    let mut d = Vec::new();
    Packet::Disconnect(Default::default()).encode(protocol, &mut d);
    let _ = wr.write_all(&d).await;
    Ok(in_window)
}

/// Encodes one PUBLISH; returns 1 when its send time falls in the measurement window.
#[allow(clippy::too_many_arguments)]
fn encode_one(
    buf: &mut Vec<u8>,
    payload: &mut [u8],
    topic: &str,
    qos: QoS,
    protocol: Protocol,
    index: u32,
    seq: u32,
    sh: &Shared,
) -> u64 {
    let t = now_ns();
    client::put_header(payload, t, index, seq);
    let packet_id = if qos == QoS::AtMostOnce {
        0
    } else {
        (seq % 65535) as u16 + 1
    };
    let p = Packet::Publish(Publish {
        dup: false,
        qos,
        retain: false,
        topic: topic.to_string(),
        packet_id,
        payload: Bytes::copy_from_slice(payload),
        properties: Properties::default(),
    });
    p.encode(protocol, buf);
    sh.sent.fetch_add(1, Relaxed);
    u64::from(t >= sh.window_start_ns && t < sh.window_end_ns)
}

struct SubStats {
    received: u64,
    duplicates: u64,
}

async fn subscriber(
    mut s: tokio::net::TcpStream,
    mut r: client::Reader,
    protocol: Protocol,
    publishers: usize,
    sh: Arc<Shared>,
    hist: crate::SharedHist,
    mut stop: tokio::sync::watch::Receiver<bool>,
) -> Result<SubStats> {
    let (mut rd, mut wr) = s.split();
    let mut st = SubStats {
        received: 0,
        duplicates: 0,
    };
    let mut lat = Vec::new();
    // Deliveries from one publisher on one topic arrive in order, so a sequence number not
    // above the last one seen is a duplicate.
    let mut last: Vec<i64> = vec![-1; publishers];
    let mut packets = Vec::new();
    let mut acks = Vec::new();
    loop {
        tokio::select! {
            res = r.read_batch(&mut rd, protocol, &mut packets) => {
                if let Err(e) = res {
                    if *stop.borrow() { break; }
                    return Err(e);
                }
                let now = now_ns();
                for p in packets.drain(..) {
                    match p {
                        Packet::Publish(p) => {
                            match p.qos {
                                QoS::AtMostOnce => {}
                                QoS::AtLeastOnce => Packet::PubAck(PubAck { packet_id: p.packet_id, code: 0, properties: Properties::default() }).encode(protocol, &mut acks),
                                QoS::ExactlyOnce => Packet::PubRec(PubAck { packet_id: p.packet_id, code: 0, properties: Properties::default() }).encode(protocol, &mut acks),
                            }
                            let Some((t, pb, seq)) = client::read_header(&p.payload) else { continue };
                            sh.received.fetch_add(1, Relaxed);
                            let Some(l) = last.get_mut(pb as usize) else { continue };
                            if (seq as i64) <= *l {
                                st.duplicates += 1;
                                continue;
                            }
                            *l = seq as i64;
                            if t >= sh.window_start_ns && t < sh.window_end_ns {
                                st.received += 1;
                                lat.push(now.saturating_sub(t) / 1000);
                            }
                        }
                        Packet::PubRel(a) => Packet::PubComp(PubAck { packet_id: a.packet_id, code: 0, properties: Properties::default() }).encode(protocol, &mut acks),
                        _ => {}
                    }
                }
                crate::record_all(&hist, &mut lat);
                if !acks.is_empty() {
                    wr.write_all(&acks).await?;
                    acks.clear();
                }
            }
            _ = stop.changed() => break,
        }
    }
    Ok(st)
}
