//! What a finished job leaves for people: the comparison printed in the terminal, and a
//! report directory with `results.json`, `results.csv` and a self-contained `report.html`
//! (inline SVG plots and CSS, nothing fetched when it is opened).
//!
//! Used by `fleetbench run` (at the end of a job), `compare`, `report` and `diff`.

use fleetbench_proto::Word;
use std::path::{Path, PathBuf};

use anyhow::Context;
use fleetbench_proto::agentpb::CrashClass;
use fleetbench_proto::controllerpb::{CompareResponse, GetResultsResponse};

mod charts;
mod csv_out;
pub mod diff;
mod html;
mod json_out;
mod plots;
pub mod protocol;
#[cfg(test)]
mod render_tests;
mod replicas;
pub mod table;

pub use json_out::compare_json;
pub(crate) use json_out::results_json;
pub use table::print_compare;

/// Writes `results.json`, `results.csv` and `report.html` into `dir` (created if missing) and
/// returns their paths.
pub fn write_all(
    dir: &Path,
    results: &GetResultsResponse,
    compare: &CompareResponse,
) -> anyhow::Result<Vec<PathBuf>> {
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let json = dir.join("results.json");
    let text = serde_json::to_string_pretty(&json_out::results_json(results, compare))?;
    std::fs::write(&json, text).with_context(|| format!("writing {}", json.display()))?;

    let csv = dir.join("results.csv");
    csv_out::write_csv(&csv, results).with_context(|| format!("writing {}", csv.display()))?;

    let html = dir.join("report.html");
    std::fs::write(&html, html::render(results, compare))
        .with_context(|| format!("writing {}", html.display()))?;
    Ok(vec![json, csv, html])
}

/// The line a person reads first about a crash: its summary, else `Type: message`.
pub fn crash_line(crash: &fleetbench_proto::agentpb::Crash) -> String {
    if !crash.summary.is_empty() {
        return crash.summary.clone();
    }
    match (crash.exception_type.is_empty(), crash.message.is_empty()) {
        (false, false) => format!("{}: {}", crash.exception_type, crash.message),
        (false, true) => crash.exception_type.clone(),
        (true, false) => crash.message.clone(),
        (true, true) => CrashClass::word_of(crash.class),
    }
}

/// A number with thousands separators and `digits` decimals: `12,345.6`.
pub fn fmt_num(x: f64, digits: usize) -> String {
    if !x.is_finite() {
        return "-".into();
    }
    let s = format!("{:.*}", digits, x.abs());
    let (int, frac) = s
        .split_once('.')
        .map_or((s.as_str(), None), |(i, f)| (i, Some(f)));
    let mut grouped = String::new();
    for (i, c) in int.chars().enumerate() {
        if i > 0 && (int.len() - i) % 3 == 0 {
            grouped.push(',');
        }
        grouped.push(c);
    }
    let sign = if x < 0.0 && s.chars().any(|c| c.is_ascii_digit() && c != '0') {
        "-"
    } else {
        ""
    };
    match frac {
        Some(f) => format!("{sign}{grouped}.{f}"),
        None => format!("{sign}{grouped}"),
    }
}

/// A latency in ms with sensible precision: `0.42`, `12.3`, `1,234`.
pub fn fmt_ms(x: f64) -> String {
    if x == 0.0 {
        "-".into()
    } else if x < 1.0 {
        fmt_num(x, 2)
    } else if x < 100.0 {
        fmt_num(x, 1)
    } else {
        fmt_num(x, 0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_read_well() {
        assert_eq!(fmt_num(1234567.891, 1), "1,234,567.9");
        assert_eq!(fmt_num(999.0, 0), "999");
        assert_eq!(fmt_num(-1500.0, 0), "-1,500");
        assert_eq!(fmt_ms(0.4213), "0.42");
        assert_eq!(fmt_ms(12.34), "12.3");
        assert_eq!(fmt_ms(2345.6), "2,346");
    }
}
