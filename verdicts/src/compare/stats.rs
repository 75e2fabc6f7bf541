//! One config's figures at one level (means, spreads, percentiles, power) and whether it may
//! win the level: what every comparison of that level is built from.

use super::*;

/// The value of percentile `p` in a distribution whose keys are "p50", "p99", "p99.9".
pub fn percentile(dist: Option<&agentpb::Distribution>, p: f64) -> Option<f64> {
    dist?.percentiles.iter().find_map(|(k, v)| {
        let n: f64 = k.trim_start_matches('p').parse().ok()?;
        ((n - p).abs() < 1e-9).then_some(*v)
    })
}

pub(super) fn mean(xs: &[f64]) -> f64 {
    if xs.is_empty() {
        0.0
    } else {
        xs.iter().sum::<f64>() / xs.len() as f64
    }
}

/// Sample standard deviation (n - 1); 0 for fewer than two values.
fn std_dev(xs: &[f64]) -> f64 {
    if xs.len() < 2 {
        return 0.0;
    }
    let m = mean(xs);
    (xs.iter().map(|x| (x - m).powi(2)).sum::<f64>() / (xs.len() - 1) as f64).sqrt()
}

/// The figures of one config at one level, and whether it may win the level: every repeat ran
/// to the end (none crashed or failed) and its error rate is within `max_error_rate`.
pub(super) fn config_stats(
    key: &ConfigKey,
    samples: &[&StoredLevel],
    names: &HashMap<(String, String), String>,
    max_error_rate: f64,
) -> Scored {
    let results: Vec<&agentpb::LevelResult> =
        samples.iter().filter_map(|l| l.result.as_ref()).collect();
    let ok: Vec<&agentpb::LevelResult> = results
        .iter()
        .copied()
        .filter(|r| r.outcome() == LevelOutcome::Ok)
        .collect();
    let crashed = results
        .iter()
        .copied()
        .find(|r| r.outcome() == LevelOutcome::Crashed);
    let tput: Vec<f64> = ok.iter().map(|r| r.output_tokens_per_s).collect();
    let points: Vec<Point> = samples
        .iter()
        .filter_map(|l| {
            let r = l.result.as_ref()?;
            (r.outcome() == LevelOutcome::Ok).then(|| Point {
                repeat: l.repeat,
                host: l.host.clone(),
                value: r.output_tokens_per_s,
            })
        })
        .collect();
    let log_mean = fleetbench_stats::logs(&tput)
        .filter(|l| !l.is_empty())
        .map_or(f64::NEG_INFINITY, |l| mean(&l));
    let avg = |f: &dyn Fn(&agentpb::LevelResult) -> Option<f64>| {
        let xs: Vec<f64> = ok.iter().filter_map(|r| f(r)).collect();
        mean(&xs)
    };
    let name = names
        .get(&(key.job_id.clone(), key.config_id.clone()))
        .cloned()
        .or_else(|| samples.first().map(|l| l.config_name.clone()))
        .unwrap_or_default();
    let failed: u64 = results.iter().map(|r| r.failed).sum();
    let completed: u64 = results.iter().map(|r| r.completed).sum();
    let error_rate = if failed + completed > 0 {
        failed as f64 / (failed + completed) as f64
    } else {
        0.0
    };
    let excluded = exclusion(
        &results,
        samples.len(),
        ok.len(),
        (failed, completed),
        max_error_rate,
    );
    let stats = ConfigLevelStats {
        config_id: key.config_id.clone(),
        config_name: name,
        job_id: key.job_id.clone(),
        repeats: samples.len() as u32,
        output_tokens_per_s: mean(&tput),
        output_tokens_per_s_spread: std_dev(&tput),
        requests_per_s: avg(&|r| Some(r.requests_per_s)),
        ttft_p50_ms: avg(&|r| percentile(r.ttft_ms.as_ref(), 50.0)),
        ttft_p99_ms: avg(&|r| percentile(r.ttft_ms.as_ref(), 99.0)),
        itl_p50_ms: avg(&|r| percentile(r.itl_ms.as_ref(), 50.0)),
        itl_p99_ms: avg(&|r| percentile(r.itl_ms.as_ref(), 99.0)),
        e2e_p50_ms: avg(&|r| percentile(r.e2e_ms.as_ref(), 50.0)),
        e2e_p99_ms: avg(&|r| percentile(r.e2e_ms.as_ref(), 99.0)),
        errors: failed,
        crashed: crashed.is_some(),
        crash_class: crashed
            .and_then(|r| r.crash.as_ref())
            .map_or(0, |c| c.class),
        gpu_power_w: mean_power(samples),
        error_rate,
        excluded_reason: excluded.clone().unwrap_or_default(),
    };
    Scored {
        stats,
        points,
        log_mean,
        excluded,
    }
}

/// Why a config may not win a level: a crash in some repeat, a failed repeat, or an error rate
/// above the SLO's `max_error_rate`; `None` when it may. `requests`: (failed, completed).
fn exclusion(
    results: &[&agentpb::LevelResult],
    repeats: usize,
    ok: usize,
    (failed, completed): (u64, u64),
    max_error_rate: f64,
) -> Option<String> {
    let crashed: Vec<&&agentpb::LevelResult> = results
        .iter()
        .filter(|r| r.outcome() == LevelOutcome::Crashed)
        .collect();
    let error_rate = if failed + completed > 0 {
        failed as f64 / (failed + completed) as f64
    } else {
        0.0
    };
    if let Some(c) = crashed.first() {
        let class = c
            .crash
            .as_ref()
            .map(|c| c.class().word())
            .unwrap_or_else(|| "crash".into());
        Some(format!(
            "the engine crashed ({class}) in {} of {repeats} repeats",
            crashed.len()
        ))
    } else if ok == 0 || ok < repeats {
        Some(format!(
            "the level failed in {} of {repeats} repeats",
            repeats - ok
        ))
    } else if error_rate > max_error_rate {
        Some(format!(
            "error rate {:.2}% ({failed} of {} requests failed) is above the SLO's \
             max_error_rate {:.2}%",
            error_rate * 100.0,
            failed + completed,
            max_error_rate * 100.0
        ))
    } else {
        None
    }
}

/// Mean GPU power over the repeats that ran to the end, where it was measured.
fn mean_power(samples: &[&StoredLevel]) -> Option<f64> {
    let watts: Vec<f64> = samples
        .iter()
        .filter(|l| {
            l.result
                .as_ref()
                .is_some_and(|r| r.outcome() == LevelOutcome::Ok)
        })
        .filter_map(|l| l.gpu_power_w)
        .collect();
    (!watts.is_empty()).then(|| mean(&watts))
}
