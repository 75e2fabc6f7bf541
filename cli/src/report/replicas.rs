//! Per-replica charts of deployments (configs of replicas behind a router): each replica's
//! share of the generated tokens and its own cache-hit rate against load, from the counters
//! every level through a router stores (`LevelResult.deployment`). A policy that piles
//! sessions on one replica, or one that spreads a conversation over replicas that then compute
//! its history again, shows here before it shows in the throughput.

use std::collections::BTreeMap;

use fleetbench_proto::agentpb::LevelOutcome;
use fleetbench_proto::controllerpb::GetResultsResponse;

use super::charts::Colors;
use super::plots::{Chart, Line};

/// `(workload, config, replica index)` → level x → the figures of every repeat.
type Figures = BTreeMap<(String, String, usize), BTreeMap<u64, Vec<(f64, f64)>>>;

/// Two charts per workload that ran a deployment: share of output tokens and cache-hit rate per
/// replica (mean over repeats; replica `i` is the `i`-th the router was given), one line per
/// config and replica, the first replica solid and the others dashed in the config's colour.
pub(crate) fn charts(results: &GetResultsResponse, colors: &Colors) -> Vec<Chart> {
    let mut figures = Figures::new();
    let mut rate_axis = false;
    for l in &results.levels {
        let Some(r) = l.result.as_ref() else { continue };
        let Some(d) = r.deployment.as_ref() else {
            continue;
        };
        if r.outcome != LevelOutcome::Ok as i32 {
            continue;
        }
        let Some(level) = r.level.as_ref() else {
            continue;
        };
        let x = match (level.request_rate, level.concurrency) {
            (Some(rate), _) => {
                rate_axis = true;
                rate
            }
            (None, Some(c)) => f64::from(c),
            (None, None) => continue,
        };
        for (i, rep) in d.replicas.iter().enumerate() {
            let (Some(share), hit) = (rep.share, rep.cache_hit_rate) else {
                continue;
            };
            figures
                .entry((l.workload.clone(), l.config_name.clone(), i))
                .or_default()
                .entry(x.to_bits())
                .or_default()
                .push((share * 100.0, hit.map_or(f64::NAN, |h| h * 100.0)));
        }
    }
    let workloads: Vec<String> = {
        let mut w: Vec<String> = figures.keys().map(|k| k.0.clone()).collect();
        w.dedup();
        w
    };
    let x_label = if rate_axis {
        "request rate (req/s)"
    } else {
        "concurrency"
    };
    let mut out = Vec::new();
    for w in workloads {
        let mut share = Chart::new(
            &format!("{w}: share of output tokens per replica"),
            x_label,
            "% of the deployment's tokens",
        );
        let mut hits = Chart::new(
            &format!("{w}: cache-hit rate per replica"),
            x_label,
            "% of its prompt tokens cached",
        );
        for ((_, config, i), by_x) in figures.iter().filter(|(k, _)| k.0 == w) {
            let line = |points: Vec<(f64, f64)>| Line {
                name: format!("{config} · replica {i}"),
                color: colors.of(config),
                points,
                dashed: *i > 0,
                spread: Vec::new(),
            };
            let mean = |pick: fn(&(f64, f64)) -> f64| -> Vec<(f64, f64)> {
                by_x.iter()
                    .filter_map(|(x, v)| {
                        let vals: Vec<f64> = v.iter().map(pick).filter(|y| y.is_finite()).collect();
                        (!vals.is_empty()).then(|| {
                            (
                                f64::from_bits(*x),
                                vals.iter().sum::<f64>() / vals.len() as f64,
                            )
                        })
                    })
                    .collect()
            };
            share.lines.push(line(mean(|v| v.0)));
            hits.lines.push(line(mean(|v| v.1)));
        }
        out.push(share);
        out.push(hits);
    }
    out
}
