//! The `ballast serve` config file, and how flags override it.
//!
//! The file is TOML: a few top-level keys for the binary (HTTP address, data directory, log
//! level) and the broker's own `BrokerConfig` under `[broker]` with its `[broker.limits]`.
//! Every error names the key, and the file line when the value came from the file, so an
//! operator never has to guess which of forty settings is wrong.

use std::fmt;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use ballast_broker::BrokerConfig;
use serde::{Deserialize, Serialize};

use crate::cli::ServeArgs;

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct ServeConfig {
    /// Address of the HTTP listener (GET /healthz, GET /metrics).
    pub http: SocketAddr,
    /// Directory for durable state; created at start if missing.
    pub data_dir: PathBuf,
    /// `tracing` filter directives, e.g. "info" or "info,ballast_broker=debug".
    pub log_level: String,
    /// The broker node: listeners, workers and `[broker.limits]`.
    pub broker: BrokerConfig,
}

impl Default for ServeConfig {
    fn default() -> Self {
        ServeConfig {
            http: SocketAddr::from(([0, 0, 0, 0], 8080)),
            data_dir: PathBuf::from("./data"),
            log_level: "info".to_string(),
            broker: BrokerConfig::default(),
        }
    }
}

/// A config value that cannot be used. `Display` gives the whole message an operator sees:
/// where the value came from, the key, and what is wrong with it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigFileError {
    /// The file as given on the command line, or the flag that set the value.
    pub origin: Option<String>,
    /// 1-based line in the file, when the value came from the file.
    pub line: Option<usize>,
    /// Full dotted key, e.g. `broker.limits.max_inflight`.
    pub key: Option<String>,
    pub message: String,
    /// The offending line of the file, shown under the message.
    pub source_line: Option<String>,
}

impl fmt::Display for ConfigFileError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "config error")?;
        match &self.origin {
            Some(flag) if flag.starts_with("--") => write!(f, " from {flag}")?,
            Some(file) => write!(f, " in {file}")?,
            None => {}
        }
        if let Some(line) = self.line {
            write!(f, " line {line}")?;
        }
        if let Some(key) = &self.key {
            write!(f, ", key `{key}`")?;
        }
        write!(f, ": {}", self.message)?;
        if let (Some(line), Some(text)) = (self.line, &self.source_line) {
            write!(f, "\n  {line:>4} | {text}")?;
        }
        Ok(())
    }
}

impl std::error::Error for ConfigFileError {}

/// The configuration `serve` runs with: defaults, then the file, then RUST_LOG, then flags.
/// `rust_log` is the RUST_LOG variable, passed in so tests do not depend on the environment.
pub fn load(args: &ServeArgs, rust_log: Option<String>) -> Result<ServeConfig, ConfigFileError> {
    let (mut config, file) = match &args.config {
        Some(path) => {
            let text = std::fs::read_to_string(path).map_err(|e| ConfigFileError {
                origin: Some(path.display().to_string()),
                line: None,
                key: None,
                message: format!("cannot read the file: {e}"),
                source_line: None,
            })?;
            (parse(&text, path)?, Some((path.as_path(), text)))
        }
        None => (ServeConfig::default(), None),
    };
    apply_overrides(&mut config, args, rust_log);
    validate(&config).map_err(|(key, message)| {
        // Say where the bad value came from: a flag if one set it, else the file's line.
        if let Some(flag) = flag_for_key(&key, args) {
            return ConfigFileError {
                origin: Some(flag.to_string()),
                line: None,
                key: Some(key),
                message,
                source_line: None,
            };
        }
        let (origin, line, source_line) = match &file {
            Some((path, text)) => {
                let line = find_key_line(text, &key);
                let source_line = line
                    .and_then(|l| text.lines().nth(l - 1))
                    .map(str::to_string);
                (Some(path.display().to_string()), line, source_line)
            }
            None => (None, None, None),
        };
        ConfigFileError {
            origin,
            line,
            key: Some(key),
            message,
            source_line,
        }
    })?;
    Ok(config)
}

/// Parses a config file's text; `path` is only used in messages.
pub fn parse(text: &str, path: &Path) -> Result<ServeConfig, ConfigFileError> {
    toml::from_str(text).map_err(|e| {
        let line = e.span().map(|span| line_of(text, span.start));
        let source_line = line
            .and_then(|l| text.lines().nth(l - 1))
            .map(str::to_string);
        ConfigFileError {
            origin: Some(path.display().to_string()),
            line,
            key: line.and_then(|l| key_at_line(text, l)),
            message: e.message().trim().to_string(),
            source_line,
        }
    })
}

/// Flags win over the file; RUST_LOG wins over the file's `log_level` but not over the flag.
pub fn apply_overrides(config: &mut ServeConfig, args: &ServeArgs, rust_log: Option<String>) {
    if let Some(addr) = args.mqtt {
        config.broker.mqtt = Some(addr);
    }
    if let Some(addr) = args.ws {
        config.broker.ws = Some(addr);
    }
    if let Some(addr) = args.http {
        config.http = addr;
    }
    if let Some(dir) = &args.data {
        config.data_dir = dir.clone();
    }
    if let Some(n) = args.workers {
        config.broker.workers = n;
    }
    if let Some(d) = args.durability {
        config.broker.store.durability = d;
    }
    if let Some(level) = args
        .log_level
        .clone()
        .or(rust_log.filter(|s| !s.trim().is_empty()))
    {
        config.log_level = level;
    }
}

/// Checks what serde cannot: the broker's own rules, and ours. The key is the full dotted
/// path in the file.
pub fn validate(config: &ServeConfig) -> Result<(), (String, String)> {
    if let Err(e) = tracing_subscriber::EnvFilter::builder().parse(&config.log_level) {
        return Err(("log_level".to_string(), format!("not a log filter: {e}")));
    }
    if config.data_dir.as_os_str().is_empty() {
        return Err(("data_dir".to_string(), "must not be empty".to_string()));
    }
    config
        .broker
        .validate()
        .map_err(|e| (format!("broker.{}", e.key), e.reason))
}

/// The flag that set `key`, if one did.
fn flag_for_key(key: &str, args: &ServeArgs) -> Option<&'static str> {
    match key {
        "broker.mqtt" if args.mqtt.is_some() => Some("--mqtt"),
        "broker.ws" if args.ws.is_some() => Some("--ws"),
        "broker.workers" if args.workers.is_some() => Some("--workers"),
        "broker.store.durability" if args.durability.is_some() => Some("--durability"),
        "http" if args.http.is_some() => Some("--http"),
        "data_dir" if args.data.is_some() => Some("--data"),
        "log_level" if args.log_level.is_some() => Some("--log-level"),
        _ => None,
    }
}

/// 1-based line of byte offset `pos`.
fn line_of(text: &str, pos: usize) -> usize {
    let pos = pos.min(text.len());
    text.as_bytes()[..pos]
        .iter()
        .filter(|b| **b == b'\n')
        .count()
        + 1
}

/// Splits a line into its table header (`[a.b]` -> "a.b") or its key (`k = v` -> "k").
enum LineKind<'a> {
    Table(String),
    Key(&'a str),
    Other,
}

fn classify(line: &str) -> LineKind<'_> {
    let t = line.trim();
    if let Some(rest) = t.strip_prefix('[') {
        let name = rest.trim_start_matches('[');
        if let Some(end) = name.find(']') {
            let name: String = name[..end].chars().filter(|c| !c.is_whitespace()).collect();
            return LineKind::Table(name);
        }
        return LineKind::Other;
    }
    match t.split_once('=') {
        Some((k, _)) if !k.trim().is_empty() && !t.starts_with('#') => {
            LineKind::Key(k.trim().trim_matches('"'))
        }
        _ => LineKind::Other,
    }
}

/// The full dotted key written on line `line` (1-based), or the table a header line names.
fn key_at_line(text: &str, line: usize) -> Option<String> {
    let mut table = String::new();
    for (i, l) in text.lines().enumerate() {
        let kind = classify(l);
        if i + 1 == line {
            return match kind {
                LineKind::Table(name) => Some(name),
                LineKind::Key(k) if table.is_empty() => Some(k.to_string()),
                LineKind::Key(k) => Some(format!("{table}.{k}")),
                LineKind::Other => None,
            };
        }
        if let LineKind::Table(name) = kind {
            table = name;
        }
    }
    None
}

/// The 1-based line where the dotted `key` is set, if the file sets it.
fn find_key_line(text: &str, key: &str) -> Option<usize> {
    (1..=text.lines().count()).find(|&l| {
        matches!(
            classify(text.lines().nth(l - 1).unwrap_or("")),
            LineKind::Key(_)
        ) && key_at_line(text, l).as_deref() == Some(key)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse_str(text: &str) -> Result<ServeConfig, ConfigFileError> {
        parse(text, Path::new("ballast.toml"))
    }

    /// Parses, applies `args`, validates: what `load` does, without a file on disk.
    fn load_str(text: &str, args: &ServeArgs) -> Result<ServeConfig, ConfigFileError> {
        let dir = std::env::temp_dir().join(format!("ballast-config-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join(format!("{:x}.toml", hash(text)));
        std::fs::write(&path, text).unwrap();
        let args = ServeArgs {
            config: Some(path.clone()),
            ..args.clone()
        };
        let result = load(&args, None);
        std::fs::remove_file(&path).ok();
        result
    }

    fn hash(s: &str) -> u64 {
        use std::hash::{Hash, Hasher};
        let mut h = std::collections::hash_map::DefaultHasher::new();
        s.hash(&mut h);
        h.finish()
    }

    #[test]
    fn no_file_gives_the_documented_defaults() {
        let c = load(&ServeArgs::default(), None).unwrap();
        assert_eq!(c.broker.mqtt, Some("0.0.0.0:1883".parse().unwrap()));
        assert_eq!(c.broker.ws, Some("0.0.0.0:8083".parse().unwrap()));
        assert_eq!(c.broker.ws_path, "/mqtt");
        assert_eq!(c.http, "0.0.0.0:8080".parse().unwrap());
        assert_eq!(c.data_dir, PathBuf::from("./data"));
        assert_eq!(c.log_level, "info");
        assert_eq!(parse_str("").unwrap(), ServeConfig::default());
    }

    #[test]
    fn unknown_key_names_key_and_line() {
        let text = "http = \"127.0.0.1:8080\"\n[broker]\nfoo = 1\n";
        let e = parse_str(text).unwrap_err();
        assert_eq!(e.line, Some(3));
        assert_eq!(e.key.as_deref(), Some("broker.foo"));
        let msg = e.to_string();
        assert!(
            msg.starts_with("config error in ballast.toml line 3"),
            "{msg}"
        );
        assert!(msg.contains("unknown field `foo`"), "{msg}");
        assert!(msg.contains("foo = 1"), "{msg}");
    }

    #[test]
    fn unknown_table_names_it() {
        let e =
            parse_str("[broker]\nworkers = 1\n\n[brokr.limits]\nmax_inflight = 1\n").unwrap_err();
        assert_eq!(e.line, Some(4));
        assert!(e.to_string().contains("unknown field `brokr`"), "{e}");
    }

    #[test]
    fn bad_type_names_key_and_line() {
        let e = parse_str("[broker.limits]\nmax_connections = 10\nmax_inflight = \"many\"\n")
            .unwrap_err();
        assert_eq!(e.line, Some(3));
        assert_eq!(e.key.as_deref(), Some("broker.limits.max_inflight"));
        assert!(e.message.contains("invalid type"), "{e}");
        let e = parse_str("http = \"localhost\"\n").unwrap_err();
        assert_eq!(e.key.as_deref(), Some("http"));
        assert_eq!(e.line, Some(1));
    }

    #[test]
    fn invalid_limit_names_key_and_line() {
        let text = "[broker]\nworkers = 2\n\n[broker.limits]\nmax_inflight = 0\n";
        let e = load_str(text, &ServeArgs::default()).unwrap_err();
        assert_eq!(e.key.as_deref(), Some("broker.limits.max_inflight"));
        assert_eq!(e.line, Some(5));
        let msg = e.to_string();
        assert!(
            msg.contains(".toml line 5, key `broker.limits.max_inflight`"),
            "{msg}"
        );
        assert!(msg.contains("at least 1"), "{msg}");
    }

    #[test]
    fn bad_store_settings_name_key_and_line() {
        for (text, key, line, says) in [
            (
                "[broker.store]\ndurability = \"sometimes\"\n",
                "broker.store.durability",
                2,
                "unknown variant",
            ),
            (
                "[broker.store]\nmax_backlog_bytes = 10\n",
                "broker.store.max_backlog_bytes",
                2,
                "at least 1048576",
            ),
            (
                "[broker.store]\n\ncommit_delay_us = 5000000\n",
                "broker.store.commit_delay_us",
                3,
                "at most 100000",
            ),
        ] {
            let e = load_str(text, &ServeArgs::default()).unwrap_err();
            assert_eq!(e.key.as_deref(), Some(key), "{e}");
            assert_eq!(e.line, Some(line), "{e}");
            assert!(e.to_string().contains(says), "{e}");
        }
        // The data directory is the top-level key; the store section does not take one.
        let e = load_str("[broker.store]\ndata_dir = \"/x\"\n", &ServeArgs::default()).unwrap_err();
        assert!(e.to_string().contains("unknown field"), "{e}");
    }

    #[test]
    fn invalid_flag_value_names_the_flag() {
        let args = ServeArgs {
            workers: Some(100_000),
            ..Default::default()
        };
        let e = load(&args, None).unwrap_err();
        assert_eq!(e.key.as_deref(), Some("broker.workers"));
        assert_eq!(e.origin.as_deref(), Some("--workers"));
        let e = load(
            &ServeArgs {
                log_level: Some("info,=[".into()),
                ..Default::default()
            },
            None,
        )
        .unwrap_err();
        assert_eq!(e.key.as_deref(), Some("log_level"));
    }

    #[test]
    fn flags_override_the_file() {
        let text = "http = \"127.0.0.1:9000\"\nlog_level = \"warn\"\n[broker]\n\
                    mqtt = \"127.0.0.1:1999\"\nworkers = 3\n";
        let args = ServeArgs {
            mqtt: Some("127.0.0.1:2000".parse().unwrap()),
            data: Some(PathBuf::from("/tmp/elsewhere")),
            ..Default::default()
        };
        let c = load_str(text, &args).unwrap();
        assert_eq!(
            c.broker.mqtt,
            Some("127.0.0.1:2000".parse().unwrap()),
            "flag wins"
        );
        assert_eq!(
            c.http,
            "127.0.0.1:9000".parse().unwrap(),
            "file kept where no flag"
        );
        assert_eq!(c.broker.workers, 3);
        assert_eq!(
            c.broker.ws,
            Some("0.0.0.0:8083".parse().unwrap()),
            "default kept"
        );
        assert_eq!(c.data_dir, PathBuf::from("/tmp/elsewhere"));
        assert_eq!(c.log_level, "warn");
    }

    #[test]
    fn log_level_precedence_is_flag_then_rust_log_then_file() {
        let mut c = ServeConfig {
            log_level: "warn".into(),
            ..Default::default()
        };
        apply_overrides(&mut c, &ServeArgs::default(), Some("debug".into()));
        assert_eq!(c.log_level, "debug");
        let args = ServeArgs {
            log_level: Some("trace".into()),
            ..Default::default()
        };
        apply_overrides(&mut c, &args, Some("debug".into()));
        assert_eq!(c.log_level, "trace");
        let mut c = ServeConfig {
            log_level: "warn".into(),
            ..Default::default()
        };
        apply_overrides(&mut c, &ServeArgs::default(), Some("  ".into()));
        assert_eq!(c.log_level, "warn", "an empty RUST_LOG is ignored");
    }

    #[test]
    fn missing_file_is_an_error_naming_it() {
        let args = ServeArgs {
            config: Some("/nonexistent/ballast.toml".into()),
            ..Default::default()
        };
        let e = load(&args, None).unwrap_err();
        assert!(
            e.to_string()
                .starts_with("config error in /nonexistent/ballast.toml"),
            "{e}"
        );
    }

    /// docs/ballast.example.toml must parse to the defaults and list every key.
    #[test]
    fn example_file_matches_the_defaults_and_lists_every_key() {
        let text = include_str!("../../../docs/ballast.example.toml");
        let parsed = parse_str(text).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(parsed, ServeConfig::default());
        let value = toml::Value::try_from(ServeConfig::default()).unwrap();
        let mut keys = Vec::new();
        collect_keys(&value, "", &mut keys);
        for key in keys {
            assert!(
                find_key_line(text, &key).is_some(),
                "docs/ballast.example.toml lacks `{key}`"
            );
        }
    }

    fn collect_keys(v: &toml::Value, prefix: &str, out: &mut Vec<String>) {
        if let toml::Value::Table(t) = v {
            for (k, v) in t {
                let full = if prefix.is_empty() {
                    k.clone()
                } else {
                    format!("{prefix}.{k}")
                };
                match v {
                    toml::Value::Table(_) => collect_keys(v, &full, out),
                    _ => out.push(full),
                }
            }
        }
    }
}
