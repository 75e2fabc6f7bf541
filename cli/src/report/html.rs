//! `report.html`: one self-contained page (inline CSS and SVG, no scripts, nothing fetched).

use fleetbench_proto::Word;
use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write;

use fleetbench_proto::controllerpb::{
    CompareGroup, CompareResponse, CrashInfo, GetResultsResponse, JobState, RunState,
};

use super::charts::{self, Colors, ENGINE_SERIES, GPU_SERIES};
use super::plots::{Chart, svg};
use super::table::winner_note;
use super::{crash_line, fmt_ms, fmt_num};
use fleetbench_proto::agentpb::CrashClass;

const CSS: &str = r#"
body { font-family: system-ui, -apple-system, "Segoe UI", sans-serif; margin: 24px auto; max-width: 1240px; color: #222; padding: 0 16px; }
h1 { font-size: 1.6em; margin-bottom: 4px; } h2 { margin-top: 36px; border-bottom: 1px solid #ddd; padding-bottom: 4px; }
.meta { color: #666; font-size: 0.9em; }
table { border-collapse: collapse; margin: 12px 0; font-size: 0.85em; }
th, td { padding: 4px 8px; border-bottom: 1px solid #e5e5e5; text-align: right; white-space: nowrap; }
th { background: #f5f5f5; } td.l, th.l { text-align: left; }
tr.winner td { background: #eaf6ea; font-weight: 600; } tr.crashed td { background: #fdecec; color: #a00; }
tr.diff td { background: #fff8e1; } tr.first td { border-top: 2px solid #ccc; }
.swatch { display: inline-block; width: 10px; height: 10px; border-radius: 2px; margin-right: 6px; }
.charts { display: flex; flex-wrap: wrap; gap: 12px; } .charts svg { border: 1px solid #eee; }
.note { background: #f7f7f7; border-left: 4px solid #bbb; padding: 8px 12px; color: #555; }
.crash { border-left: 4px solid #c00; padding: 6px 12px; margin: 12px 0; background: #fff6f6; }
pre { background: #f6f6f6; padding: 8px; overflow-x: auto; font-size: 0.8em; }
code { font-size: 0.9em; } td.wrap { white-space: normal; max-width: 520px; text-align: left; }
"#;

/// Escapes text for HTML.
pub(crate) fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

pub(crate) fn render(results: &GetResultsResponse, compare: &CompareResponse) -> String {
    let colors = Colors::new(results, compare);
    let title = match results.jobs.as_slice() {
        [one] => format!("fleetbench report: {}", one.name),
        jobs => format!("fleetbench report: {} jobs", jobs.len()),
    };
    let mut h = String::new();
    let _ = write!(
        h,
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
         <meta name=\"viewport\" content=\"width=device-width\"><title>{}</title><style>{CSS}</style></head><body>\n<h1>{}</h1>\n",
        esc(&title),
        esc(&title)
    );
    header(&mut h, results, compare);
    comparison(&mut h, compare, &colors);
    sweeps(&mut h, compare, &colors);
    let replicas = super::replicas::charts(results, &colors);
    if !replicas.is_empty() {
        h.push_str("<h2>Replicas behind a router</h2>\n<p class=\"meta\">Each replica's share of the deployment's generated tokens and its own cache-hit rate (its engine's counters, mean over repeats); replica 0 solid, the others dashed.</p>\n<div class=\"charts\">\n");
        for c in &replicas {
            chart_html(&mut h, c);
        }
        h.push_str("</div>\n");
    }
    let errors = super::protocol::error_rate_charts(results, &colors);
    if !errors.is_empty() {
        h.push_str("<h2>Error rate</h2>\n<p class=\"meta\">Failed over sent requests per level (mean over repeats); latency figures leave failed requests out.</p>\n<div class=\"charts\">\n");
        for c in &errors {
            chart_html(&mut h, c);
        }
        h.push_str("</div>\n");
    }
    if !results.levels.is_empty() {
        h.push_str("<h2>What each level's figures cover</h2>\n<p class=\"meta\">Latency percentiles cover the completed requests inside the measurement window; failed requests count in the error rate, requests intended during the ramp-up or after the window are left out. Cache hits are the engine's own count of prompt tokens served from its prefix cache.</p>\n");
        h.push_str(&super::protocol::levels_table(results, esc));
    }
    telemetry(&mut h, results, &colors);
    crashes(&mut h, compare);
    configs(&mut h, results, &colors);
    runs(&mut h, results);
    h.push_str("</body></html>\n");
    h
}

fn header(h: &mut String, results: &GetResultsResponse, compare: &CompareResponse) {
    for j in &results.jobs {
        let state = JobState::word_of(j.state);
        let _ = writeln!(
            h,
            "<p class=\"meta\">job <code>{}</code> ({}) · {} · trials {}/{} · levels {}/{} · crashes {}{}</p>",
            esc(&j.id),
            esc(&j.file_name),
            esc(&state),
            j.trials_done,
            j.trials_total,
            j.levels_done,
            j.levels_total,
            j.crashes,
            if j.error.is_empty() {
                String::new()
            } else {
                format!(" · error: {}", esc(&j.error))
            },
        );
    }
    let hosts: BTreeSet<&str> = results.runs.iter().map(|r| r.host.as_str()).collect();
    let _ = writeln!(
        h,
        "<p class=\"meta\">{} level results from {} engine runs on {} host(s); {} crossover(s), {} crash(es).</p>",
        results.levels.len(),
        results.runs.len(),
        hosts.len(),
        compare.crossovers.len(),
        compare.crashes.len()
    );
    let notes = super::protocol::notes(results);
    if !notes.is_empty() {
        h.push_str("<h2>Measurement notes</h2>\n<ul>\n");
        for n in notes {
            let _ = writeln!(h, "<li class=\"note\">{}</li>", esc(&n));
        }
        h.push_str("</ul>\n");
    }
}

fn workloads(compare: &CompareResponse) -> Vec<(&str, Vec<&CompareGroup>)> {
    let mut out: Vec<(&str, Vec<&CompareGroup>)> = Vec::new();
    for g in &compare.groups {
        match out.iter_mut().find(|(w, _)| *w == g.workload) {
            Some((_, gs)) => gs.push(g),
            None => out.push((&g.workload, vec![g])),
        }
    }
    out
}

fn comparison(h: &mut String, compare: &CompareResponse, colors: &Colors) {
    h.push_str("<h2>Comparison</h2>\n<p class=\"meta\">Throughput is the mean over repeats (± their standard deviation); latencies are the mean of each repeat's percentile. The winner has the higher geometric mean; its margin is significant when a t-test on the log throughputs of the winner and the runner-up (paired by repeat block in a blocked job, through a shared config across jobs; the variance moderated over the job's levels) rejects equality at the stated alpha after Holm's correction over every level tested, and its interval is the one that test implies (needs 2+ repeats per side); a config that crashed, failed, or exceeded the SLO's max_error_rate cannot win.</p>\n");
    if compare.groups.is_empty() {
        h.push_str("<p class=\"note\">No level results were stored for this job.</p>\n");
    }
    for (w, groups) in workloads(compare) {
        let _ = writeln!(
            h,
            "<h3>Workload {}</h3>\n<table><tr><th class=\"l\">level</th><th class=\"l\">config</th><th>out tok/s</th><th>±</th><th>req/s</th><th>TTFT p50</th><th>TTFT p99</th><th>ITL p50</th><th>ITL p99</th><th>E2E p50</th><th>E2E p99</th><th>errors</th><th class=\"l\">verdict</th></tr>",
            esc(w)
        );
        for g in &groups {
            for (i, c) in g.configs.iter().enumerate() {
                let winner = c.config_name == g.winner_config;
                let mut class = if c.crashed {
                    "crashed"
                } else if winner {
                    "winner"
                } else {
                    ""
                }
                .to_string();
                if i == 0 {
                    class.push_str(" first");
                }
                let verdict = if c.crashed {
                    format!("crashed ({})", CrashClass::word_of(c.crash_class))
                } else if winner {
                    winner_note(g)
                } else if !c.excluded_reason.is_empty() {
                    format!("cannot win: {}", c.excluded_reason)
                } else {
                    String::new()
                };
                let _ = writeln!(
                    h,
                    "<tr class=\"{class}\"><td class=\"l\">{}</td><td class=\"l\"><span class=\"swatch\" style=\"background:{}\"></span>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td class=\"l\">{}</td></tr>",
                    if i == 0 {
                        esc(&g.level_label)
                    } else {
                        String::new()
                    },
                    colors.css(&c.config_name),
                    esc(&c.config_name),
                    if c.output_tokens_per_s > 0.0 {
                        fmt_num(c.output_tokens_per_s, 1)
                    } else {
                        "-".into()
                    },
                    fmt_num(c.output_tokens_per_s_spread, 1),
                    fmt_num(c.requests_per_s, 2),
                    fmt_ms(c.ttft_p50_ms),
                    fmt_ms(c.ttft_p99_ms),
                    fmt_ms(c.itl_p50_ms),
                    fmt_ms(c.itl_p99_ms),
                    fmt_ms(c.e2e_p50_ms),
                    fmt_ms(c.e2e_p99_ms),
                    c.errors,
                    esc(&verdict),
                );
            }
        }
        h.push_str("</table>\n");
        // The test behind each verdict: effect, interval, p-values, detectable effect.
        let _ = writeln!(
            h,
            "<p class=\"note\">Welch's t on log output tok/s, two-sided, alpha {}, Holm over {} tested level(s).</p><ul class=\"note\">",
            compare.alpha, compare.tests
        );
        for g in groups.iter().filter(|g| !g.verdict.is_empty()) {
            let _ = writeln!(h, "<li>{}: {}</li>", esc(&g.level_label), esc(&g.verdict));
        }
        h.push_str("</ul>\n");
    }
    if !compare.crossovers.is_empty() {
        h.push_str("<h3>Crossovers</h3><ul>\n");
        for x in &compare.crossovers {
            let _ = writeln!(
                h,
                "<li>{}: <b>{}</b> wins at {}, <b>{}</b> wins at {}</li>",
                esc(&x.workload),
                esc(&x.from_winner),
                esc(&x.from_level),
                esc(&x.to_winner),
                esc(&x.to_level)
            );
        }
        h.push_str("</ul>\n");
    }
}

fn chart_html(h: &mut String, chart: &Chart) {
    match svg(chart, 600, 360) {
        Ok(s) => h.push_str(&s),
        Err(e) => {
            let _ = write!(
                h,
                "<p class=\"note\">{}: {}</p>",
                esc(&chart.title),
                esc(&e.to_string())
            );
        }
    }
}

fn sweeps(h: &mut String, compare: &CompareResponse, colors: &Colors) {
    h.push_str("<h2>Load sweeps</h2>\n");
    for (w, groups) in workloads(compare) {
        h.push_str("<div class=\"charts\">\n");
        chart_html(h, &charts::throughput(w, &groups, colors));
        chart_html(
            h,
            &charts::latency(w, "TTFT", &groups, colors, |c| {
                (c.ttft_p50_ms, c.ttft_p99_ms)
            }),
        );
        chart_html(
            h,
            &charts::latency(w, "ITL", &groups, colors, |c| (c.itl_p50_ms, c.itl_p99_ms)),
        );
        chart_html(
            h,
            &charts::latency(w, "E2E latency", &groups, colors, |c| {
                (c.e2e_p50_ms, c.e2e_p99_ms)
            }),
        );
        h.push_str("</div>\n");
    }
}

fn telemetry(h: &mut String, results: &GetResultsResponse, colors: &Colors) {
    h.push_str("<h2>Over the run</h2>\n<p class=\"meta\">Coloured bars along the bottom show which config's engine ran when; red lines mark crashes.</p>\n");
    let legend: Vec<String> = colors
        .0
        .iter()
        .map(|n| {
            format!(
                "<span class=\"swatch\" style=\"background:{}\"></span>{}",
                colors.css(n),
                esc(n)
            )
        })
        .collect();
    let _ = writeln!(h, "<p>{}</p>", legend.join(" &nbsp; "));
    let gpu: Vec<Chart> = GPU_SERIES
        .iter()
        .filter_map(|s| charts::over_time(results, *s, colors))
        .collect();
    let engine: Vec<Chart> = ENGINE_SERIES
        .iter()
        .filter_map(|s| charts::over_time(results, *s, colors))
        .collect();
    if gpu.is_empty() {
        h.push_str("<p class=\"note\">No GPU telemetry: the hosts reported no GPUs (or NVML was unavailable), so there is no GPU power or utilisation to show.</p>\n");
    }
    if engine.is_empty() {
        h.push_str("<p class=\"note\">No engine metrics were scraped during this job (running requests, KV-cache usage).</p>\n");
    }
    h.push_str("<div class=\"charts\">\n");
    for c in gpu.iter().chain(&engine) {
        chart_html(h, c);
    }
    h.push_str("</div>\n");
}

fn crashes(h: &mut String, compare: &CompareResponse) {
    h.push_str("<h2>Crashes</h2>\n");
    if compare.crashes.is_empty() {
        h.push_str("<p class=\"meta\">No engine crashed.</p>\n");
        return;
    }
    // The same crash in every repeat is one finding, shown once with all its runs.
    let mut groups: Vec<(&CrashInfo, Vec<&str>)> = Vec::new();
    for c in &compare.crashes {
        let same = |g: &CrashInfo| {
            (&g.config_name, &g.host, &g.workload, &g.level_label)
                == (&c.config_name, &c.host, &c.workload, &c.level_label)
                && g.crash.as_ref().map(crash_line) == c.crash.as_ref().map(crash_line)
        };
        match groups.iter_mut().find(|(g, _)| same(g)) {
            Some((_, runs)) => runs.push(&c.run_id),
            None => groups.push((c, vec![&c.run_id])),
        }
    }
    for (c, runs) in groups {
        let Some(k) = &c.crash else { continue };
        let _ = writeln!(
            h,
            "<div class=\"crash\"><b>{}</b> on {} · {} {} · <b>{}</b>{}<br><code>{}</code> <span class=\"meta\">run{} {}</span>",
            esc(&c.config_name),
            esc(&c.host),
            esc(&c.workload),
            esc(&c.level_label),
            esc(&CrashClass::word_of(k.class)),
            if runs.len() > 1 {
                format!(" · {} times", runs.len())
            } else {
                String::new()
            },
            esc(&crash_line(k)),
            if runs.len() > 1 { "s" } else { "" },
            esc(&runs.join(", "))
        );
        if !k.frames.is_empty() {
            let _ = write!(
                h,
                "<pre>Traceback (last frames):\n{}</pre>",
                esc(&k.frames.join("\n"))
            );
        }
        if !k.log_tail.is_empty() {
            let _ = write!(
                h,
                "<details><summary>log tail ({} lines)</summary><pre>{}</pre></details>",
                k.log_tail.len(),
                esc(&k.log_tail.join("\n"))
            );
        }
        h.push_str("</div>\n");
    }
}

fn configs(h: &mut String, results: &GetResultsResponse, colors: &Colors) {
    h.push_str("<h2>Configs side by side</h2>\n<p class=\"meta\">Highlighted rows differ between configs.</p>\n");
    if results.configs.is_empty() {
        h.push_str("<p class=\"note\">No configs stored.</p>\n");
        return;
    }
    // row name -> value per config
    let mut rows: BTreeMap<(u8, String), Vec<String>> = BTreeMap::new();
    let n = results.configs.len();
    for (i, c) in results.configs.iter().enumerate() {
        let mut set = |order: u8, key: String, value: String| {
            rows.entry((order, key))
                .or_insert_with(|| vec!["—".into(); n])[i] = value;
        };
        let kind = fleetbench_proto::agentpb::EngineKind::word_of(c.kind);
        set(0, "engine".into(), kind);
        set(0, "config id".into(), c.config_id.clone());
        if let Some(s) = &c.spec {
            set(1, "profile".into(), s.profile.clone());
            set(1, "model".into(), s.model.clone());
            for f in &s.flags {
                set(
                    2,
                    f.name.clone(),
                    f.value.clone().unwrap_or_else(|| "on".into()),
                );
            }
            for (k, v) in &s.env {
                set(3, format!("env {k}"), v.clone());
            }
        }
    }
    h.push_str("<table><tr><th class=\"l\"></th>");
    for c in &results.configs {
        // Same naming as the comparison: a name two jobs use gets its job's id prefix.
        let clash = results.configs.iter().filter(|o| o.name == c.name).count() > 1;
        let shown = if clash {
            format!(
                "{}@{}",
                c.name,
                c.job_id.chars().take(8).collect::<String>()
            )
        } else {
            c.name.clone()
        };
        let _ = write!(
            h,
            "<th class=\"l\"><span class=\"swatch\" style=\"background:{}\"></span>{}</th>",
            colors.css(&shown),
            esc(&shown)
        );
    }
    h.push_str("</tr>\n");
    for ((_, key), values) in &rows {
        let differs = values.iter().any(|v| v != &values[0]);
        let _ = write!(
            h,
            "<tr{}><td class=\"l\"><code>{}</code></td>",
            if differs { " class=\"diff\"" } else { "" },
            esc(key)
        );
        for v in values {
            let _ = write!(h, "<td class=\"l\">{}</td>", esc(v));
        }
        h.push_str("</tr>\n");
    }
    h.push_str("</table>\n");
}

/// Every engine run with its state and the facts its log gave (JSON facts such as
/// `server_args` folded away; `fleetbench diff` compares them).
fn runs(h: &mut String, results: &GetResultsResponse) {
    h.push_str("<h2>Engine runs</h2>\n");
    if results.runs.is_empty() {
        h.push_str("<p class=\"note\">No engine runs stored.</p>\n");
        return;
    }
    h.push_str("<table><tr><th class=\"l\">run</th><th class=\"l\">config</th><th class=\"l\">host</th><th class=\"l\">workload</th><th>repeat</th><th>attempt</th><th class=\"l\">state</th><th>start s</th><th class=\"l\">log facts</th></tr>\n");
    for r in &results.runs {
        let state = RunState::word_of(r.state);
        let facts: Vec<String> = r
            .facts
            .iter()
            .filter(|f| !f.value.trim_start().starts_with('{'))
            .map(|f| format!("{}={}", f.key, f.value))
            .collect();
        let _ = writeln!(
            h,
            "<tr><td class=\"l\"><code>{}</code></td><td class=\"l\">{}</td><td class=\"l\">{}</td><td class=\"l\">{}</td><td>{}</td><td>{}</td><td class=\"l\">{}</td><td>{}</td><td class=\"wrap\">{}</td></tr>",
            esc(&r.run_id),
            esc(&r.config_name),
            esc(&r.host),
            esc(&r.workload),
            r.repeat,
            r.attempt,
            esc(&state),
            fmt_num(r.engine_start_s, 1),
            esc(&facts.join(" "))
        );
    }
    h.push_str("</table>\n");
}
