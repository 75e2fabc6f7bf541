//! `sglang-router launch` (0.3.2) flag tables, from its own `--help`.

use crate::flags::tables::{Row, STR, SW, any_int, choice, float, int};

/// The routing policies of 0.3.2 (`manual` routes by a caller's routing key header).
pub(crate) const POLICIES: &[&str] = &[
    "random",
    "round_robin",
    "cache_aware",
    "power_of_two",
    "manual",
];

/// Flags that name the upstream servers, or switch to a mode that finds them elsewhere
/// (Kubernetes discovery, prefill/decode disaggregation, the multi-model gateway): the agent
/// pins all of them and writes the workers itself (see `KindDefaults::worker_flags`).
pub(crate) const WORKER_FLAGS: &[&str] = &[
    "--worker-urls",
    "--prefill",
    "--decode",
    "--pd-disaggregation",
    "--service-discovery",
    "--selector",
    "--prefill-selector",
    "--decode-selector",
    "--service-discovery-port",
    "--service-discovery-namespace",
    "--enable-igw",
    "--mini-lb",
];

/// The tuning flags: the policy and its thresholds, limits, retries, circuit breaker and
/// health checks. The listen and metrics addresses and the worker flags are known too, so that
/// any spelling of them is refused as pinned.
pub(crate) fn rows() -> Vec<Row> {
    let mut v: Vec<Row> = vec![
        (&["--policy"], choice(POLICIES)),
        // cache_aware: a request goes to the worker whose prefix tree matches more than this
        // share of its text; below it, to the worker with the smallest tree.
        (&["--cache-threshold"], float(0.0, Some(1.0))),
        // Load balancing overrides the cache when both thresholds are exceeded.
        (&["--balance-abs-threshold"], int(0)),
        (&["--balance-rel-threshold"], float(0.0, None)),
        (&["--eviction-interval-secs"], int(1)),
        (&["--max-tree-size"], int(1)),
        (&["--max-idle-secs"], int(1)),
        (
            &["--assignment-mode"],
            choice(&["random", "min_load", "min_group"]),
        ),
        (&["--max-payload-size"], int(1)),
        (&["--request-timeout-secs"], int(1)),
        (&["--shutdown-grace-period-secs"], int(0)),
        // -1 turns the limit off.
        (&["--max-concurrent-requests"], any_int()),
        (&["--queue-size"], int(0)),
        (&["--queue-timeout-secs"], int(0)),
        (&["--rate-limit-tokens-per-second"], int(1)),
        (&["--retry-max-retries"], int(0)),
        (&["--retry-initial-backoff-ms"], int(0)),
        (&["--retry-max-backoff-ms"], int(0)),
        (&["--retry-backoff-multiplier"], float(0.0, None)),
        (&["--retry-jitter-factor"], float(0.0, Some(1.0))),
        (&["--disable-retries"], SW),
        (&["--cb-failure-threshold"], int(1)),
        (&["--cb-success-threshold"], int(1)),
        (&["--cb-timeout-duration-secs"], int(0)),
        (&["--cb-window-duration-secs"], int(1)),
        (&["--disable-circuit-breaker"], SW),
        (&["--health-failure-threshold"], int(1)),
        (&["--health-success-threshold"], int(1)),
        (&["--health-check-timeout-secs"], int(1)),
        (&["--health-check-interval-secs"], int(1)),
        (&["--disable-health-check"], SW),
        // Routes to the data-parallel ranks of SGLang workers (asks each for its dp size).
        (&["--dp-aware"], SW),
        (&["--worker-startup-timeout-secs"], int(1)),
        (&["--worker-startup-check-interval"], int(1)),
        (
            &["--log-level"],
            choice(&["debug", "info", "warn", "error"]),
        ),
        // Pinned by the fixed arguments.
        (&["--host"], STR),
        (&["--port"], int(1)),
        (&["--prometheus-host"], STR),
        (&["--prometheus-port"], int(1)),
    ];
    // Pinned as worker flags: known so that their prefixes resolve to them.
    v.extend(
        WORKER_FLAGS
            .iter()
            .map(|f| -> Row { (std::slice::from_ref(f), STR) }),
    );
    v
}

/// Flags that read files (tokenizers, templates, TLS keys, MCP configs), write them (log
/// directories), reach other services (history databases, trace collectors, JWKS) or carry a
/// secret on the command line: known, off until a profile allows them.
pub(crate) fn gated_rows() -> Vec<Row> {
    vec![
        (&["--model-path"][..], STR),
        (&["--tokenizer-path"][..], STR),
        (&["--chat-template"][..], STR),
        (&["--mcp-config-path"][..], STR),
        (&["--log-dir"][..], STR),
        (&["--client-cert-path"][..], STR),
        (&["--client-key-path"][..], STR),
        (&["--ca-cert-paths"][..], STR),
        (&["--tls-cert-path"][..], STR),
        (&["--tls-key-path"][..], STR),
        (&["--history-backend"][..], STR),
        (&["--postgres-db-url"][..], STR),
        (&["--redis-url"][..], STR),
        (&["--oracle-wallet-path"][..], STR),
        (&["--oracle-password"][..], STR),
        (&["--enable-trace"][..], SW),
        (&["--otlp-traces-endpoint"][..], STR),
        (&["--api-key"][..], STR),
        (&["--control-plane-api-keys"][..], STR),
        (&["--jwt-jwks-uri"][..], STR),
    ]
}
