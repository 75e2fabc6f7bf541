//! What the measurement protocol says about a job's figures, beside any verdict: prefix-cache
//! hits on a workload that does not share prompts, burst levels, failed requests, and
//! comparisons whose configs ran on different hosts. Printed under `compare`, listed at the top
//! of report.html, and in results.json as `notes`; the figures themselves are in every level.

use std::collections::{BTreeMap, BTreeSet};

use fleetbench_proto::controllerpb::{GetResultsResponse, StoredLevel};

use super::charts::Colors;
use super::plots::{Chart, Line};

/// Above this share of prompt tokens served from the engine's cache, a workload that does not
/// share prompts measured cached prefill, not what it meant to.
pub(crate) const CACHE_WARN: f64 = 0.05;

/// Workloads whose prompts share on purpose (shared prefix, dataset files with repeats,
/// trace replay), by job id and workload name, from the jobs' specs.
fn sharing(results: &GetResultsResponse) -> BTreeSet<(String, String)> {
    use fleetbench_spec::{self as spec, Dataset};
    let mut out = BTreeSet::new();
    for j in &results.jobs {
        let parsed = spec::parse(&j.file_name, &j.spec_toml)
            .or_else(|_| spec::search::parse_search(&j.file_name, &j.spec_toml).map(|s| s.0))
            .or_else(|_| spec::suite::parse_suite(&j.file_name, &j.spec_toml).map(|s| s.0));
        let Ok(s) = parsed else { continue };
        for w in &s.workloads {
            let shares = !matches!(w.dataset, Dataset::Random { .. });
            if shares {
                out.insert((j.id.clone(), w.name.clone()));
            }
        }
    }
    out
}

fn label(l: &StoredLevel) -> String {
    l.result
        .as_ref()
        .and_then(|r| r.level)
        .map(|lv| fleetbench_spec::level_label(&lv))
        .unwrap_or_default()
}

/// Failed and sent requests, and failures by kind, of one (config, workload).
#[derive(Default)]
struct Errors {
    failed: u64,
    sent: u64,
    kinds: BTreeMap<String, u64>,
}

/// Levels of one (config, workload) split over several client agents.
#[derive(Default)]
struct Split {
    clients: BTreeSet<usize>,
    hosts: BTreeSet<String>,
    spread_ms: f64,
    uncertainty_ms: f64,
}

/// Per config: error-rate sums by load (x as bits → (x, sum, levels)).
type RateByLoad<'a> = BTreeMap<&'a str, BTreeMap<u64, (f64, f64, u32)>>;

/// Plain-words notes on the job's figures (empty when there is nothing to say).
pub fn notes(results: &GetResultsResponse) -> Vec<String> {
    let shares = sharing(results);
    let mut out = Vec::new();
    // Cache hits where the workload does not share: (config, workload) → (levels, worst).
    let mut hits: BTreeMap<(String, String), (usize, f64, String)> = BTreeMap::new();
    let mut bursts: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    let mut errors: BTreeMap<(String, String), Errors> = BTreeMap::new();
    let mut hosts: BTreeMap<(String, String), BTreeSet<String>> = BTreeMap::new();
    let mut splits: BTreeMap<(String, String), Split> = BTreeMap::new();
    for l in &results.levels {
        let Some(r) = &l.result else { continue };
        if let Some(c) = &r.clients {
            let s = splits
                .entry((l.config_name.clone(), l.workload.clone()))
                .or_default();
            s.clients.insert(c.clients.len());
            s.hosts.extend(c.clients.iter().map(|x| x.host.clone()));
            s.spread_ms = s.spread_ms.max(c.start_spread_ms);
            s.uncertainty_ms = s.uncertainty_ms.max(c.clock_uncertainty_ms);
        }
        hosts
            .entry((l.workload.clone(), l.config_name.clone()))
            .or_default()
            .insert(l.host.clone());
        if let Some(h) = r.prefix_cache.as_ref().and_then(|c| c.hit_rate)
            && h > CACHE_WARN
            && !shares.contains(&(l.job_id.clone(), l.workload.clone()))
        {
            let e = hits
                .entry((l.config_name.clone(), l.workload.clone()))
                .or_insert((0, 0.0, String::new()));
            e.0 += 1;
            if h > e.1 {
                e.1 = h;
                e.2 = label(l);
            }
        }
        if r.burst {
            bursts
                .entry(l.workload.clone())
                .or_default()
                .insert(label(l));
        }
        // A crashed or failed level is a result of its own (listed with the crashes); its
        // refused connections say nothing about the config's error rate while it runs.
        if r.outcome != fleetbench_proto::agentpb::LevelOutcome::Ok as i32 {
            continue;
        }
        let e = errors
            .entry((l.config_name.clone(), l.workload.clone()))
            .or_default();
        e.failed += r.failed;
        e.sent += r.sent;
        for (k, n) in &r.failures_by_kind {
            *e.kinds.entry(k.clone()).or_default() += n;
        }
    }
    for ((config, workload), (n, worst, at)) in hits {
        out.push(format!(
            "prefix cache: {config} on {workload} served up to {:.0}% of prompt tokens from the \
             engine's cache ({n} level(s), worst at {at}) although the workload does not share \
             prompts: those figures measure cached prefill",
            worst * 100.0
        ));
    }
    for (workload, levels) in bursts {
        out.push(format!(
            "burst: {workload} at {} had fewer than {} × concurrency measured requests: the \
             figures describe the first synchronized wave, not steady state",
            levels.into_iter().collect::<Vec<_>>().join(", "),
            fleetbench_loadgen::BURST_FACTOR
        ));
    }
    for (
        (config, workload),
        Errors {
            failed,
            sent,
            kinds,
        },
    ) in errors
    {
        if failed == 0 {
            continue;
        }
        let kinds: Vec<String> = kinds.iter().map(|(k, n)| format!("{n} × {k}")).collect();
        out.push(format!(
            "errors: {config} on {workload}: {failed} of {sent} measured requests failed \
             ({:.1}%: {}); latency figures leave them out",
            100.0 * failed as f64 / sent.max(1) as f64,
            kinds.join(", ")
        ));
    }
    for ((config, workload), s) in splits {
        let counts: Vec<String> = s.clients.iter().map(ToString::to_string).collect();
        out.push(format!(
            "clients: {config} on {workload}: each level's load came from {} client agents \
             ({}), merged exactly; they began within {:.1} ms of each other (clocks known to \
             ±{:.1} ms); the engine's cache counters are not read for a split level",
            counts.join(" or "),
            s.hosts.into_iter().collect::<Vec<_>>().join(", "),
            s.spread_ms,
            s.uncertainty_ms
        ));
    }
    // Configs of one workload measured on different hosts: host and config are confounded.
    let mut by_workload: BTreeMap<&str, Vec<(&str, &BTreeSet<String>)>> = BTreeMap::new();
    for ((w, c), h) in &hosts {
        by_workload.entry(w).or_default().push((c, h));
    }
    for (w, configs) in by_workload {
        let all: BTreeSet<&String> = configs.iter().flat_map(|(_, h)| h.iter()).collect();
        let same = configs.len() < 2
            || configs
                .iter()
                .all(|(_, h)| h.len() == 1 && h.iter().eq(configs[0].1.iter()));
        if !same && all.len() > 1 {
            let list: Vec<String> = configs
                .iter()
                .map(|(c, h)| format!("{c} on {}", h.iter().cloned().collect::<Vec<_>>().join("+")))
                .collect();
            out.push(format!(
                "hosts: the configs of {w} ran on different hosts ({}): a difference between \
                 them may be the hosts'",
                list.join("; ")
            ));
        }
    }
    out
}

/// What every stored level's figures cover: requests counted and left out (failed, ramp-up,
/// drain), the window, whether it was a burst, and the engine's prefix-cache figure. `esc`
/// escapes text for HTML.
pub(crate) fn levels_table(results: &GetResultsResponse, esc: impl Fn(&str) -> String) -> String {
    use std::fmt::Write;
    let mut h = String::from(
        "<table><tr><th class=\"l\">config</th><th class=\"l\">workload</th><th>repeat</th>\
         <th class=\"l\">host</th><th class=\"l\">level</th><th>sent</th><th>error rate</th>\
         <th>left out: failed</th><th>ramp-up</th><th>drain</th><th>window s</th>\
         <th class=\"l\">burst</th><th>cache hits</th><th class=\"l\">cache reset</th></tr>\n",
    );
    for l in &results.levels {
        let Some(r) = &l.result else { continue };
        let left = r.left_out.unwrap_or_default();
        let cache = r.prefix_cache.as_ref();
        let _ = writeln!(
            h,
            "<tr><td class=\"l\">{}</td><td class=\"l\">{}</td><td>{}</td><td class=\"l\">{}</td>\
             <td class=\"l\">{}</td><td>{}</td><td>{:.2}%</td><td>{}</td><td>{}</td><td>{}</td>\
             <td>{}</td><td class=\"l\">{}</td><td>{}</td><td class=\"l\">{}</td></tr>",
            esc(&l.config_name),
            esc(&l.workload),
            l.repeat,
            esc(&l.host),
            esc(&label(l)),
            r.sent,
            100.0 * r.error_rate,
            left.failed,
            left.ramp_up,
            left.drain,
            r.window_s
                .map(|w| format!("{w:.1}"))
                .unwrap_or_else(|| "-".into()),
            if r.burst { "burst" } else { "" },
            cache
                .and_then(|c| c.hit_rate)
                .map(|x| format!("{:.1}%", 100.0 * x))
                .unwrap_or_else(|| "-".into()),
            esc(cache.map(|c| c.reset.as_str()).unwrap_or("")),
        );
    }
    h.push_str("</table>\n");
    h
}

/// Error rate against load, one line per config (mean over repeats), per workload.
pub(crate) fn error_rate_charts(results: &GetResultsResponse, colors: &Colors) -> Vec<Chart> {
    // workload → config → x → (sum, n)
    let mut data: BTreeMap<&str, RateByLoad<'_>> = BTreeMap::new();
    let mut rate_axis = BTreeMap::new();
    for l in &results.levels {
        let Some(r) = &l.result else { continue };
        let Some(lv) = r.level else { continue };
        let Some(x) = lv.request_rate.or(lv.concurrency.map(f64::from)) else {
            continue;
        };
        rate_axis.insert(l.workload.as_str(), lv.request_rate.is_some());
        let e = data
            .entry(&l.workload)
            .or_default()
            .entry(&l.config_name)
            .or_default()
            .entry(x.to_bits())
            .or_insert((x, 0.0, 0));
        e.1 += r.error_rate;
        e.2 += 1;
    }
    data.into_iter()
        .map(|(w, configs)| {
            let x_label = if rate_axis.get(w).copied().unwrap_or(false) {
                "request rate (req/s)"
            } else {
                "concurrency"
            };
            let mut chart = Chart::new(
                &format!("{w}: error rate (failed / sent)"),
                x_label,
                "error rate",
            );
            for (c, points) in configs {
                let mut pts: Vec<(f64, f64)> = points
                    .values()
                    .map(|(x, s, n)| (*x, s / f64::from(*n)))
                    .collect();
                pts.sort_by(|a, b| a.0.total_cmp(&b.0));
                chart.lines.push(Line {
                    name: c.to_string(),
                    color: colors.of(c),
                    points: pts,
                    dashed: false,
                    spread: Vec::new(),
                });
            }
            chart
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use fleetbench_proto::agentpb::{LevelResult, LoadLevel, PrefixCache};
    use fleetbench_proto::controllerpb::Job;

    fn level(config: &str, host: &str, c: u32, f: impl Fn(&mut LevelResult)) -> StoredLevel {
        let mut r = LevelResult {
            level: Some(LoadLevel {
                concurrency: Some(c),
                ..Default::default()
            }),
            completed: 100,
            sent: 100,
            outcome: fleetbench_proto::agentpb::LevelOutcome::Ok as i32,
            ..Default::default()
        };
        f(&mut r);
        StoredLevel {
            job_id: "j".into(),
            host: host.into(),
            config_name: config.into(),
            workload: "random-256-128".into(),
            result: Some(r),
            ..Default::default()
        }
    }

    fn results(levels: Vec<StoredLevel>) -> GetResultsResponse {
        GetResultsResponse {
            jobs: vec![Job {
                id: "j".into(),
                file_name: "quickstart.toml".into(),
                spec_toml: include_str!("../../../examples/quickstart.toml").into(),
                ..Default::default()
            }],
            levels,
            ..Default::default()
        }
    }

    #[test]
    fn notes_name_cache_hits_bursts_errors_and_mixed_hosts() {
        let cache = |h: f64| {
            move |r: &mut LevelResult| {
                r.prefix_cache = Some(PrefixCache {
                    hit_rate: Some(h),
                    ..Default::default()
                })
            }
        };
        let clean = results(vec![
            level("A", "h1", 8, cache(0.01)),
            level("B", "h1", 8, cache(0.0)),
        ]);
        assert!(notes(&clean).is_empty(), "{:?}", notes(&clean));

        let r = results(vec![
            level("A", "h1", 8, cache(0.5)),
            level("A", "h1", 64, |r| {
                r.burst = true;
                r.failed = 20;
                r.error_rate = 0.2;
                r.failures_by_kind = [("http_500".to_string(), 20)].into_iter().collect();
            }),
            level("B", "h2", 8, cache(0.0)),
        ]);
        let n = notes(&r);
        assert_eq!(n.len(), 4, "{n:#?}");
        assert!(
            n[0].starts_with("prefix cache: A on random-256-128 served up to 50%"),
            "{}",
            n[0]
        );
        assert!(n[0].contains("c=8"), "{}", n[0]);
        assert!(
            n[1].starts_with("burst: random-256-128 at c=64"),
            "{}",
            n[1]
        );
        assert!(
            n[2].contains("20 of 200 measured requests failed (10.0%: 20 × http_500)"),
            "{}",
            n[2]
        );
        assert!(n[3].contains("A on h1; B on h2"), "{}", n[3]);
    }

    #[test]
    fn a_split_level_says_from_how_many_clients_and_how_closely_they_began() {
        use fleetbench_proto::agentpb::{LevelClient, LevelClients};
        let split = |spread: f64| {
            move |r: &mut LevelResult| {
                r.clients = Some(LevelClients {
                    clients: ["d1", "d2"]
                        .iter()
                        .map(|h| LevelClient {
                            host: h.to_string(),
                            ..Default::default()
                        })
                        .collect(),
                    start_spread_ms: spread,
                    clock_uncertainty_ms: 0.3,
                })
            }
        };
        let r = results(vec![
            level("A", "d1", 8, split(1.5)),
            level("A", "d1", 64, split(4.25)),
        ]);
        let n = notes(&r);
        assert_eq!(n.len(), 1, "{n:#?}");
        assert!(
            n[0].starts_with(
                "clients: A on random-256-128: each level's load came from 2 client agents \
                 (d1, d2), merged exactly; they began within 4.2 ms of each other (clocks known \
                 to ±0.3 ms)"
            ),
            "{}",
            n[0]
        );
    }
}
