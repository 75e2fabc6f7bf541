//! The benchmark configuration: what to send, at which load levels, for how long.

use std::path::PathBuf;
use std::str::FromStr;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::endpoint::ClientOptions;
use crate::error::LoadgenError;

/// Which OpenAI-compatible endpoint to stream from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Api {
    /// `POST /v1/completions` with a `prompt`.
    Completions,
    /// `POST /v1/chat/completions` with one user message.
    Chat,
}

impl FromStr for Api {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "completions" => Ok(Api::Completions),
            "chat" => Ok(Api::Chat),
            other => Err(format!(
                "unknown API {other:?}: expected \"completions\" or \"chat\""
            )),
        }
    }
}

impl Api {
    pub(crate) fn path(self) -> &'static str {
        match self {
            Api::Completions => "/v1/completions",
            Api::Chat => "/v1/chat/completions",
        }
    }
}

/// Where prompts come from and how long the answers are.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "kebab-case")]
pub enum DatasetSpec {
    /// Random words shaped to exactly `input_len` tokens; lengths drawn uniformly from
    /// `[len * range_ratio, len]` (1.0 = exact lengths, as in SGLang's `bench_serving`).
    Random {
        input_len: u32,
        output_len: u32,
        range_ratio: f64,
    },
    /// A ShareGPT-format JSON file (`[{"conversations":[{"from":"human","value":…},{"from":"gpt",…}]}]`);
    /// output length from the reply's token count unless given.
    ShareGpt {
        path: PathBuf,
        output_len: Option<u32>,
    },
    /// `groups` random prefixes of `prefix_len` tokens, each followed by `prompts_per_group`
    /// random suffixes of `suffix_len` tokens.
    SharedPrefix {
        groups: u32,
        prompts_per_group: u32,
        prefix_len: u32,
        suffix_len: u32,
        output_len: u32,
    },
    /// One prompt per line: a JSON string, or an object with `prompt` (or `text`) and an optional
    /// `output_len`.
    Jsonl { path: PathBuf, output_len: u32 },
    /// Timestamped trace replay in the Mooncake JSONL format (`dataset::mooncake`): one object
    /// per line with `timestamp` (ms from the start), `output_length`, and `hash_ids` (the
    /// prompt's 512-token blocks) with `input_length`, or `input_length` alone, or a `prompt`.
    /// Each block is sent as `block_tokens` tokens (512: as recorded); the requests go out at
    /// their timestamps divided by `speedup`. A level's concurrency caps requests in flight.
    Trace {
        path: PathBuf,
        block_tokens: u32,
        speedup: f64,
    },
    /// Multi-turn sessions (`dataset::conversation`): each of `turns` requests sends the
    /// session's history (earlier prompts and fixed answers of `output_len` tokens) plus a new
    /// user message of `input_len` tokens, after `think_time_ms` in which the session keeps its
    /// stream. `system_prompt_len` > 0 puts a system prompt shared by every session of a level
    /// in front (agent sessions). Closed loop only: a level's concurrency is its sessions.
    Conversation {
        turns: u32,
        input_len: u32,
        output_len: u32,
        think_time_ms: u64,
        system_prompt_len: u32,
    },
}

/// One load level: a closed loop at `concurrency`, or an open loop at `request_rate` (requests/s)
/// optionally capped by `concurrency`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Level {
    pub concurrency: Option<u32>,
    pub request_rate: Option<f64>,
    /// Shape of gamma-distributed inter-arrival times: 1.0 is Poisson, below 1 is burstier.
    pub burstiness: f64,
}

impl Level {
    /// A closed-loop level with `concurrency` streams.
    pub fn closed(concurrency: u32) -> Level {
        Level {
            concurrency: Some(concurrency),
            request_rate: None,
            burstiness: 1.0,
        }
    }

    /// An open-loop level at `rate` requests/s with Poisson arrivals and no cap.
    pub fn open(rate: f64) -> Level {
        Level {
            concurrency: None,
            request_rate: Some(rate),
            burstiness: 1.0,
        }
    }
}

/// When a level stops issuing requests.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub enum Bound {
    /// After this many measured requests (warm-up not counted).
    Requests(u32),
    /// After this much time; requests in flight at the end are waited for.
    Duration(Duration),
}

/// Service-level objectives for goodput: a request counts when it meets every one given.
/// `tpot_ms` applies to the request's own time per output token, `(e2e − ttft) / (tokens − 1)`
/// (not to a percentile of inter-token gaps, which is a level's figure).
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
pub struct Slo {
    pub ttft_ms: Option<f64>,
    pub tpot_ms: Option<f64>,
    pub e2e_ms: Option<f64>,
}

impl FromStr for Slo {
    type Err = String;
    /// Parses `ttft_ms=500,itl_ms=50,e2e_ms=10000` (any subset, at least one).
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let mut slo = Slo::default();
        for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let (key, value) = part.split_once('=').ok_or_else(|| {
                format!("{part:?} is not KEY=VALUE (keys: ttft_ms, tpot_ms, e2e_ms)")
            })?;
            let v: f64 = value
                .trim()
                .parse()
                .ok()
                .filter(|v: &f64| v.is_finite() && *v > 0.0)
                .ok_or_else(|| {
                    format!("{key}: {value:?} is not a positive number of milliseconds")
                })?;
            match key.trim() {
                "ttft_ms" => slo.ttft_ms = Some(v),
                "tpot_ms" => slo.tpot_ms = Some(v),
                "itl_ms" => {
                    return Err(
                        "itl_ms is ambiguous and no longer accepted: a request's goodput \
                         limit is its time per output token, write tpot_ms"
                            .into(),
                    );
                }
                "e2e_ms" => slo.e2e_ms = Some(v),
                other => {
                    return Err(format!(
                        "unknown SLO key {other:?} (keys: ttft_ms, tpot_ms, e2e_ms)"
                    ));
                }
            }
        }
        if slo == Slo::default() {
            return Err("empty SLO: give at least one of ttft_ms, tpot_ms, e2e_ms".into());
        }
        Ok(slo)
    }
}

/// Everything a [`crate::Runner`] needs.
#[derive(Debug, Clone)]
pub struct BenchConfig {
    /// `http://host:port` or `https://host[:port]` of the server (a path prefix is kept;
    /// `/v1/...` is appended).
    pub base_url: String,
    /// Headers, API key and CA for reaching the server.
    pub client: ClientOptions,
    pub api: Api,
    /// Model name to send; asked from `/v1/models` when `None`.
    pub model: Option<String>,
    pub dataset: DatasetSpec,
    pub levels: Vec<Level>,
    pub bound: Bound,
    /// Requests sent and discarded before each level's measurement.
    pub warmup: u32,
    /// Percentiles to report, e.g. `[50.0, 90.0, 99.0]`.
    pub percentiles: Vec<f64>,
    pub slo: Option<Slo>,
    pub seed: u64,
    pub ignore_eos: bool,
    /// Limit on one request, from its send to its last byte.
    pub request_timeout: Duration,
    /// A local `tokenizer.json` to shape prompts with (else the server's `/tokenize`).
    pub tokenizer: Option<PathBuf>,
    /// The server whose `/tokenize` shapes prompts when the target forwards none (a router:
    /// SGLang's answers 404, so the agent names one of its workers); `None`: the target.
    pub tokenize_url: Option<String>,
}

impl BenchConfig {
    /// A configuration with the usual defaults: completions, random 128/128 exact, closed loop
    /// at concurrency 1, 100 requests, percentiles 50/90/99, `ignore_eos`, 10 min timeout.
    pub fn new(base_url: impl Into<String>) -> BenchConfig {
        BenchConfig {
            base_url: base_url.into(),
            client: ClientOptions::default(),
            api: Api::Completions,
            model: None,
            dataset: DatasetSpec::Random {
                input_len: 128,
                output_len: 128,
                range_ratio: 1.0,
            },
            levels: vec![Level::closed(1)],
            bound: Bound::Requests(100),
            warmup: 0,
            percentiles: vec![50.0, 90.0, 99.0],
            slo: None,
            seed: 0,
            ignore_eos: true,
            request_timeout: Duration::from_secs(600),
            tokenizer: None,
            tokenize_url: None,
        }
    }

    /// Checks every field; the error names the first one that is wrong.
    pub fn validate(&self) -> Result<(), LoadgenError> {
        let bad = |field: &str, message: String| {
            Err(LoadgenError::Config {
                field: field.into(),
                message,
            })
        };
        for (i, level) in self.levels.iter().enumerate() {
            validate_level(level).or_else(|m| bad(&format!("levels[{i}]"), m))?;
        }
        match self.bound {
            Bound::Requests(0) => {
                return bad("bound", "the request count must be at least 1".into());
            }
            Bound::Duration(d) if d.is_zero() => {
                return bad("bound", "the duration must be positive".into());
            }
            _ => {}
        }
        for p in &self.percentiles {
            if !(p.is_finite() && *p > 0.0 && *p < 100.0) {
                return bad("percentiles", format!("{p} is not in (0, 100)"));
            }
        }
        if let Err(e) = self.client.header_map() {
            return bad(&format!("client.{}", e.field), e.message);
        }
        if self.request_timeout.is_zero() {
            return bad("request_timeout", "must be positive".into());
        }
        match &self.dataset {
            DatasetSpec::Random {
                input_len,
                output_len,
                range_ratio,
            } => {
                if *input_len == 0 {
                    return bad("dataset.input_len", "must be at least 1".into());
                }
                if *output_len == 0 {
                    return bad("dataset.output_len", "must be at least 1".into());
                }
                if !(range_ratio.is_finite() && *range_ratio > 0.0 && *range_ratio <= 1.0) {
                    return bad(
                        "dataset.range_ratio",
                        format!("{range_ratio} is not in (0, 1]"),
                    );
                }
            }
            DatasetSpec::SharedPrefix {
                groups,
                prompts_per_group,
                suffix_len,
                output_len,
                ..
            } => {
                if *groups == 0 || *prompts_per_group == 0 {
                    return bad(
                        "dataset.groups",
                        "groups and prompts per group must be at least 1".into(),
                    );
                }
                if *suffix_len == 0 {
                    return bad("dataset.suffix_len", "must be at least 1".into());
                }
                if *output_len == 0 {
                    return bad("dataset.output_len", "must be at least 1".into());
                }
            }
            DatasetSpec::Conversation {
                turns,
                input_len,
                output_len,
                think_time_ms,
                ..
            } => {
                crate::dataset::conversation::validate(
                    *turns,
                    *input_len,
                    *output_len,
                    *think_time_ms,
                )
                .or_else(|(field, m)| bad(&format!("dataset.{field}"), m))?;
                if let Some(i) = self.levels.iter().position(|l| l.request_rate.is_some()) {
                    return bad(
                        &format!("levels[{i}]"),
                        "a conversation workload runs at a concurrency (one stream per \
                         session); a request rate is not offered"
                            .into(),
                    );
                }
            }
            DatasetSpec::Trace {
                block_tokens,
                speedup,
                ..
            } => {
                crate::dataset::mooncake::validate(*block_tokens, *speedup)
                    .or_else(|(field, m)| bad(&format!("dataset.{field}"), m))?;
                if let Some(i) = self.levels.iter().position(|l| l.request_rate.is_some()) {
                    return bad(
                        &format!("levels[{i}]"),
                        "a trace sends at its own timestamps (trace_speedup scales them); a \
                         level's concurrency caps it, a request rate is not offered"
                            .into(),
                    );
                }
            }
            DatasetSpec::ShareGpt {
                output_len: Some(0),
                ..
            }
            | DatasetSpec::Jsonl { output_len: 0, .. } => {
                return bad("dataset.output_len", "must be at least 1".into());
            }
            _ => {}
        }
        Ok(())
    }
}

/// Open-loop rates and gamma shapes the load generator accepts (the agent and the controller
/// apply the narrower ranges of `fleetbench_proto::limits`).
const MIN_RATE: f64 = 1e-3;
const MAX_RATE: f64 = 1e6;
const MIN_BURSTINESS: f64 = 1e-3;
const MAX_BURSTINESS: f64 = 1e3;

fn validate_level(level: &Level) -> Result<(), String> {
    match (level.concurrency, level.request_rate) {
        (None, None) => return Err("needs a concurrency or a request rate".into()),
        (Some(0), _) => return Err("concurrency must be at least 1".into()),
        _ => {}
    }
    // Bounded, not just positive: 1e-300 makes an inter-arrival time no `Duration` holds, and
    // 1e300 per second makes a timed level's schedule unbounded in memory.
    if let Some(rate) = level.request_rate
        && !(rate.is_finite() && (MIN_RATE..=MAX_RATE).contains(&rate))
    {
        return Err(format!(
            "request rate {rate:e} is outside {MIN_RATE}..{MAX_RATE} per second"
        ));
    }
    if !(level.burstiness.is_finite()
        && (MIN_BURSTINESS..=MAX_BURSTINESS).contains(&level.burstiness))
    {
        return Err(format!(
            "burstiness {:e} is outside {MIN_BURSTINESS}..{MAX_BURSTINESS}",
            level.burstiness
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slo_parses_subsets_and_names_bad_keys() {
        let slo: Slo = "ttft_ms=500, e2e_ms=2000".parse().unwrap();
        assert_eq!(
            slo,
            Slo {
                ttft_ms: Some(500.0),
                tpot_ms: None,
                e2e_ms: Some(2000.0)
            }
        );
        assert!("ttft=5".parse::<Slo>().unwrap_err().contains("ttft"));
        assert!("tpot_ms=-1".parse::<Slo>().unwrap_err().contains("tpot_ms"));
        assert!(
            "itl_ms=5"
                .parse::<Slo>()
                .unwrap_err()
                .contains("write tpot_ms")
        );
        assert!("".parse::<Slo>().is_err());
    }

    #[test]
    fn validation_names_the_field() {
        let mut cfg = BenchConfig::new("http://127.0.0.1:1");
        cfg.levels = vec![
            Level::closed(4),
            Level {
                concurrency: None,
                request_rate: None,
                burstiness: 1.0,
            },
        ];
        let err = cfg.validate().unwrap_err().to_string();
        assert!(err.contains("levels[1]"), "{err}");
        let mut cfg = BenchConfig::new("http://127.0.0.1:1");
        cfg.dataset = DatasetSpec::Random {
            input_len: 8,
            output_len: 8,
            range_ratio: 1.5,
        };
        assert!(
            cfg.validate()
                .unwrap_err()
                .to_string()
                .contains("range_ratio")
        );
        assert!(BenchConfig::new("http://127.0.0.1:1").validate().is_ok());
    }
}
