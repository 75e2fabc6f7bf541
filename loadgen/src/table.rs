//! Plain-text rendering of level reports, in the style of SGLang's `bench_serving`.

use std::fmt::Write;

use crate::report::LevelReport;
use crate::stats::Stats;

fn line(out: &mut String, label: &str, value: impl std::fmt::Display) {
    let _ = writeln!(out, "{label:<42}{value}");
}

fn section(out: &mut String, title: &str) {
    let _ = writeln!(out, "{:-^60}", title);
}

fn stats(out: &mut String, name: &str, s: &Stats) {
    line(out, &format!("Mean {name} (ms):"), format!("{:.2}", s.mean));
    for (k, v) in sorted(s) {
        let label = if k == "p50" {
            format!("Median {name} (ms):")
        } else {
            format!("P{} {name} (ms):", &k[1..])
        };
        line(out, &label, format!("{v:.2}"));
    }
    line(out, &format!("Max {name} (ms):"), format!("{:.2}", s.max));
}

fn sorted(s: &Stats) -> Vec<(&String, f64)> {
    let mut v: Vec<(&String, f64)> = s.percentiles.iter().map(|(k, v)| (k, *v)).collect();
    v.sort_by(|a, b| {
        let pa: f64 = a.0[1..].parse().unwrap_or(0.0);
        let pb: f64 = b.0[1..].parse().unwrap_or(0.0);
        pa.total_cmp(&pb)
    });
    v
}

/// The block printed after each level.
pub fn level_block(model: &str, r: &LevelReport) -> String {
    let mut out = String::new();
    let title = match (r.concurrency, r.request_rate) {
        (c, Some(rate)) => format!(
            " rate {rate}/s{} ",
            c.map(|c| format!(", max concurrency {c}"))
                .unwrap_or_default()
        ),
        (Some(c), None) => format!(" concurrency {c} "),
        (None, None) => " level ".into(),
    };
    let _ = writeln!(out, "{:=^60}", title);
    line(&mut out, "Model:", model);
    line(&mut out, "Successful requests:", r.completed);
    line(&mut out, "Failed requests:", r.failed);
    for (k, n) in &r.failures_by_kind {
        line(&mut out, &format!("  {k}:"), n);
    }
    line(
        &mut out,
        "Error rate (failed / sent):",
        format!("{:.4}", r.error_rate),
    );
    if let Some(w) = r.window_s {
        line(
            &mut out,
            "Measurement window (s):",
            format!("{w:.2} after a {:.2} s ramp-up", r.ramp_up_s.unwrap_or(0.0)),
        );
        line(
            &mut out,
            "Left out (ramp-up / drain):",
            format!("{} / {}", r.left_out.ramp_up, r.left_out.drain),
        );
    }
    if r.burst {
        line(
            &mut out,
            "Burst:",
            format!(
                "yes: fewer than {} x concurrency requests (the first wave, not steady state)",
                crate::level::BURST_FACTOR
            ),
        );
    }
    if r.cancelled {
        line(&mut out, "Cancelled:", "yes (partial results)");
    }
    line(
        &mut out,
        "Benchmark duration (s):",
        format!("{:.2}", r.duration_s),
    );
    line(&mut out, "Total input tokens:", r.input_tokens);
    line(&mut out, "Total generated tokens:", r.output_tokens);
    // Conversations and traces state the reuse they design (random prompts state none).
    if let Some(d) = r.designed_reuse.filter(|d| *d > 0.0) {
        line(
            &mut out,
            "Designed prefix reuse:",
            format!(
                "{:.1}% ({} of {} prompt tokens)",
                d * 100.0,
                r.reusable_tokens_all,
                r.prompt_tokens_all
            ),
        );
    }
    line(
        &mut out,
        "Request throughput (req/s):",
        format!("{:.2}", r.requests_per_s),
    );
    line(
        &mut out,
        "Goodput (req/s):",
        format!("{:.2}", r.goodput_requests_per_s),
    );
    line(
        &mut out,
        "Output token throughput (tok/s):",
        format!("{:.2}", r.output_tokens_per_s),
    );
    line(
        &mut out,
        "Total token throughput (tok/s):",
        format!("{:.2}", r.total_tokens_per_s),
    );
    line(&mut out, "Peak concurrency:", r.peak_concurrency);
    section(&mut out, "Time to First Token");
    stats(&mut out, "TTFT", &r.ttft_ms);
    if r.ttft_answer_ms.count > 0 && r.ttft_answer_ms != r.ttft_ms {
        section(&mut out, "Time to First Answer Token (after reasoning)");
        stats(&mut out, "TTFAT", &r.ttft_answer_ms);
    }
    section(&mut out, "Inter-Token Latency (per token)");
    stats(&mut out, "ITL", &r.itl_ms);
    section(&mut out, "Inter-Chunk Latency (per SSE event)");
    stats(&mut out, "ITL/chunk", &r.itl_chunk_ms);
    section(&mut out, "Time per Output Token (excl. 1st token)");
    stats(&mut out, "TPOT", &r.tpot_ms);
    section(&mut out, "End-to-End Latency");
    stats(&mut out, "E2E", &r.e2e_ms);
    section(&mut out, "Client Queueing");
    stats(&mut out, "Queue", &r.queue_ms);
    if let Some(e) = &r.error {
        line(&mut out, "Error:", e);
    }
    let _ = writeln!(out, "{}", "=".repeat(60));
    out
}

/// One line per level, for the end of a sweep.
pub fn summary(levels: &[LevelReport]) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{:>8} {:>9} {:>8} {:>7} {:>7} {:>11} {:>9} {:>10} {:>10} {:>9} {:>9}",
        "conc",
        "rate/s",
        "ok",
        "failed",
        "err %",
        "out tok/s",
        "req/s",
        "TTFT p50",
        "TTFT p99",
        "ITL p50",
        "ITL p99"
    );
    for r in levels {
        let opt = |v: Option<String>| v.unwrap_or_else(|| "-".into());
        let _ = writeln!(
            out,
            "{:>8} {:>9} {:>8} {:>7} {:>7.2} {:>11.1} {:>9.2} {:>10.2} {:>10.2} {:>9.2} {:>9.2}{}",
            opt(r.concurrency.map(|c| c.to_string())),
            opt(r.request_rate.map(|x| format!("{x}"))),
            r.completed,
            r.failed,
            100.0 * r.error_rate,
            r.output_tokens_per_s,
            r.requests_per_s,
            r.ttft_ms.get("p50").unwrap_or(f64::NAN),
            r.ttft_ms.get("p99").unwrap_or(f64::NAN),
            r.itl_ms.get("p50").unwrap_or(f64::NAN),
            r.itl_ms.get("p99").unwrap_or(f64::NAN),
            if r.burst { "  (burst)" } else { "" },
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_level_block_states_designed_reuse_where_there_is_some() {
        let mut r = LevelReport {
            designed_reuse: Some(0.0),
            ..Default::default()
        };
        assert!(!level_block("m", &r).contains("Designed prefix reuse"));
        r.designed_reuse = Some(0.625);
        r.reusable_tokens_all = 50;
        r.prompt_tokens_all = 80;
        assert!(
            level_block("m", &r).contains("62.5% (50 of 80 prompt tokens)"),
            "{}",
            level_block("m", &r)
        );
    }
}
