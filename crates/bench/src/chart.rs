//! SVG charts of results, drawn with plotters.

use std::path::Path;

use anyhow::{anyhow, Result};
use plotters::prelude::*;

use crate::conns::ConnsResult;
use crate::ladder::LadderResult;

fn err<E: std::fmt::Debug>(e: E) -> anyhow::Error {
    anyhow!("chart: {e:?}")
}

/// Latency (p50, p99) against offered rate, one point per ladder step; failed steps in red.
pub fn ladder(r: &LadderResult, path: &Path) -> Result<()> {
    let root = SVGBackend::new(path, (900, 540)).into_drawing_area();
    root.fill(&WHITE).map_err(err)?;
    let max_rate = r.steps.iter().map(|s| s.rate).max().unwrap_or(1) as f64;
    let max_lat = r
        .steps
        .iter()
        .map(|s| s.result.latency.p99_ms)
        .fold(1.0f64, f64::max)
        .min(r.args.p99_bound_ms * 4.0);
    let a = &r.args.pubsub;
    let title = format!(
        "{:?} P={} S={} QoS {} {} B: max sustainable {} msg/s",
        a.layout, a.publishers, a.subscribers, a.qos, a.payload, r.max_sustainable_rate
    );
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 20))
        .margin(15)
        .x_label_area_size(45)
        .y_label_area_size(60)
        .build_cartesian_2d(0f64..max_rate * 1.05, 0f64..max_lat * 1.1)
        .map_err(err)?;
    chart
        .configure_mesh()
        .x_desc("offered rate (msg/s)")
        .y_desc("latency (ms)")
        .draw()
        .map_err(err)?;
    let series = |f: fn(&crate::Latency) -> f64| -> Vec<(f64, f64)> {
        r.steps
            .iter()
            .map(|s| (s.rate as f64, f(&s.result.latency).min(max_lat * 1.1)))
            .collect()
    };
    chart
        .draw_series(LineSeries::new(series(|l| l.p50_ms), &BLUE))
        .map_err(err)?
        .label("p50")
        .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], BLUE));
    chart
        .draw_series(LineSeries::new(series(|l| l.p99_ms), &MAGENTA))
        .map_err(err)?
        .label("p99")
        .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], MAGENTA));
    chart
        .draw_series(r.steps.iter().map(|s| {
            let c = if s.passed {
                GREEN.filled()
            } else {
                RED.filled()
            };
            Circle::new(
                (s.rate as f64, s.result.latency.p99_ms.min(max_lat * 1.1)),
                4,
                c,
            )
        }))
        .map_err(err)?;
    chart
        .draw_series(std::iter::once(PathElement::new(
            vec![
                (0.0, r.args.p99_bound_ms),
                (max_rate * 1.05, r.args.p99_bound_ms),
            ],
            BLACK.mix(0.4),
        )))
        .map_err(err)?
        .label("p99 bound")
        .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], BLACK.mix(0.4)));
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .draw()
        .map_err(err)?;
    root.present().map_err(err)?;
    Ok(())
}

/// Broker memory per connection against the number of idle connections.
pub fn conns(r: &ConnsResult, path: &Path) -> Result<()> {
    let root = SVGBackend::new(path, (900, 540)).into_drawing_area();
    root.fill(&WHITE).map_err(err)?;
    let pts: Vec<(f64, f64)> = r
        .steps
        .iter()
        .filter_map(|s| s.kib_per_connection.map(|k| (s.connections as f64, k)))
        .collect();
    let max_x = r.steps.iter().map(|s| s.connections).max().unwrap_or(1) as f64;
    let max_y = pts.iter().map(|p| p.1).fold(0.5f64, f64::max);
    let mut chart = ChartBuilder::on(&root)
        .caption("broker memory per idle connection", ("sans-serif", 20))
        .margin(15)
        .x_label_area_size(45)
        .y_label_area_size(60)
        .build_cartesian_2d(0f64..max_x * 1.05, 0f64..max_y * 1.2)
        .map_err(err)?;
    chart
        .configure_mesh()
        .x_desc("idle connections")
        .y_desc("KiB per connection (RSS delta / connections)")
        .draw()
        .map_err(err)?;
    chart
        .draw_series(LineSeries::new(pts.clone(), &BLUE))
        .map_err(err)?;
    chart
        .draw_series(pts.iter().map(|p| Circle::new(*p, 4, BLUE.filled())))
        .map_err(err)?;
    root.present().map_err(err)?;
    Ok(())
}
