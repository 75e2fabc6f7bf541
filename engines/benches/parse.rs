//! Throughput of the per-line work the agent does on every engine log line (fact parsing) and
//! on every scrape (metric mapping), on the recorded fixtures. Prints figures; asserts nothing.
//!
//! `cargo bench -p fleetbench-engines --bench parse`

use std::time::Instant;

use fleetbench_engines::{EngineKind, logs, map_metrics};

fn fixture(rel: &str) -> String {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(rel);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn lines_per_s(kind: EngineKind, rel: &str, rounds: usize) {
    let text = fixture(rel);
    let lines: Vec<&str> = text.lines().collect();
    let start = Instant::now();
    let mut facts = 0usize;
    for _ in 0..rounds {
        let mut p = logs::parser(kind);
        for l in &lines {
            facts += p.parse_line(l).len();
        }
    }
    let s = start.elapsed().as_secs_f64();
    let n = (lines.len() * rounds) as f64;
    println!(
        "{:<9} {rel:<45} {:>10.0} lines/s  {:>6.2} µs/line  ({facts} facts)",
        kind.as_str(),
        n / s,
        s / n * 1e6
    );
}

fn scrapes_per_s(kind: EngineKind, rel: &str, rounds: usize) {
    let text = fixture(rel);
    let start = Instant::now();
    let mut series = 0usize;
    for _ in 0..rounds {
        series += map_metrics(kind, &text).raw.len();
    }
    let s = start.elapsed().as_secs_f64();
    println!(
        "{:<9} {rel:<45} {:>10.0} scrapes/s {:>6.1} µs/scrape ({} series each)",
        kind.as_str(),
        rounds as f64 / s,
        s / rounds as f64 * 1e6,
        series / rounds
    );
}

fn main() {
    lines_per_s(
        EngineKind::Llamacpp,
        "llamacpp/startup_verbose_np4_c4096.log",
        200,
    );
    lines_per_s(EngineKind::Sglang, "sglang/startup_0.5.9_tp4.log", 200);
    lines_per_s(
        EngineKind::Sglang,
        "sglang/startup_0.5.23_dp_attention.log",
        200,
    );
    lines_per_s(EngineKind::Vllm, "vllm/startup_0.33_tp2.log", 200);
    scrapes_per_s(EngineKind::Sglang, "metrics/sglang_tp2.txt", 2000);
    scrapes_per_s(EngineKind::Vllm, "metrics/vllm_0.33_dp2.txt", 2000);
    scrapes_per_s(EngineKind::Llamacpp, "metrics/llamacpp_busy_np4.txt", 2000);
}
