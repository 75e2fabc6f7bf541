//! Which charts a report holds, built from the results: load sweeps per workload, and
//! telemetry over the run with crashes and config spans marked.

use std::collections::BTreeMap;

use fleetbench_proto::agentpb::LevelOutcome;
use fleetbench_proto::controllerpb::{
    CompareGroup, CompareResponse, GetResultsResponse, RunState, TelemetryPoint,
};
use plotters::style::RGBColor;

use super::plots::{Band, Chart, Line, Mark, PALETTE};

/// Colours by config name, stable across every chart of a report.
pub(crate) struct Colors(pub(crate) Vec<String>);

impl Colors {
    pub(crate) fn new(results: &GetResultsResponse, compare: &CompareResponse) -> Colors {
        let mut names: Vec<String> = Vec::new();
        let all = compare
            .groups
            .iter()
            .flat_map(|g| g.configs.iter().map(|c| c.config_name.clone()))
            .chain(results.configs.iter().map(|c| c.name.clone()));
        for n in all {
            if !names.contains(&n) {
                names.push(n);
            }
        }
        Colors(names)
    }

    pub(crate) fn of(&self, name: &str) -> RGBColor {
        let i = self
            .0
            .iter()
            .position(|n| n == name)
            .unwrap_or(self.0.len());
        PALETTE[i % PALETTE.len()]
    }

    pub(crate) fn css(&self, name: &str) -> String {
        let RGBColor(r, g, b) = self.of(name);
        format!("rgb({r},{g},{b})")
    }
}

/// The x of a level: its rate for open-loop levels, else its concurrency.
fn level_x(g: &CompareGroup) -> Option<f64> {
    let l = g.level.as_ref()?;
    l.request_rate.or(l.concurrency.map(f64::from))
}

fn load_axis(groups: &[&CompareGroup]) -> (&'static str, bool) {
    let rate = groups
        .iter()
        .any(|g| g.level.as_ref().is_some_and(|l| l.request_rate.is_some()));
    let xs: Vec<f64> = groups.iter().filter_map(|g| level_x(g)).collect();
    let (lo, hi) = xs
        .iter()
        .fold((f64::MAX, 0.0f64), |(lo, hi), &x| (lo.min(x), hi.max(x)));
    let log = lo > 0.0 && hi / lo >= 8.0;
    (
        if rate {
            "request rate (req/s)"
        } else {
            "concurrency"
        },
        log,
    )
}

/// Output throughput against load, one line per config, ± spread of the repeats; crashed
/// levels as red crosses at zero.
pub(crate) fn throughput(workload: &str, groups: &[&CompareGroup], colors: &Colors) -> Chart {
    let (x_label, log) = load_axis(groups);
    let mut chart = Chart::new(
        &format!("{workload}: output throughput"),
        x_label,
        "output tokens/s",
    );
    chart.x_log = log;
    for name in config_names(groups) {
        let mut line = Line {
            name: name.clone(),
            color: colors.of(&name),
            points: Vec::new(),
            dashed: false,
            spread: Vec::new(),
        };
        for g in groups {
            let (Some(x), Some(c)) = (level_x(g), g.configs.iter().find(|c| c.config_name == name))
            else {
                continue;
            };
            if c.crashed {
                chart.marks.push(Mark::Point {
                    x,
                    y: 0.0,
                    label: format!("{name} crashed"),
                });
            } else if c.output_tokens_per_s > 0.0 {
                line.points.push((x, c.output_tokens_per_s));
                line.spread.push(c.output_tokens_per_s_spread);
            }
        }
        chart.lines.push(line);
    }
    chart
}

/// A latency percentile pair (p50 solid, p99 dashed) against load, per config.
pub(crate) fn latency(
    workload: &str,
    metric: &str,
    groups: &[&CompareGroup],
    colors: &Colors,
    pick: impl Fn(&fleetbench_proto::controllerpb::ConfigLevelStats) -> (f64, f64),
) -> Chart {
    let (x_label, log) = load_axis(groups);
    let mut chart = Chart::new(
        &format!("{workload}: {metric} p50 (solid) and p99 (dashed)"),
        x_label,
        "ms",
    );
    chart.x_log = log;
    for name in config_names(groups) {
        let mut p50 = Vec::new();
        let mut p99 = Vec::new();
        for g in groups {
            let (Some(x), Some(c)) = (level_x(g), g.configs.iter().find(|c| c.config_name == name))
            else {
                continue;
            };
            let (a, b) = pick(c);
            if !c.crashed && a > 0.0 {
                p50.push((x, a));
                p99.push((x, b));
            }
        }
        let color = colors.of(&name);
        chart.lines.push(Line {
            name: format!("{name} p50"),
            color,
            points: p50,
            dashed: false,
            spread: vec![],
        });
        chart.lines.push(Line {
            name: format!("{name} p99"),
            color,
            points: p99,
            dashed: true,
            spread: vec![],
        });
    }
    chart
}

fn config_names(groups: &[&CompareGroup]) -> Vec<String> {
    let mut names: Vec<String> = Vec::new();
    for c in groups.iter().flat_map(|g| &g.configs) {
        if !names.contains(&c.config_name) {
            names.push(c.config_name.clone());
        }
    }
    names
}

/// Telemetry series drawn over the run: (series, title, y label, scale).
pub(crate) const GPU_SERIES: [(&str, &str, &str, f64); 2] = [
    ("hw.power", "GPU power", "W", 1.0),
    ("hw.gpu.utilization", "GPU utilisation", "%", 100.0),
];
pub(crate) const ENGINE_SERIES: [(&str, &str, &str, f64); 2] = [
    (
        "engine.running_requests",
        "Engine running requests",
        "requests",
        1.0,
    ),
    ("engine.kv_cache_usage", "Engine KV-cache usage", "%", 100.0),
];

/// The time origin of a report: the first thing that happened.
pub(crate) fn t0(results: &GetResultsResponse) -> i64 {
    let times = results
        .telemetry
        .iter()
        .map(|t| t.unix_ms)
        .chain(results.runs.iter().map(|r| r.started_unix_ms))
        .chain(
            results
                .levels
                .iter()
                .filter_map(|l| l.result.as_ref())
                .map(|r| r.started_unix_ms),
        )
        .filter(|&t| t > 0);
    times.min().unwrap_or(0)
}

type Points = Vec<(f64, f64)>;

/// One chart of `series` over time: a line per host (and GPU), crashes as red verticals, and
/// along the bottom which config ran when. None when no point of the series was stored.
pub(crate) fn over_time(
    results: &GetResultsResponse,
    (series, title, unit, scale): (&str, &str, &str, f64),
    colors: &Colors,
) -> Option<Chart> {
    let points: Vec<&TelemetryPoint> = results
        .telemetry
        .iter()
        .filter(|t| t.series == series)
        .collect();
    if points.is_empty() {
        return None;
    }
    let t0 = t0(results);
    let secs = |ms: i64| (ms - t0) as f64 / 1000.0;
    // (host, gpu) -> points
    let mut by_key: BTreeMap<(String, Option<u32>), Points> = BTreeMap::new();
    for p in points {
        by_key
            .entry((p.host.clone(), p.gpu))
            .or_default()
            .push((secs(p.unix_ms), p.value * scale));
    }
    let mut chart = Chart::new(title, "seconds since the job started", unit);
    for (i, ((host, gpu), mut pts)) in by_key.into_iter().enumerate() {
        pts.sort_by(|a, b| a.0.total_cmp(&b.0));
        let name = match gpu {
            Some(g) => format!("{host} GPU {g}"),
            None => host,
        };
        chart.lines.push(Line {
            name,
            color: PALETTE[(i + 3) % PALETTE.len()],
            points: pts,
            dashed: false,
            spread: vec![],
        });
    }
    for r in &results.runs {
        if r.started_unix_ms > 0 && r.finished_unix_ms > r.started_unix_ms {
            chart.bands.push(Band {
                x0: secs(r.started_unix_ms),
                x1: secs(r.finished_unix_ms),
                color: colors.of(&r.config_name),
            });
        }
    }
    chart.marks = crash_times(results)
        .into_iter()
        .map(|(ms, label)| Mark::Vertical { x: secs(ms), label })
        .collect();
    Some(chart)
}

/// When each crash happened and a short label.
pub(crate) fn crash_times(results: &GetResultsResponse) -> Vec<(i64, String)> {
    let mut out = Vec::new();
    for l in &results.levels {
        let Some(r) = &l.result else { continue };
        if r.outcome() == LevelOutcome::Crashed {
            let at = if r.finished_unix_ms > 0 {
                r.finished_unix_ms
            } else {
                r.started_unix_ms
            };
            out.push((at, format!("{} crashed", l.config_name)));
        }
    }
    for r in &results.runs {
        if r.state() == RunState::EngineFailed {
            out.push((
                r.finished_unix_ms.max(r.started_unix_ms),
                format!("{} failed to start", r.config_name),
            ));
        }
    }
    out.retain(|(t, _)| *t > 0);
    out
}
