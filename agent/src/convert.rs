//! Conversions between the wire types (`agentpb`) and the engines / loadgen crates.

use std::time::Duration;

use fleetbench_engines::EngineKind;
use fleetbench_engines::crash::{Crash, CrashClass};
use fleetbench_engines::flags::FlagType;
use fleetbench_loadgen as lg;
use fleetbench_proto::agentpb;

pub fn kind_to_proto(kind: EngineKind) -> agentpb::EngineKind {
    match kind {
        EngineKind::Sglang => agentpb::EngineKind::Sglang,
        EngineKind::Vllm => agentpb::EngineKind::Vllm,
        EngineKind::Llamacpp => agentpb::EngineKind::Llamacpp,
        EngineKind::Sim => agentpb::EngineKind::Sim,
        EngineKind::Generic => agentpb::EngineKind::Generic,
        EngineKind::SglangRouter => agentpb::EngineKind::SglangRouter,
    }
}

/// The kind a wire value names; UNSPECIFIED (or a value this build does not know) reads as
/// `generic`, whose metrics are read as whichever engine's names a scrape carries.
pub fn kind_from_proto(value: i32) -> EngineKind {
    match agentpb::EngineKind::try_from(value) {
        Ok(agentpb::EngineKind::Sglang) => EngineKind::Sglang,
        Ok(agentpb::EngineKind::Vllm) => EngineKind::Vllm,
        Ok(agentpb::EngineKind::Llamacpp) => EngineKind::Llamacpp,
        Ok(agentpb::EngineKind::Sim) => EngineKind::Sim,
        Ok(agentpb::EngineKind::SglangRouter) => EngineKind::SglangRouter,
        Ok(agentpb::EngineKind::Generic | agentpb::EngineKind::Unspecified) | Err(_) => {
            EngineKind::Generic
        }
    }
}

pub fn crash_class_to_proto(c: CrashClass) -> agentpb::CrashClass {
    match c {
        CrashClass::Oom => agentpb::CrashClass::Oom,
        CrashClass::Nan => agentpb::CrashClass::Nan,
        CrashClass::PythonException => agentpb::CrashClass::PythonException,
        CrashClass::CudaError => agentpb::CrashClass::CudaError,
        CrashClass::Nccl => agentpb::CrashClass::Nccl,
        CrashClass::RankLost => agentpb::CrashClass::RankLost,
        CrashClass::PortInUse => agentpb::CrashClass::PortInUse,
        CrashClass::StartupTimeout => agentpb::CrashClass::StartupTimeout,
        CrashClass::KilledBySignal => agentpb::CrashClass::KilledBySignal,
        CrashClass::KilledExternally => agentpb::CrashClass::KilledExternally,
        CrashClass::ExitCode => agentpb::CrashClass::ExitCode,
        CrashClass::Unhealthy => agentpb::CrashClass::Unhealthy,
    }
}

pub fn crash_to_proto(
    c: Crash,
    log_tail: Vec<String>,
    exit_code: Option<i32>,
    signal: Option<i32>,
) -> agentpb::Crash {
    agentpb::Crash {
        class: crash_class_to_proto(c.class) as i32,
        exception_type: c.exception_type,
        message: c.message,
        frames: c.frames,
        log_tail,
        exit_code,
        signal,
        summary: c.summary,
    }
}

/// A flag rule's type in words, as `GetHost` lists it ("int 1..", "one of a,b").
pub fn describe_flag_type(t: &FlagType) -> String {
    let range = |min: Option<String>, max: Option<String>| match (min, max) {
        (None, None) => String::new(),
        (a, b) => format!(" {}..{}", a.unwrap_or_default(), b.unwrap_or_default()),
    };
    match t {
        FlagType::Switch => "switch".into(),
        FlagType::Int { min, max } => format!(
            "int{}",
            range(min.map(|v| v.to_string()), max.map(|v| v.to_string()))
        ),
        FlagType::Float { min, max } => format!(
            "float{}",
            range(min.map(|v| v.to_string()), max.map(|v| v.to_string()))
        ),
        FlagType::Choice { values } => format!("one of {}", values.join(",")),
        FlagType::String => "string".into(),
        FlagType::Any => "any (passed through)".into(),
        FlagType::HumanInt { min } => format!(
            "int with k/K suffix{}",
            range(min.map(|v| v.to_string()), None)
        ),
        FlagType::Json { keys } => format!(
            "json with keys {}",
            keys.keys().cloned().collect::<Vec<_>>().join(",")
        ),
    }
}

/// A benchmark request field the load generator cannot use.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{field}: {message}")]
pub struct BenchRequestError {
    pub field: String,
    pub message: String,
}

pub(crate) fn bad(field: &str, message: impl Into<String>) -> BenchRequestError {
    BenchRequestError {
        field: field.into(),
        message: message.into(),
    }
}

pub fn level_from_proto(l: &agentpb::LoadLevel) -> lg::Level {
    lg::Level {
        concurrency: l.concurrency,
        request_rate: l.request_rate,
        burstiness: if l.burstiness > 0.0 {
            l.burstiness
        } else {
            1.0
        },
    }
}

/// The load generator's configuration for `req` against the engine at `base_url`.
/// Dataset files are read only under `roots`.
pub fn bench_config(
    req: &agentpb::RunBenchmarkRequest,
    base_url: &str,
    roots: &crate::allow::DatasetRoots,
) -> Result<lg::BenchConfig, BenchRequestError> {
    use agentpb::run_benchmark_request::Bound;
    use agentpb::workload::Dataset;
    let w = req
        .workload
        .as_ref()
        .ok_or_else(|| bad("workload", "missing"))?;
    let mut cfg = lg::BenchConfig::new(base_url);
    cfg.api = match agentpb::ApiKind::try_from(w.api).unwrap_or(agentpb::ApiKind::Unspecified) {
        agentpb::ApiKind::Chat => lg::Api::Chat,
        _ => lg::Api::Completions,
    };
    cfg.model = (!w.model.is_empty()).then(|| w.model.clone());
    cfg.dataset = match &w.dataset {
        None => return Err(bad("workload.dataset", "missing")),
        Some(Dataset::Random(r)) => {
            // The wire says "lengths from [len * (1 - r), len]"; the load generator takes the
            // lower bound's fraction directly.
            if !(r.range_ratio.is_finite() && (0.0..1.0).contains(&r.range_ratio)) {
                return Err(bad(
                    "workload.random.range_ratio",
                    format!("{} is not in [0, 1)", r.range_ratio),
                ));
            }
            lg::DatasetSpec::Random {
                input_len: r.input_len,
                output_len: r.output_len,
                range_ratio: 1.0 - r.range_ratio,
            }
        }
        Some(Dataset::Sharegpt(s)) => lg::DatasetSpec::ShareGpt {
            path: roots
                .check(&s.path)
                .map_err(|m| bad("workload.sharegpt.path", m))?,
            output_len: (s.output_len > 0).then_some(s.output_len),
        },
        Some(Dataset::SharedPrefix(s)) => lg::DatasetSpec::SharedPrefix {
            groups: s.groups,
            prompts_per_group: s.prompts_per_group,
            prefix_len: s.prefix_len,
            suffix_len: s.suffix_len,
            output_len: s.output_len,
        },
        Some(Dataset::Jsonl(j)) => lg::DatasetSpec::Jsonl {
            path: roots
                .check(&j.path)
                .map_err(|m| bad("workload.jsonl.path", m))?,
            output_len: j.output_len,
        },
        Some(Dataset::Conversation(c)) => lg::DatasetSpec::Conversation {
            turns: c.turns,
            input_len: c.input_len,
            output_len: c.output_len,
            think_time_ms: u64::from(c.think_time_ms),
            system_prompt_len: c.system_prompt_len,
        },
        Some(Dataset::Trace(t)) => lg::DatasetSpec::Trace {
            path: roots
                .check(&t.path)
                .map_err(|m| bad("workload.trace.path", m))?,
            // 0: the defaults, as recorded.
            block_tokens: if t.block_tokens == 0 {
                fleetbench_proto::limits::TRACE_BLOCK_TOKENS_DEFAULT
            } else {
                t.block_tokens
            },
            speedup: if t.speedup == 0.0 {
                fleetbench_proto::limits::TRACE_SPEEDUP_DEFAULT
            } else {
                t.speedup
            },
        },
    };
    if req.levels.is_empty() {
        return Err(bad("levels", "at least one load level is needed"));
    }
    cfg.levels = req.levels.iter().map(level_from_proto).collect();
    cfg.bound = match req.bound {
        Some(Bound::NumRequests(n)) => lg::Bound::Requests(n),
        Some(Bound::DurationS(s)) if s.is_finite() && s > 0.0 => {
            lg::Bound::Duration(Duration::from_secs_f64(s))
        }
        Some(Bound::DurationS(s)) => {
            return Err(bad(
                "duration_s",
                format!("{s} is not a positive number of seconds"),
            ));
        }
        None => cfg.bound,
    };
    cfg.warmup = req.warmup_requests;
    if !req.percentiles.is_empty() {
        cfg.percentiles = req.percentiles.clone();
    }
    if let Some(s) = &req.slo {
        // A lone deprecated itl_ms meant the per-request TPOT (callers before tpot_ms).
        let tpot_ms = s.tpot_ms.or(s.itl_ms);
        if s.ttft_ms.is_some() || tpot_ms.is_some() || s.e2e_ms.is_some() {
            cfg.slo = Some(lg::Slo {
                ttft_ms: s.ttft_ms,
                tpot_ms,
                e2e_ms: s.e2e_ms,
            });
        }
    }
    if !(req.ramp_up_s.is_finite() && req.ramp_up_s >= 0.0) {
        return Err(bad(
            "ramp_up_s",
            format!("{} is not a non-negative number of seconds", req.ramp_up_s),
        ));
    }
    if let Some(w) = req.window_s
        && !(w.is_finite() && w > 0.0)
    {
        return Err(bad(
            "window_s",
            format!("{w} is not a positive number of seconds"),
        ));
    }
    cfg.seed = w.seed;
    cfg.ignore_eos = w.ignore_eos;
    cfg.validate().map_err(|e| match e {
        lg::LoadgenError::Config { field, message } => bad(&field, message),
        other => bad("request", other.to_string()),
    })?;
    Ok(cfg)
}

pub fn distribution(s: &lg::Stats) -> agentpb::Distribution {
    agentpb::Distribution {
        count: s.count,
        mean: s.mean,
        min: s.min,
        max: s.max,
        percentiles: s.percentiles.iter().map(|(k, v)| (k.clone(), *v)).collect(),
    }
}

/// A level's histograms as their recorded buckets (see [`agentpb::LatencyHistogram`]).
pub fn histograms(h: &lg::LevelHists) -> agentpb::LevelHistograms {
    let one = |d: &lg::LatencyHist| {
        let (values_ns, counts) = d.buckets().into_iter().unzip();
        let (min_ns, max_ns) = d.extremes_ns().unwrap_or((0, 0));
        Some(agentpb::LatencyHistogram {
            values_ns,
            counts,
            sum_ns: d.sum_ns(),
            min_ns,
            max_ns,
        })
    };
    agentpb::LevelHistograms {
        ttft: one(&h.ttft),
        itl: one(&h.itl),
        tpot: one(&h.tpot),
        e2e: one(&h.e2e),
        queue: one(&h.queue),
        ttft_answer: one(&h.ttft_answer),
        itl_chunk: one(&h.itl_chunk),
    }
}

/// A finished level as the wire carries it (outcome from the report alone; the caller overrides
/// it for a crash).
pub fn level_result(
    index: usize,
    level: &agentpb::LoadLevel,
    r: &lg::LevelReport,
) -> agentpb::LevelResult {
    let outcome = if r.completed == 0 && (r.failed > 0 || r.error.is_some()) {
        agentpb::LevelOutcome::Failed
    } else {
        agentpb::LevelOutcome::Ok
    };
    agentpb::LevelResult {
        // Set by the benchmark task, which knows the lease it runs under.
        lease_epoch: 0,
        histograms: None,
        clients: None,
        level_index: index as u32,
        level: Some(*level),
        outcome: outcome as i32,
        crash: None,
        completed: r.completed,
        failed: r.failed,
        failures_by_kind: r
            .failures_by_kind
            .iter()
            .map(|(k, v)| (k.clone(), *v))
            .collect(),
        duration_s: r.duration_s,
        input_tokens: r.input_tokens,
        output_tokens: r.output_tokens,
        output_tokens_per_s: r.output_tokens_per_s,
        total_tokens_per_s: r.total_tokens_per_s,
        requests_per_s: r.requests_per_s,
        goodput_requests_per_s: r.goodput_requests_per_s,
        peak_concurrency: r.peak_concurrency,
        ttft_ms: Some(distribution(&r.ttft_ms)),
        ttft_answer_ms: Some(distribution(&r.ttft_answer_ms)),
        itl_ms: Some(distribution(&r.itl_ms)),
        itl_chunk_ms: Some(distribution(&r.itl_chunk_ms)),
        tpot_ms: Some(distribution(&r.tpot_ms)),
        e2e_ms: Some(distribution(&r.e2e_ms)),
        queue_ms: Some(distribution(&r.queue_ms)),
        error: r.error.clone().unwrap_or_default(),
        started_unix_ms: 0,
        finished_unix_ms: 0,
        sent: r.sent,
        error_rate: r.error_rate,
        left_out: Some(agentpb::LeftOut {
            failed: r.left_out.failed,
            ramp_up: r.left_out.ramp_up,
            drain: r.left_out.drain,
        }),
        burst: r.burst,
        window_s: r.window_s,
        ramp_up_s: r.ramp_up_s,
        prefix_cache: None,
        deployment: None,
    }
}

/// Builds the load generator for `req`: its prompts' markers are named by the caller's run
/// id (job, trial, attempt), and a ramp-up or window asks for steady-state measurement.
pub async fn runner(
    req: &agentpb::RunBenchmarkRequest,
    cfg: lg::BenchConfig,
) -> Result<lg::Runner, lg::LoadgenError> {
    let mut runner = lg::Runner::new(cfg).await?;
    if !req.run_id.is_empty() {
        runner = runner.with_run_key(&req.run_id);
    }
    if req.ramp_up_s > 0.0 {
        runner = runner.with_ramp_up(Duration::from_secs_f64(req.ramp_up_s));
    }
    if req.steady || req.window_s.is_some() {
        runner = runner.with_window(req.window_s.map(Duration::from_secs_f64));
    }
    Ok(runner)
}

pub fn progress(p: &lg::Progress) -> agentpb::BenchmarkProgress {
    agentpb::BenchmarkProgress {
        level_index: p.level_index as u32,
        completed: p.completed,
        failed: p.failed,
        total: p.total.unwrap_or(0),
        elapsed_s: p.elapsed.as_secs_f64(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_kind_round_trips_through_the_wire_with_its_word() {
        use fleetbench_proto::words::Word;
        for kind in EngineKind::ALL {
            let pb = kind_to_proto(kind);
            assert_eq!(kind_from_proto(pb as i32), kind);
            assert_eq!(pb.word(), kind.as_str());
        }
        assert_eq!(kind_from_proto(99), EngineKind::Generic);
    }

    #[test]
    fn the_load_generator_and_the_wire_agree_on_what_a_burst_is() {
        assert_eq!(lg::BURST_FACTOR, fleetbench_proto::BURST_FACTOR);
    }

    fn req() -> agentpb::RunBenchmarkRequest {
        agentpb::RunBenchmarkRequest {
            workload: Some(agentpb::Workload {
                name: "w".into(),
                dataset: Some(agentpb::workload::Dataset::Random(agentpb::RandomDataset {
                    input_len: 32,
                    output_len: 16,
                    range_ratio: 0.0,
                })),
                api: agentpb::ApiKind::Chat as i32,
                model: String::new(),
                ignore_eos: true,
                seed: 7,
            }),
            levels: vec![agentpb::LoadLevel {
                concurrency: Some(4),
                request_rate: None,
                burstiness: 0.0,
            }],
            warmup_requests: 2,
            bound: Some(agentpb::run_benchmark_request::Bound::NumRequests(20)),
            percentiles: vec![50.0, 99.0],
            slo: None,
            run_id: "r".into(),
            skip_levels: vec![],
            ..Default::default()
        }
    }

    #[test]
    fn request_maps_to_loadgen_config() {
        let cfg = bench_config(&req(), "http://127.0.0.1:1", &Default::default()).unwrap();
        assert_eq!(cfg.api, lg::Api::Chat);
        assert_eq!(cfg.model, None);
        assert_eq!(
            cfg.dataset,
            lg::DatasetSpec::Random {
                input_len: 32,
                output_len: 16,
                range_ratio: 1.0
            }
        );
        assert_eq!(cfg.levels, vec![lg::Level::closed(4)]);
        assert_eq!(cfg.bound, lg::Bound::Requests(20));
        assert_eq!(cfg.warmup, 2);
        assert_eq!(cfg.seed, 7);
    }

    #[test]
    fn a_trace_takes_its_options_or_their_defaults() {
        let dir = tempfile::tempdir().unwrap();
        let dir = dir.path().canonicalize().unwrap();
        let file = dir.join("trace.jsonl");
        std::fs::write(&file, "{}\n").unwrap();
        let roots = crate::allow::DatasetRoots(vec![dir.clone()]);
        let with = |block_tokens, speedup| {
            let mut r = req();
            r.workload.as_mut().unwrap().dataset =
                Some(agentpb::workload::Dataset::Trace(agentpb::TraceDataset {
                    path: file.display().to_string(),
                    block_tokens,
                    speedup,
                }));
            bench_config(&r, "http://x", &roots)
        };
        let trace = |block_tokens, speedup| lg::DatasetSpec::Trace {
            path: file.clone(),
            block_tokens,
            speedup,
        };
        assert_eq!(with(0, 0.0).unwrap().dataset, trace(512, 1.0));
        assert_eq!(with(16, 2.5).unwrap().dataset, trace(16, 2.5));
        let err = with(8, 1.0).unwrap_err();
        assert_eq!(err.field, "dataset.trace_block_tokens", "{err}");
        let err = with(16, 500.0).unwrap_err();
        assert_eq!(err.field, "dataset.trace_speedup", "{err}");
    }

    #[test]
    fn bad_fields_are_named() {
        let mut r = req();
        r.levels[0].concurrency = Some(0);
        let err = bench_config(&r, "http://127.0.0.1:1", &Default::default()).unwrap_err();
        assert!(err.field.starts_with("levels"), "{err}");
        let mut r = req();
        r.workload.as_mut().unwrap().dataset = None;
        assert_eq!(
            bench_config(&r, "http://x", &Default::default())
                .unwrap_err()
                .field,
            "workload.dataset"
        );
    }
}
