//! `results.csv`: one row per stored level result, every metric in its own column, so a
//! spreadsheet or pandas reads it without knowing the proto.

use fleetbench_proto::Word;
use std::collections::BTreeSet;
use std::path::Path;

use fleetbench_proto::agentpb::{CrashClass, Distribution, LevelOutcome, LevelResult};
use fleetbench_proto::controllerpb::GetResultsResponse;

use super::crash_line;

const DISTS: [&str; 7] = [
    "ttft_ms",
    "itl_ms",
    "tpot_ms",
    "e2e_ms",
    "queue_ms",
    "ttft_answer_ms",
    "itl_chunk_ms",
];

fn dists(r: &LevelResult) -> [&Option<Distribution>; 7] {
    [
        &r.ttft_ms,
        &r.itl_ms,
        &r.tpot_ms,
        &r.e2e_ms,
        &r.queue_ms,
        &r.ttft_answer_ms,
        &r.itl_chunk_ms,
    ]
}

/// The protocol's columns: what the level's figures speak for and leave out, and its cache.
const PROTOCOL: [&str; 15] = [
    "sent",
    "error_rate",
    "failures_by_kind",
    "left_out_failed",
    "left_out_ramp_up",
    "left_out_drain",
    "burst",
    "window_s",
    "ramp_up_s",
    "prefix_cache_hit_rate",
    "prefix_cache_source",
    "prompt_tokens_sent",
    "prompt_tokens_engine",
    "cache_reset",
    "designed_reuse",
];

fn protocol(r: &LevelResult) -> Vec<String> {
    let opt = |v: Option<f64>| v.map(|x| x.to_string()).unwrap_or_default();
    let left = r.left_out.unwrap_or_default();
    let cache = r.prefix_cache.clone().unwrap_or_default();
    let kinds: Vec<String> = r
        .failures_by_kind
        .iter()
        .map(|(k, n)| format!("{k}={n}"))
        .collect();
    vec![
        r.sent.to_string(),
        r.error_rate.to_string(),
        kinds.join(";"),
        left.failed.to_string(),
        left.ramp_up.to_string(),
        left.drain.to_string(),
        r.burst.to_string(),
        opt(r.window_s),
        opt(r.ramp_up_s),
        opt(cache.hit_rate),
        cache.source,
        if r.prefix_cache.is_some() {
            cache.prompt_tokens_sent.to_string()
        } else {
            String::new()
        },
        opt(cache.prompt_tokens_engine),
        cache.reset,
        opt(cache.designed_reuse),
    ]
}

pub(crate) fn write_csv(path: &Path, results: &GetResultsResponse) -> anyhow::Result<()> {
    // Percentile columns: every key any level reports, in numeric order.
    let mut keys: BTreeSet<(u64, String)> = BTreeSet::new();
    for r in results.levels.iter().filter_map(|l| l.result.as_ref()) {
        for d in dists(r).into_iter().flatten() {
            for k in d.percentiles.keys() {
                let n: f64 = k.trim_start_matches('p').parse().unwrap_or(f64::MAX);
                keys.insert(((n * 1000.0) as u64, k.clone()));
            }
        }
    }
    let mut header: Vec<String> = [
        "job_id",
        "run_id",
        "trial_id",
        "host",
        "config_id",
        "config_name",
        "workload",
        "repeat",
        "attempt",
        "level_index",
        "concurrency",
        "request_rate",
        "burstiness",
        "outcome",
        "crash_class",
        "crash",
        "completed",
        "failed",
        "duration_s",
        "input_tokens",
        "output_tokens",
        "output_tokens_per_s",
        "total_tokens_per_s",
        "requests_per_s",
        "goodput_requests_per_s",
        "peak_concurrency",
        "gpu_power_w",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    header.extend(PROTOCOL.map(String::from));
    for d in DISTS {
        for stat in ["mean", "min", "max"] {
            header.push(format!("{d}_{stat}"));
        }
        for (_, k) in &keys {
            header.push(format!("{d}_{k}"));
        }
    }
    header.extend(["started_unix_ms", "finished_unix_ms", "error"].map(String::from));

    let mut w = csv::Writer::from_path(path)?;
    w.write_record(&header)?;
    for l in &results.levels {
        let Some(r) = &l.result else { continue };
        let level = r.level.unwrap_or_default();
        let opt = |v: Option<String>| v.unwrap_or_default();
        let mut row: Vec<String> = vec![
            l.job_id.clone(),
            l.run_id.clone(),
            l.trial_id.clone(),
            l.host.clone(),
            l.config_id.clone(),
            l.config_name.clone(),
            l.workload.clone(),
            l.repeat.to_string(),
            l.attempt.to_string(),
            r.level_index.to_string(),
            opt(level.concurrency.map(|c| c.to_string())),
            opt(level.request_rate.map(|c| c.to_string())),
            level.burstiness.to_string(),
            LevelOutcome::word_of(r.outcome),
            opt(r.crash.as_ref().map(|c| CrashClass::word_of(c.class))),
            opt(r.crash.as_ref().map(crash_line)),
            r.completed.to_string(),
            r.failed.to_string(),
            r.duration_s.to_string(),
            r.input_tokens.to_string(),
            r.output_tokens.to_string(),
            r.output_tokens_per_s.to_string(),
            r.total_tokens_per_s.to_string(),
            r.requests_per_s.to_string(),
            r.goodput_requests_per_s.to_string(),
            r.peak_concurrency.to_string(),
            opt(l.gpu_power_w.map(|w| w.to_string())),
        ];
        row.extend(protocol(r));
        for d in dists(r) {
            match d {
                Some(d) => {
                    row.extend([d.mean, d.min, d.max].map(|x| x.to_string()));
                    for (_, k) in &keys {
                        row.push(opt(d.percentiles.get(k).map(|v| v.to_string())));
                    }
                }
                None => row.extend(std::iter::repeat_n(String::new(), 3 + keys.len())),
            }
        }
        row.extend([
            r.started_unix_ms.to_string(),
            r.finished_unix_ms.to_string(),
            r.error.clone(),
        ]);
        w.write_record(&row)?;
    }
    w.flush()?;
    Ok(())
}
