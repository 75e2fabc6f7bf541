//! `sglang-router` start-up lines (tracing format, ANSI colours stripped):
//!
//! `… INFO smg::server: …/server.rs:794: Starting router on 127.0.0.1:18100 | mode: Regular {
//! worker_urls: ["http://127.0.0.1:18101", "http://127.0.0.1:18102"] } | policy: CacheAware {
//! cache_threshold: 0.3, balance_abs_threshold: 64, balance_rel_threshold: 1.5,
//! eviction_interval_secs: 60, max_tree_size: 67108864 } | max_payload: 512MB`
//!
//! is the router's effective configuration, read into one `router_args` object (and `policy`);
//! `Activated N worker(s)` lines add up to `workers_activated`.

use std::sync::LazyLock;

use regex::Regex;
use serde_json::{Map, Value};

use crate::logs::{LogFact, LogParser, strip_prefix};

static STARTING: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"Starting router on (\S+) \| (.*)$").expect("valid regex"));

static NAMED: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"^(\w+)\s*(?:\{\s*(.*?)\s*\})?\s*$").expect("valid regex"));

static URL: LazyLock<Regex> = LazyLock::new(|| Regex::new(r#""([^"]+)""#).expect("valid regex"));

static ACTIVATED: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"Activated (\d+) worker\(s\)").expect("valid regex"));

/// `CacheAware` -> `cache_aware`, as the `--policy` choices spell it.
fn snake(camel: &str) -> String {
    let mut out = String::new();
    for (i, c) in camel.chars().enumerate() {
        if c.is_ascii_uppercase() && i > 0 {
            out.push('_');
        }
        out.push(c.to_ascii_lowercase());
    }
    out
}

/// A number where the text is one, else the text.
fn value(text: &str) -> Value {
    let t = text.trim().trim_matches('"');
    if let Ok(i) = t.parse::<i64>() {
        return Value::from(i);
    }
    match t.parse::<f64>() {
        Ok(f) if f.is_finite() => Value::from(f),
        _ => Value::from(t),
    }
}

/// The `Starting router on …` line as one object; `None` when it is not that line.
fn router_args(message: &str) -> Option<Map<String, Value>> {
    let caps = STARTING.captures(message)?;
    let mut args = Map::new();
    args.insert("listen".into(), Value::from(&caps[1]));
    for part in caps[2].split(" | ") {
        let Some((key, rest)) = part.split_once(": ") else {
            continue;
        };
        match key.trim() {
            "mode" => {
                let name = rest.split_whitespace().next().unwrap_or_default();
                args.insert("mode".into(), Value::from(snake(name)));
                let urls: Vec<Value> = URL
                    .captures_iter(rest)
                    .map(|c| Value::from(&c[1]))
                    .collect();
                args.insert("worker_urls".into(), Value::Array(urls));
            }
            "policy" => {
                let named = NAMED.captures(rest.trim())?;
                args.insert("policy".into(), Value::from(snake(&named[1])));
                for field in named.get(2).map_or("", |m| m.as_str()).split(", ") {
                    if let Some((k, v)) = field.split_once(": ") {
                        args.insert(k.trim().to_string(), value(v));
                    }
                }
            }
            other => {
                args.insert(other.to_string(), value(rest));
            }
        }
    }
    Some(args)
}

/// The router's parser.
#[derive(Default)]
pub(crate) struct RouterParser {
    activated: u64,
}

impl LogParser for RouterParser {
    fn parse_line(&mut self, line: &str) -> Vec<LogFact> {
        let s = strip_prefix(line);
        let message = s.message.as_ref();
        if let Some(args) = router_args(message) {
            let mut facts = Vec::new();
            if let Some(p) = args.get("policy").and_then(Value::as_str) {
                facts.push(LogFact::new("policy", p));
            }
            facts.push(LogFact::new("router_args", Value::Object(args).to_string()));
            return facts;
        }
        if let Some(c) = ACTIVATED.captures(message) {
            self.activated += c[1].parse::<u64>().unwrap_or(0);
            return vec![LogFact::new(
                "workers_activated",
                self.activated.to_string(),
            )];
        }
        Vec::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_start_line_gives_the_effective_policy_and_workers() {
        let line = "\x1b[2m2026-12-06 03:10:31\x1b[0m \x1b[32m INFO\x1b[0m \x1b[2msmg::server\x1b[0m\x1b[2m:\x1b[0m \x1b[2m/home/runner/work/sglang/sglang/src/server.rs\x1b[0m\x1b[2m:\x1b[0m\x1b[2m794:\x1b[0m Starting router on 127.0.0.1:18100 | mode: Regular { worker_urls: [\"http://127.0.0.1:18101\", \"http://127.0.0.1:18102\"] } | policy: CacheAware { cache_threshold: 0.3, balance_abs_threshold: 64, balance_rel_threshold: 1.5, eviction_interval_secs: 60, max_tree_size: 67108864 } | max_payload: 512MB";
        let mut p = RouterParser::default();
        let facts = p.parse_line(line);
        assert_eq!(facts[0], LogFact::new("policy", "cache_aware"));
        let args: Value = serde_json::from_str(&facts[1].value).unwrap();
        assert_eq!(args["listen"], "127.0.0.1:18100");
        assert_eq!(args["mode"], "regular");
        assert_eq!(
            args["worker_urls"],
            serde_json::json!(["http://127.0.0.1:18101", "http://127.0.0.1:18102"])
        );
        assert_eq!(args["cache_threshold"], 0.3);
        assert_eq!(args["balance_abs_threshold"], 64);
        assert_eq!(args["max_payload"], "512MB");

        let rr = "2026-12-06 03:11:51  INFO smg::server: src/server.rs:794: Starting router on 127.0.0.1:1 | mode: Regular { worker_urls: [\"http://h:2\"] } | policy: RoundRobin | max_payload: 512MB";
        let facts = p.parse_line(rr);
        assert_eq!(facts[0], LogFact::new("policy", "round_robin"));
        assert_eq!(
            p.parse_line("x: Activated 1 worker(s) (marked as healthy)"),
            vec![LogFact::new("workers_activated", "1")]
        );
        assert_eq!(
            p.parse_line("x: Activated 1 worker(s) (marked as healthy)"),
            vec![LogFact::new("workers_activated", "2")]
        );
        assert!(p.parse_line("Router ready | workers: []").is_empty());
    }
}
