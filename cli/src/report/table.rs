//! The comparison as terminal tables: per workload, every level and config with throughput,
//! latency percentiles and errors, the winner with its margin; then crossovers and crashes.

use comfy_table::presets::NOTHING;
use comfy_table::{Cell, CellAlignment, Table, TableComponent};
use fleetbench_proto::Word;
use fleetbench_proto::controllerpb::{CompareGroup, CompareResponse};

use super::{crash_line, fmt_ms, fmt_num};
use fleetbench_proto::agentpb::CrashClass;

/// Prints [`render_compare`] to stdout.
pub fn print_compare(compare: &CompareResponse) {
    print!("{}", render_compare(compare));
}

/// The whole comparison as text.
pub fn render_compare(compare: &CompareResponse) -> String {
    let mut out = String::new();
    if compare.groups.is_empty() {
        out.push_str("no level results to compare\n");
    }
    let mut workloads: Vec<&str> = Vec::new();
    for g in &compare.groups {
        if !workloads.contains(&g.workload.as_str()) {
            workloads.push(&g.workload);
        }
    }
    for w in workloads {
        let groups: Vec<&CompareGroup> =
            compare.groups.iter().filter(|g| g.workload == w).collect();
        out.push_str(&format!("\nWorkload {w}\n"));
        out.push_str(&workload_table(&groups).to_string());
        out.push('\n');
        out.push_str(&format!(
            "Tests on log output tok/s (geometric means), two-sided, alpha {}, Holm over {} \
             tested level(s); each effect's interval is at the level Holm tested it at, so it \
             excludes 0 exactly when the level is significant:\n",
            compare.alpha, compare.tests,
        ));
        tests_lines(&mut out, &groups);
    }
    if !compare.notes.is_empty() {
        out.push_str("\nNotes on the design:\n");
        for n in &compare.notes {
            out.push_str(&format!("  {n}\n"));
        }
    }
    if !compare.crossovers.is_empty() {
        out.push_str("\nCrossovers (the significant winner changes with load):\n");
        for x in &compare.crossovers {
            out.push_str(&format!(
                "  {}: {} wins at {}, {} wins at {}\n",
                x.workload, x.from_winner, x.from_level, x.to_winner, x.to_level
            ));
        }
    }
    if !compare.crashes.is_empty() {
        out.push_str("\nCrashes:\n");
        // The same crash in every repeat is one finding: listed once with all its runs.
        let mut seen: Vec<(String, Option<String>, Vec<&str>)> = Vec::new();
        for c in &compare.crashes {
            let (line, frame) = match &c.crash {
                Some(k) => {
                    // A summary usually starts with the class already.
                    let class = CrashClass::word_of(k.class);
                    let line = crash_line(k);
                    let line = if line.starts_with(&class) {
                        line
                    } else {
                        format!("{class}: {line}")
                    };
                    (line, k.frames.last().cloned())
                }
                None => ("unknown".to_string(), None),
            };
            let head = format!(
                "  {} on {} ({} {}): {line}\n",
                c.config_name, c.host, c.workload, c.level_label
            );
            match seen.iter_mut().find(|(h, _, _)| *h == head) {
                Some((_, _, runs)) => runs.push(&c.run_id),
                None => seen.push((head, frame, vec![&c.run_id])),
            }
        }
        for (head, frame, runs) in seen {
            out.push_str(&head);
            if let Some(f) = frame {
                out.push_str(&format!("      at {}\n", f.trim()));
            }
            let label = if runs.len() == 1 { "run" } else { "runs" };
            out.push_str(&format!("      {label} {}\n", runs.join(", ")));
        }
    }
    out
}

/// A table with a rule under its header and no other lines.
pub(crate) fn compact_table() -> Table {
    let mut t = Table::new();
    t.load_preset(NOTHING)
        .set_style(TableComponent::HeaderLines, '─')
        .set_style(TableComponent::MiddleHeaderIntersections, '─')
        .set_style(TableComponent::LeftHeaderIntersection, '─')
        .set_style(TableComponent::RightHeaderIntersection, '─');
    t
}

fn workload_table(groups: &[&CompareGroup]) -> Table {
    let mut t = compact_table();
    // GPU power only where a host reported it (hosts without GPUs keep the narrow table).
    let power = groups
        .iter()
        .any(|g| g.configs.iter().any(|c| c.gpu_power_w.is_some()));
    let mut header = vec![
        "level",
        "config",
        "out tok/s",
        "±",
        "req/s",
        "TTFT p50",
        "TTFT p99",
        "ITL p50",
        "ITL p99",
        "E2E p50",
        "E2E p99",
        "errors",
        "verdict",
    ];
    if power {
        header.insert(12, "GPU W");
    }
    t.set_header(header);
    for g in groups {
        for (i, c) in g.configs.iter().enumerate() {
            let verdict = if c.crashed {
                format!("CRASHED ({})", CrashClass::word_of(c.crash_class))
            } else if c.config_name == g.winner_config {
                winner_note(g)
            } else if !c.excluded_reason.is_empty() {
                format!("cannot win ({:.1}% errors)", c.error_rate * 100.0)
            } else {
                String::new()
            };
            let level = if i == 0 {
                g.level_label.clone()
            } else {
                String::new()
            };
            let (tput, spread) = if c.output_tokens_per_s > 0.0 {
                (
                    fmt_num(c.output_tokens_per_s, 1),
                    fmt_num(c.output_tokens_per_s_spread, 1),
                )
            } else {
                ("-".into(), "-".into())
            };
            let mut row = vec![
                Cell::new(level),
                Cell::new(&c.config_name),
                Cell::new(tput),
                Cell::new(spread),
                Cell::new(fmt_num(c.requests_per_s, 2)),
                Cell::new(fmt_ms(c.ttft_p50_ms)),
                Cell::new(fmt_ms(c.ttft_p99_ms)),
                Cell::new(fmt_ms(c.itl_p50_ms)),
                Cell::new(fmt_ms(c.itl_p99_ms)),
                Cell::new(fmt_ms(c.e2e_p50_ms)),
                Cell::new(fmt_ms(c.e2e_p99_ms)),
                Cell::new(c.errors),
                Cell::new(verdict),
            ];
            if power {
                let w = c.gpu_power_w.map_or("-".into(), |w| fmt_num(w, 0));
                row.insert(12, Cell::new(w));
            }
            t.add_row(row);
        }
    }
    for col in 2..(if power { 13 } else { 12 }) {
        if let Some(c) = t.column_mut(col) {
            c.set_cell_alignment(CellAlignment::Right);
        }
    }
    t
}

/// `winner +12.3% vs b, significant (p 0.004)`.
pub(crate) fn winner_note(g: &CompareGroup) -> String {
    if g.runner_up_config.is_empty() {
        return "winner (the others crashed, failed or erred)".into();
    }
    let sig = if !g.tested {
        "no spread measured (one repeat)".to_string()
    } else if g.margin_significant {
        format!("significant (p {})", fmt_p(g.p_adjusted))
    } else {
        format!("not significant (p {})", fmt_p(g.p_adjusted))
    };
    format!(
        "winner {:+.1}% vs {}, {sig}",
        g.margin_pct, g.runner_up_config
    )
}

/// A p-value as people read it: three decimals, or "<0.001".
pub(crate) fn fmt_p(p: f64) -> String {
    if p < 0.001 {
        "<0.001".into()
    } else {
        format!("{p:.3}")
    }
}

/// One line per level: the effect with the interval the test implies, the test and its
/// degrees of freedom, and the detectable effect.
fn tests_lines(out: &mut String, groups: &[&CompareGroup]) {
    for g in groups {
        if g.tested {
            let mde = g
                .mde_pct
                .map(|m| format!("; detectable: {m:.1}%"))
                .unwrap_or_default();
            out.push_str(&format!(
                "  {:<10} {} vs {}: {:+.1}% [{:+.1}% .. {:+.1}%] at {:.2}%, p {} (Holm {}), \
                 {}{} ({:.1} df){mde}\n",
                g.level_label,
                g.winner_config,
                g.runner_up_config,
                g.effect_pct,
                g.effect_low_pct,
                g.effect_high_pct,
                g.interval_confidence * 100.0,
                fmt_p(g.p_value),
                fmt_p(g.p_adjusted),
                g.test,
                match (g.moderated, g.history_levels) {
                    (true, 0) => ", moderated".to_string(),
                    (true, h) => format!(", moderated with {h} earlier levels"),
                    (false, _) => String::new(),
                },
                g.df,
            ));
        } else if !g.verdict.is_empty() {
            out.push_str(&format!("  {:<10} {}\n", g.level_label, g.verdict));
        }
        for c in &g.configs {
            if !c.excluded_reason.is_empty() && !c.crashed {
                out.push_str(&format!(
                    "  {:<10} {} cannot win: {}\n",
                    g.level_label, c.config_name, c.excluded_reason
                ));
            }
        }
    }
}
