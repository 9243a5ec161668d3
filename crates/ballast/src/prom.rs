//! Prometheus exposition of the broker's counters.
//!
//! The broker keeps its own per-thread counters (cheap on the hot path) and hands out a summed
//! `MetricsSnapshot`. Rather than mirror every counter into `prometheus-client` metrics, a
//! `Collector` takes a snapshot at scrape time and encodes it, so a scrape always shows the
//! broker's numbers as they are and the hot path never touches a Prometheus type.

use std::fmt::{self, Write as _};
use std::sync::Arc;

use ballast_broker::MetricsSnapshot;
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::registry::Registry;

/// Where the collector gets a snapshot; `None` once the broker has shut down.
pub type SnapshotSource = Arc<dyn Fn() -> Option<MetricsSnapshot> + Send + Sync>;

pub struct BrokerCollector {
    source: SnapshotSource,
}

impl fmt::Debug for BrokerCollector {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("BrokerCollector")
    }
}

/// A registry holding the broker's metrics; encode it with `encode`.
pub fn registry(source: SnapshotSource) -> Registry {
    let mut registry = Registry::default();
    registry.register_collector(Box::new(BrokerCollector { source }));
    registry
}

/// The text exposition (OpenMetrics) of `registry`.
pub fn encode(registry: &Registry) -> Result<String, fmt::Error> {
    let mut body = String::new();
    prometheus_client::encoding::text::encode(&mut body, registry)?;
    Ok(body)
}

/// The content type of `encode`'s output.
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

fn counter(e: &mut DescriptorEncoder, name: &str, help: &str, v: u64) -> fmt::Result {
    let c = ConstCounter::new(v);
    c.encode(e.encode_descriptor(name, help, None, c.metric_type())?)
}

fn gauge(e: &mut DescriptorEncoder, name: &str, help: &str, v: u64) -> fmt::Result {
    let g = ConstGauge::new(i64::try_from(v).unwrap_or(i64::MAX));
    g.encode(e.encode_descriptor(name, help, None, g.metric_type())?)
}

/// A counter with one label, one sample per `(label value, count)`.
fn labelled_counter(
    e: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    label: &'static str,
    samples: impl IntoIterator<Item = (String, u64)>,
) -> fmt::Result {
    let proto = ConstCounter::new(0u64);
    let mut family = e.encode_descriptor(name, help, None, proto.metric_type())?;
    for (value, count) in samples {
        let labels = [(label, value.as_str())];
        ConstCounter::new(count).encode(family.encode_family(&labels)?)?;
    }
    Ok(())
}

impl Collector for BrokerCollector {
    fn encode(&self, mut e: DescriptorEncoder) -> fmt::Result {
        let Some(s) = (self.source)() else {
            return Ok(());
        };
        let e = &mut e;
        // Counters: the encoder appends `_total`.
        counter(
            e,
            "ballast_messages_received",
            "PUBLISH packets received from clients",
            s.messages_received,
        )?;
        counter(
            e,
            "ballast_messages_sent",
            "PUBLISH packets sent to clients",
            s.messages_sent,
        )?;
        counter(
            e,
            "ballast_bytes_received",
            "Bytes read from client connections",
            s.bytes_received,
        )?;
        counter(
            e,
            "ballast_bytes_sent",
            "Bytes written to client connections",
            s.bytes_sent,
        )?;
        counter(
            e,
            "ballast_packets_received",
            "MQTT packets received from clients",
            s.packets_received,
        )?;
        counter(
            e,
            "ballast_packets_sent",
            "MQTT packets sent to clients",
            s.packets_sent,
        )?;
        counter(
            e,
            "ballast_connections_accepted",
            "Connections accepted",
            s.connections_accepted,
        )?;
        labelled_counter(
            e,
            "ballast_connections_closed",
            "Connections closed, by reason",
            "reason",
            s.closed.iter().map(|(r, n)| (r.to_string(), *n)),
        )?;
        labelled_counter(
            e,
            "ballast_limit_hits",
            "Times a configured limit was hit, by limit (key under broker.limits)",
            "limit",
            s.limit_hits.iter().map(|(l, n)| (l.to_string(), *n)),
        )?;
        labelled_counter(
            e,
            "ballast_protocol_errors",
            "Malformed packets and protocol violations, by MQTT 5 reason code",
            "code",
            s.protocol_errors
                .iter()
                .map(|(code, n)| (hex_code(*code), *n)),
        )?;
        counter(
            e,
            "ballast_qos0_dropped",
            "QoS 0 messages dropped because a subscriber's outbox was full",
            s.qos0_dropped,
        )?;
        counter(
            e,
            "ballast_messages_dropped",
            "QoS 1/2 messages dropped because a session's queue was full",
            s.messages_dropped,
        )?;
        counter(
            e,
            "ballast_messages_expired",
            "Messages whose message expiry interval passed before delivery",
            s.messages_expired,
        )?;
        gauge(
            e,
            "ballast_connections",
            "Connections open now",
            s.connections,
        )?;
        gauge(
            e,
            "ballast_sessions",
            "Sessions held now, connected or not",
            s.sessions,
        )?;
        gauge(
            e,
            "ballast_retained_messages",
            "Retained messages held now",
            s.retained_messages,
        )?;
        gauge(
            e,
            "ballast_subscriptions",
            "Subscriptions held now",
            s.subscriptions,
        )?;
        counter(
            e,
            "ballast_store_refused",
            "QoS 1/2 publishes refused because the store could not write them",
            s.store_refused,
        )?;
        if let Some(st) = &s.store {
            counter(
                e,
                "ballast_store_commits",
                "Groups of writes committed to the store (one sync each with fsync)",
                st.commits,
            )?;
            counter(
                e,
                "ballast_store_ops",
                "Writes committed to the store",
                st.ops,
            )?;
            counter(
                e,
                "ballast_store_failed_commits",
                "Groups of writes the store failed to commit",
                st.failed_commits,
            )?;
            counter(
                e,
                "ballast_store_failed_ops",
                "Writes lost in failed commits",
                st.failed_ops,
            )?;
            counter(
                e,
                "ballast_store_elided_ops",
                "Writes that cancelled out within their group (queued and acknowledged before the commit) and were not written",
                st.elided_ops,
            )?;
            counter(
                e,
                "ballast_store_commit_microseconds",
                "Time spent committing to the store",
                st.commit_micros,
            )?;
            gauge(
                e,
                "ballast_store_backlog_ops",
                "Writes waiting for the store",
                st.backlog_ops,
            )?;
            gauge(
                e,
                "ballast_store_backlog_bytes",
                "Bytes of writes waiting for the store",
                st.backlog_bytes,
            )?;
        }
        Ok(())
    }
}

fn hex_code(code: u8) -> String {
    let mut s = String::with_capacity(4);
    let _ = write!(s, "0x{code:02X}");
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encodes_every_metric_of_the_snapshot() {
        let snapshot = MetricsSnapshot {
            connections: 3,
            sessions: 4,
            retained_messages: 5,
            subscriptions: 6,
            connections_accepted: 7,
            messages_received: 8,
            messages_sent: 9,
            bytes_received: 10,
            bytes_sent: 11,
            packets_received: 12,
            packets_sent: 13,
            qos0_dropped: 14,
            messages_dropped: 15,
            messages_expired: 16,
            closed: vec![("peer_closed", 2), ("client_disconnect", 1)],
            limit_hits: vec![("max_packet_size", 1)],
            protocol_errors: vec![(0x81, 1)],
            store_refused: 17,
            store: Some(ballast_broker::StoreSnapshot {
                commits: 18,
                ops: 19,
                failed_commits: 20,
                failed_ops: 21,
                elided_ops: 25,
                commit_micros: 22,
                backlog_ops: 23,
                backlog_bytes: 24,
            }),
        };
        let source: SnapshotSource = Arc::new(move || Some(snapshot.clone()));
        let text = encode(&registry(source)).unwrap();
        for line in [
            "ballast_messages_received_total 8",
            "ballast_messages_sent_total 9",
            "ballast_bytes_received_total 10",
            "ballast_bytes_sent_total 11",
            "ballast_packets_received_total 12",
            "ballast_packets_sent_total 13",
            "ballast_connections_accepted_total 7",
            "ballast_connections_closed_total{reason=\"peer_closed\"} 2",
            "ballast_connections_closed_total{reason=\"client_disconnect\"} 1",
            "ballast_limit_hits_total{limit=\"max_packet_size\"} 1",
            "ballast_protocol_errors_total{code=\"0x81\"} 1",
            "ballast_qos0_dropped_total 14",
            "ballast_messages_dropped_total 15",
            "ballast_messages_expired_total 16",
            "ballast_connections 3",
            "ballast_sessions 4",
            "ballast_retained_messages 5",
            "ballast_subscriptions 6",
            "ballast_store_refused_total 17",
            "ballast_store_commits_total 18",
            "ballast_store_ops_total 19",
            "ballast_store_failed_commits_total 20",
            "ballast_store_failed_ops_total 21",
            "ballast_store_elided_ops_total 25",
            "ballast_store_commit_microseconds_total 22",
            "ballast_store_backlog_ops 23",
            "ballast_store_backlog_bytes 24",
            "# TYPE ballast_connections gauge",
            "# TYPE ballast_messages_received counter",
        ] {
            assert!(
                text.lines().any(|l| l == line),
                "missing `{line}` in:\n{text}"
            );
        }
        assert!(text.ends_with("# EOF\n"));
    }

    #[test]
    fn a_stopped_broker_exposes_nothing() {
        let source: SnapshotSource = Arc::new(|| None);
        assert_eq!(encode(&registry(source)).unwrap(), "# EOF\n");
    }
}
