//! `ladder`: `pubsub` at rising rates; the highest rate at which the broker delivers at
//! least 99.9% of messages with p99 latency under the bound is its max sustainable
//! throughput.

use anyhow::Result;
use serde::Serialize;

use crate::pubsub::{self, PubSubArgs, PubSubResult};
use crate::steal::max_percent;

#[derive(Debug, Clone, clap::Args, Serialize)]
pub struct LadderArgs {
    #[command(flatten)]
    pub pubsub: PubSubArgs,
    /// First rate tried (messages/s published, all publishers together).
    #[arg(long, default_value_t = 10_000)]
    pub start_rate: u64,
    /// Each step multiplies the rate by this.
    #[arg(long, default_value_t = 1.5)]
    pub factor: f64,
    /// Explicit rates to try instead of start/factor (comma-separated).
    #[arg(long, value_delimiter = ',')]
    pub rates: Vec<u64>,
    /// Highest rate tried.
    #[arg(long, default_value_t = 5_000_000)]
    pub max_rate: u64,
    /// A step passes only if p99 latency stays under this many milliseconds.
    #[arg(long, default_value_t = 50.0)]
    pub p99_bound_ms: f64,
    /// ... and at least this fraction of deliveries arrive.
    #[arg(long, default_value_t = 0.999)]
    pub min_delivered: f64,
    /// Failed steps in a row before stopping.
    #[arg(long, default_value_t = 2)]
    pub patience: u32,
    /// A step that fails while the hypervisor took more than this percent of some CPU's
    /// time (host steal) is measured again: its figure would be the host's, not the broker's.
    #[arg(long, default_value_t = 5.0)]
    pub steal_limit: f64,
    /// How many times a step is measured again for steal before its failure stands.
    #[arg(long, default_value_t = 2)]
    pub steal_retries: u32,
}

#[derive(Debug, Clone, Serialize)]
pub struct Step {
    pub rate: u64,
    pub passed: bool,
    pub result: PubSubResult,
    /// Earlier attempts at this rate that failed under host steal above the limit, kept
    /// so that the retry is visible.
    pub noisy_attempts: Vec<PubSubResult>,
}

#[derive(Debug, Clone, Serialize)]
pub struct LadderResult {
    pub args: LadderArgs,
    pub steps: Vec<Step>,
    /// Highest passing rate (published messages/s); 0 if none passed.
    pub max_sustainable_rate: u64,
    /// Deliveries per second at that rate.
    pub max_sustainable_deliveries: f64,
}

pub async fn run(a: &LadderArgs) -> Result<LadderResult> {
    let mut rates: Vec<u64> = a.rates.clone();
    if rates.is_empty() {
        let mut r = a.start_rate.max(1) as f64;
        while r as u64 <= a.max_rate {
            rates.push(r as u64);
            r *= a.factor.max(1.05);
        }
    }
    let mut steps: Vec<Step> = Vec::new();
    let mut failures = 0;
    for (i, rate) in rates.iter().enumerate() {
        eprintln!("step {}/{}: {} msg/s", i + 1, rates.len(), rate);
        let mut args = a.pubsub.clone();
        args.rate = *rate;
        let mut noisy_attempts = Vec::new();
        let (result, passed) = loop {
            let result = pubsub::run(&args).await?;
            let passed = result.delivered_ratio >= a.min_delivered
                && result.latency.p99_ms <= a.p99_bound_ms
                // The generator must have offered the rate asked for (else it is the
                // bottleneck).
                && result.send_rate >= *rate as f64 * 0.95;
            let steal = max_percent(&result.steal_pct);
            eprintln!(
                "  -> {} delivered {:.3}%  p99 {:.2} ms  sent {:.0}/s  host steal {:.1}%",
                if passed { "pass" } else { "FAIL" },
                result.delivered_ratio * 100.0,
                result.latency.p99_ms,
                result.send_rate,
                steal
            );
            if passed || steal <= a.steal_limit || noisy_attempts.len() as u32 >= a.steal_retries {
                break (result, passed);
            }
            eprintln!("     steal above {}%: measuring again", a.steal_limit);
            noisy_attempts.push(result);
        };
        steps.push(Step {
            rate: *rate,
            passed,
            result,
            noisy_attempts,
        });
        if passed {
            failures = 0;
        } else {
            failures += 1;
            if failures >= a.patience {
                break;
            }
        }
    }
    let best = steps.iter().filter(|s| s.passed).max_by_key(|s| s.rate);
    Ok(LadderResult {
        args: a.clone(),
        max_sustainable_rate: best.map(|s| s.rate).unwrap_or(0),
        max_sustainable_deliveries: best.map(|s| s.result.delivery_rate).unwrap_or(0.0),
        steps,
    })
}

pub fn print(r: &LadderResult) {
    println!(
        "{:>10} {:>6} {:>12} {:>12} {:>9} {:>9} {:>9} {:>7} {:>7}",
        "rate", "pass", "sent/s", "deliv/s", "deliv%", "p50 ms", "p99 ms", "steal%", "retries"
    );
    for s in &r.steps {
        println!(
            "{:>10} {:>6} {:>12.0} {:>12.0} {:>9.3} {:>9.3} {:>9.3} {:>7.1} {:>7}",
            s.rate,
            if s.passed { "yes" } else { "no" },
            s.result.send_rate,
            s.result.delivery_rate,
            s.result.delivered_ratio * 100.0,
            s.result.latency.p50_ms,
            s.result.latency.p99_ms,
            max_percent(&s.result.steal_pct),
            s.noisy_attempts.len()
        );
    }
    println!(
        "max sustainable throughput: {} msg/s published, {:.0} deliveries/s",
        r.max_sustainable_rate, r.max_sustainable_deliveries
    );
}
