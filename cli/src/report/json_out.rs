//! `results.json`: everything stored for the job(s) and the comparison, with enum values as
//! names (`"crashed"`, `"python_exception"`) so that scripts do not need the proto files.

use fleetbench_proto::Word;
use fleetbench_proto::agentpb::{
    Crash, CrashClass, Distribution, EngineSpec, LevelOutcome, LevelResult, LoadLevel,
};
use fleetbench_proto::controllerpb::{
    CompareGroup, CompareResponse, ConfigInfo, ConfigLevelStats, GetResultsResponse, Job, JobState,
    Run, RunState, StoredLevel, TelemetryPoint,
};
use serde_json::{Value, json};

pub(crate) fn results_json(results: &GetResultsResponse, compare: &CompareResponse) -> Value {
    json!({
        "jobs": results.jobs.iter().map(job).collect::<Vec<_>>(),
        "configs": results.configs.iter().map(config).collect::<Vec<_>>(),
        "runs": results.runs.iter().map(run).collect::<Vec<_>>(),
        "levels": results.levels.iter().map(stored_level).collect::<Vec<_>>(),
        "telemetry": results.telemetry.iter().map(telemetry).collect::<Vec<_>>(),
        "compare": compare_json(compare),
        "notes": super::protocol::notes(results),
    })
}

fn job(j: &Job) -> Value {
    json!({
        "id": j.id, "name": j.name,
        "state": JobState::word_of(j.state),
        "file_name": j.file_name, "spec_toml": j.spec_toml,
        "created_unix_ms": j.created_unix_ms, "started_unix_ms": j.started_unix_ms,
        "finished_unix_ms": j.finished_unix_ms,
        "trials_total": j.trials_total, "trials_done": j.trials_done,
        "levels_total": j.levels_total, "levels_done": j.levels_done,
        "crashes": j.crashes, "error": j.error, "tag": j.tag,
    })
}

pub(crate) fn engine_spec(s: &EngineSpec) -> Value {
    json!({
        "profile": s.profile, "model": s.model,
        "flags": s.flags.iter().map(|f| json!({"name": f.name, "value": f.value})).collect::<Vec<_>>(),
        "env": s.env,
    })
}

fn config(c: &ConfigInfo) -> Value {
    json!({
        "config_id": c.config_id, "name": c.name, "job_id": c.job_id,
        "kind": fleetbench_proto::agentpb::EngineKind::word_of(c.kind),
        "spec": c.spec.as_ref().map(engine_spec),
    })
}

fn crash(c: &Crash) -> Value {
    json!({
        "class": CrashClass::word_of(c.class), "summary": c.summary,
        "exception_type": c.exception_type, "message": c.message,
        "frames": c.frames, "log_tail": c.log_tail,
        "exit_code": c.exit_code, "signal": c.signal,
    })
}

fn run(r: &Run) -> Value {
    json!({
        "run_id": r.run_id, "job_id": r.job_id, "trial_id": r.trial_id, "host": r.host,
        "config_id": r.config_id, "config_name": r.config_name, "workload": r.workload,
        "repeat": r.repeat, "attempt": r.attempt,
        "state": RunState::word_of(r.state),
        "argv": r.argv,
        "facts": r.facts.iter().map(|f| json!({"key": f.key, "value": f.value})).collect::<Vec<_>>(),
        "crash": r.crash.as_ref().map(crash),
        "started_unix_ms": r.started_unix_ms, "finished_unix_ms": r.finished_unix_ms,
        "engine_start_s": r.engine_start_s,
    })
}

fn load_level(l: &LoadLevel) -> Value {
    json!({"concurrency": l.concurrency, "request_rate": l.request_rate, "burstiness": l.burstiness})
}

fn dist(d: &Option<Distribution>) -> Value {
    match d {
        None => Value::Null,
        Some(d) => json!({
            "count": d.count, "mean": d.mean, "min": d.min, "max": d.max,
            "percentiles": d.percentiles,
        }),
    }
}

fn level_result(r: &LevelResult) -> Value {
    json!({
        "level_index": r.level_index,
        "level": r.level.as_ref().map(load_level),
        "outcome": LevelOutcome::word_of(r.outcome),
        "crash": r.crash.as_ref().map(crash),
        "completed": r.completed, "failed": r.failed, "failures_by_kind": r.failures_by_kind,
        "duration_s": r.duration_s,
        "input_tokens": r.input_tokens, "output_tokens": r.output_tokens,
        "output_tokens_per_s": r.output_tokens_per_s, "total_tokens_per_s": r.total_tokens_per_s,
        "requests_per_s": r.requests_per_s, "goodput_requests_per_s": r.goodput_requests_per_s,
        "peak_concurrency": r.peak_concurrency,
        "ttft_ms": dist(&r.ttft_ms), "itl_ms": dist(&r.itl_ms), "tpot_ms": dist(&r.tpot_ms),
        "e2e_ms": dist(&r.e2e_ms), "queue_ms": dist(&r.queue_ms),
        "error": r.error,
        "started_unix_ms": r.started_unix_ms, "finished_unix_ms": r.finished_unix_ms,
        "sent": r.sent, "error_rate": r.error_rate,
        "left_out": r.left_out.map(|l| json!({
            "failed": l.failed, "ramp_up": l.ramp_up, "drain": l.drain,
        })),
        "burst": r.burst, "window_s": r.window_s, "ramp_up_s": r.ramp_up_s,
        "ttft_answer_ms": dist(&r.ttft_answer_ms), "itl_chunk_ms": dist(&r.itl_chunk_ms),
        "prefix_cache": r.prefix_cache.as_ref().map(|c| json!({
            "source": c.source, "hit_rate": c.hit_rate,
            "prompt_tokens_sent": c.prompt_tokens_sent,
            "prompt_tokens_engine": c.prompt_tokens_engine,
            "reset": c.reset, "note": c.note,
            "designed_reuse": c.designed_reuse,
            "prompt_tokens_reusable": c.prompt_tokens_reusable,
        })),
    })
}

pub(crate) fn stored_level(l: &StoredLevel) -> Value {
    json!({
        "job_id": l.job_id, "run_id": l.run_id, "trial_id": l.trial_id, "host": l.host,
        "config_id": l.config_id, "config_name": l.config_name, "workload": l.workload,
        "repeat": l.repeat, "attempt": l.attempt,
        "result": l.result.as_ref().map(level_result),
        "gpu_power_w": l.gpu_power_w,
    })
}

fn telemetry(t: &TelemetryPoint) -> Value {
    json!({
        "unix_ms": t.unix_ms, "host": t.host, "series": t.series, "gpu": t.gpu,
        "value": t.value, "run_id": t.run_id,
    })
}

/// The comparison as JSON (`fleetbench compare --json`, and inside results.json).
pub fn compare_json(c: &CompareResponse) -> Value {
    json!({
        "groups": c.groups.iter().map(group_json).collect::<Vec<_>>(),
        "alpha": c.alpha, "tests": c.tests, "notes": c.notes,
        "crossovers": c.crossovers.iter().map(|x| json!({
            "workload": x.workload, "from_level": x.from_level, "to_level": x.to_level,
            "from_winner": x.from_winner, "to_winner": x.to_winner,
        })).collect::<Vec<_>>(),
        "crashes": c.crashes.iter().map(|k| json!({
            "config_name": k.config_name, "host": k.host, "workload": k.workload,
            "level_label": k.level_label, "run_id": k.run_id,
            "crash": k.crash.as_ref().map(crash),
        })).collect::<Vec<_>>(),
    })
}

/// One level of one workload in the comparison.
fn group_json(g: &CompareGroup) -> Value {
    json!({
        "workload": g.workload, "level": g.level.as_ref().map(load_level),
        "level_label": g.level_label,
        "winner": g.winner_config, "runner_up": g.runner_up_config,
        "margin_pct": g.margin_pct, "margin_significant": g.margin_significant,
        "tested": g.tested,
        "p_value": g.tested.then_some(g.p_value),
        "p_adjusted": g.tested.then_some(g.p_adjusted),
        "effect_pct": g.tested.then_some(g.effect_pct),
        "effect_ci_pct": g.tested.then_some([g.effect_low_pct, g.effect_high_pct]),
        "effect_ci_confidence": g.tested.then_some(g.interval_confidence),
        "test": g.tested.then_some(&g.test),
        "df": g.tested.then_some(g.df),
        "moderated": g.tested.then_some(g.moderated),
        "history_levels": g.tested.then_some(g.history_levels),
        "mde_pct": g.mde_pct,
        "verdict": g.verdict,
        "configs": g.configs.iter().map(config_level_json).collect::<Vec<_>>(),
    })
}

/// One config's figures at a level.
fn config_level_json(s: &ConfigLevelStats) -> Value {
    json!({
        "config_id": s.config_id, "config_name": s.config_name, "job_id": s.job_id,
        "repeats": s.repeats,
        "output_tokens_per_s": s.output_tokens_per_s,
        "output_tokens_per_s_spread": s.output_tokens_per_s_spread,
        "requests_per_s": s.requests_per_s,
        "ttft_p50_ms": s.ttft_p50_ms, "ttft_p99_ms": s.ttft_p99_ms,
        "itl_p50_ms": s.itl_p50_ms, "itl_p99_ms": s.itl_p99_ms,
        "e2e_p50_ms": s.e2e_p50_ms, "e2e_p99_ms": s.e2e_p99_ms,
        "errors": s.errors, "crashed": s.crashed,
        "crash_class": s.crashed.then(|| CrashClass::word_of(s.crash_class)),
        "gpu_power_w": s.gpu_power_w,
        "error_rate": s.error_rate,
        "excluded_reason": (!s.excluded_reason.is_empty()).then_some(&s.excluded_reason),
    })
}
