//! `fleetbench diff`: two engine runs' effective arguments and log facts, only what differs.
//!
//! A run's argv is read into flags (`--flag value`, `--flag=value`, switches, multi-value
//! flags); log facts whose value is a JSON object (SGLang's `server_args`, vLLM's
//! `non_default_args`) are flattened into one entry per field, so a single changed server arg
//! shows as one row instead of one long differing line.

use std::collections::BTreeMap;

use comfy_table::ContentArrangement;
use fleetbench_proto::controllerpb::Run;
use serde_json::Value;

/// One differing entry: its value in run A and in run B (None: absent there).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DiffRow {
    pub key: String,
    pub a: Option<String>,
    pub b: Option<String>,
}

/// What differs between two runs, and how many entries are the same.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunDiff {
    pub rows: Vec<DiffRow>,
    pub same: usize,
}

/// Flags of an argv (program first): `--flag` → `on`, `--flag v1 v2` → `v1 v2`.
pub fn argv_flags(argv: &[String]) -> BTreeMap<String, String> {
    let is_flag = |t: &str| t.starts_with('-') && t.len() > 1 && t.parse::<f64>().is_err();
    let mut out = BTreeMap::new();
    let mut current: Option<String> = None;
    let mut positional = 0;
    for tok in argv.iter().skip(1) {
        if is_flag(tok) {
            if let Some((k, v)) = tok.split_once('=').filter(|_| tok.starts_with("--")) {
                out.insert(k.to_string(), v.to_string());
                current = None;
            } else {
                out.insert(tok.clone(), "on".to_string());
                current = Some(tok.clone());
            }
            continue;
        }
        match &current {
            Some(k) => {
                let v = out.entry(k.clone()).or_default();
                if v == "on" {
                    *v = tok.clone();
                } else {
                    v.push(' ');
                    v.push_str(tok);
                }
            }
            None => {
                out.insert(format!("arg[{positional}]"), tok.clone());
                positional += 1;
            }
        }
    }
    out
}

fn flatten(prefix: &str, v: &Value, out: &mut BTreeMap<String, String>) {
    match v {
        Value::Object(map) => {
            for (k, v) in map {
                flatten(&format!("{prefix}.{k}"), v, out);
            }
        }
        Value::String(s) => {
            out.insert(prefix.to_string(), s.clone());
        }
        other => {
            out.insert(prefix.to_string(), other.to_string());
        }
    }
}

/// Every comparable entry of a run: `argv <flag>`, `<fact>`, `<fact>.<field>`.
pub fn run_entries(run: &Run) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    if let Some(program) = run.argv.first() {
        out.insert("argv program".to_string(), program.clone());
    }
    for (k, v) in argv_flags(&run.argv) {
        out.insert(format!("argv {k}"), v);
    }
    for f in &run.facts {
        match serde_json::from_str::<Value>(&f.value) {
            Ok(v @ Value::Object(_)) => flatten(&f.key, &v, &mut out),
            _ => {
                out.insert(f.key.clone(), f.value.clone());
            }
        }
    }
    out
}

/// The entries that differ between `a` and `b`, sorted by key.
pub fn diff_runs(a: &Run, b: &Run) -> RunDiff {
    let (ea, eb) = (run_entries(a), run_entries(b));
    let mut rows = Vec::new();
    let mut same = 0;
    let keys: std::collections::BTreeSet<&String> = ea.keys().chain(eb.keys()).collect();
    for k in keys {
        let (va, vb) = (ea.get(k), eb.get(k));
        if va == vb {
            same += 1;
        } else {
            rows.push(DiffRow {
                key: k.clone(),
                a: va.cloned(),
                b: vb.cloned(),
            });
        }
    }
    RunDiff { rows, same }
}

fn title(run: &Run) -> String {
    format!("{}\n{} on {}", run.run_id, run.config_name, run.host)
}

/// The diff as a side-by-side table.
pub fn render_diff(a: &Run, b: &Run, d: &RunDiff) -> String {
    let mut t = super::table::compact_table();
    t.set_content_arrangement(ContentArrangement::Dynamic)
        .set_width(160)
        .set_header(vec!["".to_string(), title(a), title(b)]);
    for r in &d.rows {
        t.add_row(vec![
            r.key.clone(),
            r.a.clone().unwrap_or_else(|| "(absent)".into()),
            r.b.clone().unwrap_or_else(|| "(absent)".into()),
        ]);
    }
    let mut out = String::new();
    if d.rows.is_empty() {
        out.push_str("the two runs have the same effective args and log facts\n");
    } else {
        out.push_str(&t.to_string());
        out.push('\n');
    }
    out.push_str(&format!(
        "{} entries differ, {} are the same\n",
        d.rows.len(),
        d.same
    ));
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use fleetbench_proto::agentpb::LogFact;

    fn strings(xs: &[&str]) -> Vec<String> {
        xs.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn argv_reads_values_switches_equals_and_negative_numbers() {
        let argv = strings(&[
            "python3",
            "-m",
            "sglang.launch_server",
            "--tp-size",
            "8",
            "--disable-cuda-graph",
            "--chunked-prefill-size",
            "-1",
            "--cuda-graph-bs",
            "1",
            "2",
            "4",
            "--port=30000",
        ]);
        let f = argv_flags(&argv);
        assert_eq!(f["-m"], "sglang.launch_server");
        assert_eq!(f["--tp-size"], "8");
        assert_eq!(f["--disable-cuda-graph"], "on");
        assert_eq!(f["--chunked-prefill-size"], "-1");
        assert_eq!(f["--cuda-graph-bs"], "1 2 4");
        assert_eq!(f["--port"], "30000");
    }

    #[test]
    fn only_differences_are_listed_with_server_args_flattened() {
        let run = |argv: &[&str], args: &str, kv: &str| Run {
            run_id: "r".into(),
            argv: strings(argv),
            facts: vec![
                LogFact {
                    key: "server_args".into(),
                    value: args.into(),
                },
                LogFact {
                    key: "kv_cache_tokens".into(),
                    value: kv.into(),
                },
            ],
            ..Default::default()
        };
        let a = run(
            &["sglang", "--moe-runner-backend", "triton", "--tp-size", "8"],
            r#"{"moe_runner_backend":"triton","tp_size":8,"disable_cuda_graph":false}"#,
            "383872",
        );
        let b = run(
            &[
                "sglang",
                "--moe-runner-backend",
                "flashinfer_cutlass",
                "--tp-size",
                "8",
                "--disable-cuda-graph",
            ],
            r#"{"moe_runner_backend":"flashinfer_cutlass","tp_size":8,"disable_cuda_graph":true}"#,
            "383872",
        );
        let d = diff_runs(&a, &b);
        let rows: Vec<(&str, Option<&str>, Option<&str>)> = d
            .rows
            .iter()
            .map(|r| (r.key.as_str(), r.a.as_deref(), r.b.as_deref()))
            .collect();
        assert_eq!(
            rows,
            [
                ("argv --disable-cuda-graph", None, Some("on")),
                (
                    "argv --moe-runner-backend",
                    Some("triton"),
                    Some("flashinfer_cutlass")
                ),
                (
                    "server_args.disable_cuda_graph",
                    Some("false"),
                    Some("true")
                ),
                (
                    "server_args.moe_runner_backend",
                    Some("triton"),
                    Some("flashinfer_cutlass")
                ),
            ]
        );
        assert_eq!(d.same, 4, "program, --tp-size, tp_size, kv_cache_tokens");
        let text = render_diff(&a, &b, &d);
        assert!(
            text.contains("flashinfer_cutlass")
                && text.contains("4 entries differ, 4 are the same"),
            "{text}"
        );
    }
}
