//! What a level returns: the report (the JSON users script against), per-request records, and
//! progress updates.

use std::collections::BTreeMap;
use std::time::Duration;

pub use fleetbench_stats::latency::LatencyHist;
use serde::{Deserialize, Serialize};

use crate::stats::Stats;

/// Results of one load level. `{"levels": [LevelReport, ...]}` is the JSON of `--output-json`.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
pub struct LevelReport {
    pub concurrency: Option<u32>,
    pub request_rate: Option<f64>,
    /// Measured requests that completed and failed (inside the window, when there is one).
    pub completed: u64,
    pub failed: u64,
    /// `completed + failed`: the requests the level's figures speak for.
    pub sent: u64,
    /// `failed / sent` (0 when nothing was sent); by kind in `failures_by_kind`.
    pub error_rate: f64,
    pub failures_by_kind: BTreeMap<String, u64>,
    /// Requests the latency figures leave out, and why.
    pub left_out: LeftOut,
    /// A closed-loop level with fewer measured requests than `BURST_FACTOR` times its
    /// concurrency: its figures describe the first synchronized wave, not steady state.
    pub burst: bool,
    /// What throughput divides by: the measurement window when there is one, else from the
    /// level's start (after warm-up) to the last completion.
    pub duration_s: f64,
    /// The measurement window's length (steady-state measurement only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub window_s: Option<f64>,
    /// The ramp-up left out before the window (steady-state measurement only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ramp_up_s: Option<f64>,
    pub input_tokens: u64,
    pub output_tokens: u64,
    /// Prompt tokens of every completed request of the level, warm-up and left-out requests
    /// included: what the engine's own counters saw (its prefix-cache figure is against this).
    #[serde(default)]
    pub prompt_tokens_all: u64,
    /// Of `prompt_tokens_all`, the tokens the workload designs to be served from a cache (a
    /// session's history, a system prompt another session sent first).
    #[serde(default)]
    pub reusable_tokens_all: u64,
    /// Output tokens of every completed request of the level, counted as `prompt_tokens_all`:
    /// what the engines' generation counters saw (behind a router, summed over replicas).
    #[serde(default)]
    pub output_tokens_all: u64,
    /// `reusable_tokens_all / prompt_tokens_all`: the reuse the workload designs, to read
    /// beside the engine's own cache figure. `None` where the workload states none (files).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub designed_reuse: Option<f64>,
    pub output_tokens_per_s: f64,
    pub total_tokens_per_s: f64,
    pub requests_per_s: f64,
    /// Completed requests per second that met every SLO (equal to `requests_per_s` without SLOs).
    pub goodput_requests_per_s: f64,
    pub peak_concurrency: u32,
    /// From the intended send time to the first token, reasoning or answer.
    pub ttft_ms: Stats,
    /// From the intended send time to the first answer token (`content`/`text`), after any
    /// reasoning tokens (`reasoning_content`/`reasoning`); equal to `ttft_ms` without reasoning.
    #[serde(default)]
    pub ttft_answer_ms: Stats,
    /// ITL per token: a chunk carrying k tokens after a gap g counts k gaps of g/k.
    pub itl_ms: Stats,
    /// ITL per chunk: one gap per token-bearing SSE event, as vLLM's and SGLang's benchmarks
    /// count it (a stall a reader of the stream sees shows here whole).
    #[serde(default)]
    pub itl_chunk_ms: Stats,
    /// Per request: (e2e − ttft) / (output tokens − 1).
    pub tpot_ms: Stats,
    /// From the intended send time to the end of the stream.
    pub e2e_ms: Stats,
    /// Client-side queueing: from the intended to the actual send time.
    pub queue_ms: Stats,
    pub cancelled: bool,
    /// Why the level produced nothing (or stopped early), in words.
    pub error: Option<String>,
}

/// How many requests a level's latency figures leave out, by reason.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
pub struct LeftOut {
    /// Failed requests (counted in `error_rate`, not in latencies).
    pub failed: u64,
    /// Intended before the measurement window (the ramp-up).
    pub ramp_up: u64,
    /// Intended after the measurement window (the drain).
    pub drain: u64,
}

/// The `--output-json` document.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
pub struct BenchReport {
    pub levels: Vec<LevelReport>,
}

/// One request as measured, for `--output-details` (JSON lines). Times are milliseconds from
/// the level's start; latencies from the intended send time. A failed request keeps what it
/// measured before it failed (send, first byte, the tokens that arrived); only the level's
/// completed requests count in its statistics.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct RequestRecord {
    pub level_index: usize,
    pub index: u64,
    pub intended_ms: f64,
    pub sent_ms: Option<f64>,
    pub first_byte_ms: Option<f64>,
    pub ttft_ms: Option<f64>,
    pub e2e_ms: Option<f64>,
    /// Intended prompt tokens (from shaping), when known.
    pub expected_input_tokens: Option<u32>,
    /// `max_tokens` sent.
    pub max_tokens: u32,
    pub input_tokens: u64,
    pub output_tokens: u64,
    /// Whether token counts came from the server's `usage` (else counted from chunks).
    pub usage_reported: bool,
    /// Arrival of each token, ms from the intended send time.
    pub token_ms: Vec<f64>,
    pub error_kind: Option<String>,
    pub error: Option<String>,
}

/// A level's progress, sent a few times a second and once at the end.
#[derive(Debug, Clone, PartialEq)]
pub struct Progress {
    pub level_index: usize,
    pub completed: u64,
    pub failed: u64,
    pub total: Option<u64>,
    pub elapsed: Duration,
}

/// A level's report with its per-request records (empty unless asked for).
/// A level's latency histograms in nanoseconds, as measured (the figures of [`LevelReport`]
/// are summaries of these): what a caller merges when several agents loaded one level.
#[derive(Debug, Clone, Default)]
pub struct LevelHists {
    pub ttft: LatencyHist,
    pub ttft_answer: LatencyHist,
    pub itl: LatencyHist,
    pub itl_chunk: LatencyHist,
    pub tpot: LatencyHist,
    pub e2e: LatencyHist,
    pub queue: LatencyHist,
}

#[derive(Debug, Clone)]
pub struct LevelOutcome {
    pub report: LevelReport,
    pub records: Vec<RequestRecord>,
    /// The level's latency histograms (none when the level could not run).
    pub histograms: Option<LevelHists>,
}

impl BenchReport {
    /// The `--output-json` document, pretty-printed.
    pub fn to_json_pretty(&self) -> String {
        serde_json::to_string_pretty(self).expect("reports always serialise")
    }
}

impl RequestRecord {
    /// One line of `--output-details`.
    pub fn to_json_line(&self) -> String {
        serde_json::to_string(self).expect("records always serialise")
    }
}
