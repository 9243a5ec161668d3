//! Each bench scenario driven against a real broker on ephemeral ports, briefly: the counts it
//! reports must match what was sent.

use ballast_bench::{conns, ladder, p2p, pubsub};
use test_support::start_broker;

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap()
}

fn args(addr: std::net::SocketAddr) -> pubsub::PubSubArgs {
    pubsub::PubSubArgs {
        addr,
        publishers: 3,
        subscribers: 2,
        layout: pubsub::Layout::FanIn,
        qos: 1,
        payload: 64,
        rate: 600,
        duration: 1.0,
        warmup: 0.3,
        protocol: 4,
        window: 16,
        tick_ms: 5,
        id_prefix: "t".into(),
        persistent: false,
        progress: false,
    }
}

#[test]
fn pubsub_into_persistent_sessions_goes_through_the_store_and_ends_them() {
    let dir = tempfile::tempdir().unwrap();
    let b = test_support::start_broker_with(test_support::durable_config(dir.path()));
    let rt = rt();
    for protocol in [4, 5] {
        let mut a = args(b.mqtt);
        a.persistent = true;
        a.protocol = protocol;
        let handled = || {
            let st = b.metrics().store.unwrap();
            st.ops + st.elided_ops
        };
        let before = handled();
        let r = rt.block_on(pubsub::run(&a)).unwrap();
        assert!(r.sent > 0);
        assert_eq!(r.received, r.expected, "protocol {protocol}: {r:?}");
        assert_eq!(r.duplicates, 0);
        // Each delivery went to the store and was removed again when acknowledged (written,
        // or cancelled out within its group).
        let ops = handled() - before;
        assert!(
            ops >= 2 * r.received,
            "protocol {protocol}: {ops} store writes for {r:?}"
        );
        assert!(
            test_support::wait_for(std::time::Duration::from_secs(3), || b.metrics().sessions
                == 0),
            "the run ends its persistent sessions"
        );
    }
}

#[test]
fn pubsub_counts_every_delivery_at_each_qos_and_layout() {
    let b = start_broker();
    let rt = rt();
    for (layout, p, s) in [
        (pubsub::Layout::FanIn, 3, 2),
        (pubsub::Layout::FanOut, 1, 3),
        (pubsub::Layout::Pairwise, 2, 2),
    ] {
        for qos in 0..=2 {
            let mut a = args(b.mqtt);
            a.layout = layout;
            a.publishers = p;
            a.subscribers = s;
            a.qos = qos;
            a.protocol = if qos == 2 { 5 } else { 4 };
            let r = rt.block_on(pubsub::run(&a)).unwrap();
            let per = if layout == pubsub::Layout::Pairwise {
                1
            } else {
                s as u64
            };
            assert!(r.sent > 0, "{layout:?} qos {qos}: nothing sent");
            assert_eq!(r.expected, r.sent * per, "{layout:?} qos {qos}");
            assert_eq!(r.received, r.expected, "{layout:?} qos {qos}: {r:?}");
            assert_eq!(r.lost, 0);
            assert_eq!(r.duplicates, 0);
            assert_eq!(r.latency.count, r.received);
            // 600 msg/s offered for 1 s.
            assert!(
                (400.0..800.0).contains(&r.send_rate),
                "{layout:?} qos {qos}: send rate {}",
                r.send_rate
            );
        }
    }
}

#[test]
fn pubsub_unthrottled_reports_a_rate() {
    let b = start_broker();
    let mut a = args(b.mqtt);
    a.rate = 0;
    a.qos = 0;
    let r = rt().block_on(pubsub::run(&a)).unwrap();
    assert!(r.sent > 1000, "{r:?}");
    assert!(r.received > 0 && r.received <= r.expected);
}

/// A ladder over the rates 200 and 400 that stops at the first failed step.
fn ladder_args(
    pubsub: pubsub::PubSubArgs,
    p99_bound_ms: f64,
    steal_limit: f64,
    steal_retries: u32,
) -> ladder::LadderArgs {
    ladder::LadderArgs {
        pubsub,
        start_rate: 100,
        factor: 2.0,
        rates: vec![200, 400],
        max_rate: 1000,
        p99_bound_ms,
        min_delivered: 0.999,
        patience: 1,
        steal_limit,
        steal_retries,
    }
}

#[test]
fn ladder_steps_up_and_names_the_highest_passing_rate() {
    let b = start_broker();
    let mut p = args(b.mqtt);
    p.duration = 0.6;
    p.warmup = 0.2;
    let a = ladder_args(p, 1000.0, 5.0, 0);
    let r = rt().block_on(ladder::run(&a)).unwrap();
    assert_eq!(r.steps.len(), 2);
    // Host steal is measured per CPU of this machine.
    let cpus = std::fs::read_to_string("/proc/stat")
        .unwrap()
        .lines()
        .filter(|l| l.starts_with("cpu") && !l.starts_with("cpu "))
        .count();
    assert_eq!(r.steps[0].result.steal_pct.len(), cpus);
    assert!(
        r.steps.iter().all(|s| s.passed),
        "{:?}",
        r.steps
            .iter()
            .map(|s| (s.rate, s.passed))
            .collect::<Vec<_>>()
    );
    assert_eq!(r.max_sustainable_rate, 400);
    let dir = std::env::temp_dir().join(format!("ladder-{}.svg", std::process::id()));
    ballast_bench::chart::ladder(&r, &dir).unwrap();
    let svg = std::fs::read_to_string(&dir).unwrap();
    assert!(svg.contains("<svg") && svg.contains("max sustainable 400"));
}

#[test]
fn ladder_measures_a_failed_step_again_under_host_steal() {
    let b = start_broker();
    let mut p = args(b.mqtt);
    p.duration = 0.3;
    p.warmup = 0.1;
    // No step can pass a zero bound, and a negative steal limit counts every failure as noisy:
    // each step is measured 1 + 2 times, and the ladder stops after the first.
    let a = ladder_args(p, 0.0, -1.0, 2);
    let r = rt().block_on(ladder::run(&a)).unwrap();
    assert_eq!(r.steps.len(), 1);
    assert!(!r.steps[0].passed);
    assert_eq!(r.steps[0].noisy_attempts.len(), 2);
    assert!(r.steps[0].noisy_attempts.iter().all(|x| x.sent > 0));
    assert_eq!(r.max_sustainable_rate, 0);
}

#[test]
fn conns_holds_idle_connections_and_measures_memory() {
    let b = start_broker();
    let a = conns::ConnsArgs {
        addr: b.mqtt,
        count: 200,
        steps: 2,
        concurrency: 50,
        keepalive: 600,
        sources: 4,
        pid: Some(std::process::id()),
        settle: 0.2,
        protocol: 4,
        id_prefix: "idle".into(),
    };
    let r = rt().block_on(conns::run(&a)).unwrap();
    assert_eq!(r.connected, 200);
    assert_eq!(r.failed, 0);
    assert_eq!(r.steps.len(), 2);
    assert_eq!(r.steps[1].connections, 200);
    assert!(r.steps[1].rss_kib.is_some() && r.steps[1].kib_per_connection.is_some());
    assert!(test_support::wait_for(
        std::time::Duration::from_secs(5),
        || b.metrics().connections == 0
    ));
}

#[test]
fn p2p_delivers_every_message() {
    let b = start_broker();
    let a = p2p::P2pArgs {
        addr: b.mqtt,
        clients: 20,
        messages: 3,
        interval_ms: 100,
        drain: 0.5,
        qos: 1,
        payload: 32,
        protocol: 5,
        concurrency: 20,
        sources: 2,
    };
    let r = rt().block_on(p2p::run(&a)).unwrap();
    assert_eq!(r.sent, 60);
    assert_eq!(r.received, 60, "{r:?}");
    assert_eq!(r.latency.count, 60);
}
