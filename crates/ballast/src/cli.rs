//! The command line. Every flag has a doc comment: clap turns them into `--help`.

use std::net::SocketAddr;
use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

/// Ballast: an MQTT broker for IoT fleets.
///
/// One binary runs every part of Ballast; each part is a subcommand. `ballast serve` runs a
/// complete single node with no configuration at all: MQTT on 1883, MQTT over WebSocket on
/// 8083 (path /mqtt), HTTP (/healthz, /metrics) on 8080, data in ./data.
#[derive(Debug, Parser)]
#[command(name = "ballast", version, arg_required_else_help = true)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run one broker node: MQTT over TCP and WebSocket, and HTTP for /healthz and /metrics.
    ///
    /// Settings come from the defaults, then the --config file, then RUST_LOG (log level
    /// only), then the flags: a later source wins. SIGTERM or SIGINT shuts the node down
    /// gracefully (MQTT 5 clients get DISCONNECT 0x8B) and exits 0. A bad config file or flag
    /// value exits 2 with a message naming the key and the file line.
    Serve(ServeArgs),
    /// Drive an MQTT broker (Ballast or any other) with a load scenario over real sockets:
    /// prints a table, writes JSON with --out and an SVG chart where one helps.
    ///
    /// Progress goes to stderr, results to stdout. See docs/BENCHMARKS.md for the method and
    /// bench/compare.sh for side-by-side runs against other brokers.
    Bench {
        #[command(subcommand)]
        scenario: ballast_bench::Scenario,
    },
}

#[derive(Debug, Clone, Default, Args)]
pub struct ServeArgs {
    /// TOML config file; every key is listed with its default in docs/ballast.example.toml.
    /// Flags override values from the file.
    #[arg(long, short = 'c', value_name = "FILE")]
    pub config: Option<PathBuf>,

    /// Address for MQTT over TCP [default: 0.0.0.0:1883; file key: broker.mqtt].
    #[arg(long, value_name = "ADDR")]
    pub mqtt: Option<SocketAddr>,

    /// Address for MQTT over WebSocket, path /mqtt [default: 0.0.0.0:8083; file key:
    /// broker.ws].
    #[arg(long, value_name = "ADDR")]
    pub ws: Option<SocketAddr>,

    /// Address for HTTP: GET /healthz and GET /metrics (Prometheus) [default: 0.0.0.0:8080;
    /// file key: http].
    #[arg(long, value_name = "ADDR")]
    pub http: Option<SocketAddr>,

    /// Directory for durable state, created if missing [default: ./data; file key: data_dir].
    #[arg(long, value_name = "DIR")]
    pub data: Option<PathBuf>,

    /// Log filter: a level (error, warn, info, debug, trace) or tracing directives such as
    /// "info,ballast_broker=debug". Overrides RUST_LOG, which overrides the file [default:
    /// info; file key: log_level].
    #[arg(long, value_name = "LEVEL")]
    pub log_level: Option<String>,

    /// Event-loop threads for MQTT connections; 0 means one per core [default: 0; file key:
    /// broker.workers].
    #[arg(long, value_name = "N")]
    pub workers: Option<usize>,

    /// How durably QoS 1/2 messages for persistent sessions, their subscriptions and retained
    /// messages are written before the client is told they are taken: fsync (survives power
    /// loss), os (survives a crash of the broker), none (memory only) [default: fsync; file
    /// key: broker.store.durability].
    #[arg(long, value_name = "MODE", value_parser = parse_durability)]
    pub durability: Option<ballast_broker::Durability>,
}

fn parse_durability(s: &str) -> Result<ballast_broker::Durability, String> {
    match s {
        "fsync" => Ok(ballast_broker::Durability::Fsync),
        "os" => Ok(ballast_broker::Durability::Os),
        "none" => Ok(ballast_broker::Durability::None),
        _ => Err("expected fsync, os or none".to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn cli_definition_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn parses_every_serve_flag() {
        let cli = Cli::try_parse_from([
            "ballast",
            "serve",
            "--config",
            "b.toml",
            "--mqtt",
            "127.0.0.1:1",
            "--ws",
            "127.0.0.1:2",
            "--http",
            "127.0.0.1:3",
            "--data",
            "/tmp/d",
            "--log-level",
            "debug",
            "--workers",
            "3",
        ])
        .unwrap();
        let Command::Serve(a) = cli.command else {
            panic!("parsed as another subcommand")
        };
        assert_eq!(a.config, Some(PathBuf::from("b.toml")));
        assert_eq!(a.mqtt, Some("127.0.0.1:1".parse().unwrap()));
        assert_eq!(a.ws, Some("127.0.0.1:2".parse().unwrap()));
        assert_eq!(a.http, Some("127.0.0.1:3".parse().unwrap()));
        assert_eq!(a.data, Some(PathBuf::from("/tmp/d")));
        assert_eq!(a.log_level.as_deref(), Some("debug"));
        assert_eq!(a.workers, Some(3));
    }

    #[test]
    fn bad_flag_value_is_a_usage_error() {
        let err = Cli::try_parse_from(["ballast", "serve", "--mqtt", "nowhere"]).unwrap_err();
        assert_eq!(err.exit_code(), 2);
    }
}
