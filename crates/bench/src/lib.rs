//! `ballast bench`: load generators that drive any MQTT broker over real sockets, and the
//! experiments of the seed documents. Each scenario prints a table, can write its result as
//! JSON (`--out`), and draws a chart (SVG) where a picture says more.

pub mod chart;
pub mod client;
pub mod conns;
pub mod ladder;
pub mod p2p;
pub mod pubsub;
pub mod steal;

use std::path::PathBuf;
use std::sync::OnceLock;
use std::time::Instant;

use anyhow::Result;
use hdrhistogram::Histogram;
use serde::Serialize;

static EPOCH: OnceLock<Instant> = OnceLock::new();

/// Nanoseconds since the first call in this process: the send timestamp in payloads (sender
/// and receiver share the process, so one monotonic clock serves both).
pub fn now_ns() -> u64 {
    EPOCH.get_or_init(Instant::now).elapsed().as_nanos() as u64
}

/// One latency histogram (microseconds, 1 us to 1 h, 3 significant digits) shared by all the
/// receiving tasks of a run. One histogram of this range takes ~190 KB, too much to give each
/// of thousands of connections its own; receivers record into it once per read batch.
pub type SharedHist = std::sync::Arc<std::sync::Mutex<Histogram<u64>>>;

pub fn shared_hist() -> SharedHist {
    let h = Histogram::new_with_bounds(1, 3_600_000_000, 3).expect("valid histogram bounds");
    std::sync::Arc::new(std::sync::Mutex::new(h))
}

/// Records latencies (microseconds) into the shared histogram.
pub fn record_all(h: &SharedHist, us: &mut Vec<u64>) {
    if us.is_empty() {
        return;
    }
    let mut h = h.lock().unwrap_or_else(|e| e.into_inner());
    for v in us.drain(..) {
        h.saturating_record(v.max(1));
    }
}

/// Latency percentiles in milliseconds.
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct Latency {
    pub count: u64,
    pub mean_ms: f64,
    pub p50_ms: f64,
    pub p90_ms: f64,
    pub p99_ms: f64,
    pub p999_ms: f64,
    pub max_ms: f64,
}

impl Latency {
    /// From a histogram of microseconds.
    pub fn from_hist(h: &Histogram<u64>) -> Latency {
        if h.is_empty() {
            return Latency::default();
        }
        let ms = |us: u64| us as f64 / 1000.0;
        Latency {
            count: h.len(),
            mean_ms: h.mean() / 1000.0,
            p50_ms: ms(h.value_at_quantile(0.50)),
            p90_ms: ms(h.value_at_quantile(0.90)),
            p99_ms: ms(h.value_at_quantile(0.99)),
            p999_ms: ms(h.value_at_quantile(0.999)),
            max_ms: ms(h.max()),
        }
    }
}

#[derive(Debug, clap::Subcommand)]
pub enum Scenario {
    /// P publishers, S subscribers, one topic layout, at a fixed rate or unthrottled.
    Pubsub {
        #[command(flatten)]
        args: pubsub::PubSubArgs,
        #[command(flatten)]
        out: Output,
    },
    /// `pubsub` at rising rates: the highest rate the broker sustains (max sustainable
    /// throughput).
    Ladder {
        #[command(flatten)]
        args: ladder::LadderArgs,
        #[command(flatten)]
        out: Output,
    },
    /// N idle connections: connect rate and, given --pid, broker memory per connection.
    Conns {
        #[command(flatten)]
        args: conns::ConnsArgs,
        #[command(flatten)]
        out: Output,
    },
    /// The Apus experiment: N clients each send one message a second to a random other.
    P2p {
        #[command(flatten)]
        args: p2p::P2pArgs,
        #[command(flatten)]
        out: Output,
    },
}

#[derive(Debug, Clone, clap::Args)]
pub struct Output {
    /// Write the result as JSON to this file.
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Write the chart (SVG) to this file; defaults to the JSON path with `.svg`.
    #[arg(long)]
    pub chart: Option<PathBuf>,
}

impl Output {
    fn write_json(&self, v: &impl Serialize) -> Result<()> {
        if let Some(p) = &self.out {
            std::fs::write(p, serde_json::to_string_pretty(v)?)?;
            eprintln!("wrote {}", p.display());
        }
        Ok(())
    }

    fn chart_path(&self) -> Option<PathBuf> {
        self.chart
            .clone()
            .or_else(|| self.out.as_ref().map(|p| p.with_extension("svg")))
    }
}

/// Runs a scenario on a tokio runtime of its own.
pub fn run(s: Scenario) -> Result<()> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    rt.block_on(async move {
        match s {
            Scenario::Pubsub { args, out } => {
                let r = pubsub::run(&args).await?;
                print_pubsub(&r);
                out.write_json(&r)
            }
            Scenario::Ladder { args, out } => {
                let r = ladder::run(&args).await?;
                ladder::print(&r);
                out.write_json(&r)?;
                if let Some(p) = out.chart_path() {
                    chart::ladder(&r, &p)?;
                    eprintln!("wrote {}", p.display());
                }
                Ok(())
            }
            Scenario::Conns { args, out } => {
                let r = conns::run(&args).await?;
                conns::print(&r);
                out.write_json(&r)?;
                if let Some(p) = out.chart_path() {
                    chart::conns(&r, &p)?;
                    eprintln!("wrote {}", p.display());
                }
                Ok(())
            }
            Scenario::P2p { args, out } => {
                let r = p2p::run(&args).await?;
                p2p::print(&r);
                out.write_json(&r)
            }
        }
    })
}

pub fn print_pubsub(r: &pubsub::PubSubResult) {
    let a = &r.args;
    println!(
        "pubsub {:?} P={} S={} qos={} payload={}B rate={} duration={}s",
        a.layout,
        a.publishers,
        a.subscribers,
        a.qos,
        a.payload,
        if a.rate == 0 {
            "max".to_string()
        } else {
            a.rate.to_string()
        },
        a.duration
    );
    println!("  sent        {:>12}   ({:.0} msg/s)", r.sent, r.send_rate);
    println!("  expected    {:>12}", r.expected);
    println!(
        "  received    {:>12}   ({:.0} deliveries/s, {:.3}%)",
        r.received,
        r.delivery_rate,
        r.delivered_ratio * 100.0
    );
    println!("  lost        {:>12}", r.lost);
    println!("  duplicates  {:>12}", r.duplicates);
    let l = &r.latency;
    println!(
        "  latency ms  p50 {:.3}  p90 {:.3}  p99 {:.3}  p99.9 {:.3}  max {:.3}  mean {:.3}",
        l.p50_ms, l.p90_ms, l.p99_ms, l.p999_ms, l.max_ms, l.mean_ms
    );
    if !r.steal_pct.is_empty() {
        let per_cpu: Vec<String> = r.steal_pct.iter().map(|p| format!("{p:.1}")).collect();
        println!("  host steal  {}% per CPU", per_cpu.join(" / "));
    }
}
