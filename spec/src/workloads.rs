//! `[[workloads]]`: a dataset with its parameters, the API and request options.

use toml::de::DeValue;

use super::walk::{Ctx, Table, as_table, describe};
use super::{Api, Dataset, WorkloadSpec};

const COMMON: &[&str] = &["name", "dataset", "api", "model", "ignore_eos", "seed"];

/// Each dataset kind with the parameters it takes (required ones first).
const DATASETS: &[(&str, &[&str])] = &[
    ("random", &["input_len", "output_len", "range_ratio"]),
    ("sharegpt", &["path", "output_len"]),
    (
        "shared-prefix",
        &[
            "groups",
            "prompts_per_group",
            "prefix_len",
            "suffix_len",
            "output_len",
        ],
    ),
    ("jsonl", &["path", "output_len"]),
    ("trace", &["path", "trace_block_tokens", "trace_speedup"]),
    (
        "conversation",
        &[
            "turns",
            "input_len",
            "output_len",
            "think_time_ms",
            "system_prompt_len",
        ],
    ),
];

pub(crate) fn workloads(ctx: &mut Ctx, root: &Table<'_, '_>) -> Option<Vec<WorkloadSpec>> {
    if !root.has("workloads") {
        root.missing(ctx, "workloads", "at least one [[workloads]] table");
        return None;
    }
    let items = root.list(ctx, "workloads")?;
    let mut out = Vec::new();
    let mut ok = true;
    let mut names: Vec<String> = Vec::new();
    for (i, item) in items.iter().enumerate() {
        let path = format!("workloads[{i}]");
        let Some(t) = as_table(ctx, &path, item) else {
            ok = false;
            continue;
        };
        if let Some(DeValue::String(name)) = t.get("name").map(|v| v.get_ref()) {
            if let Some(first) = names.iter().position(|n| n == name.as_ref()) {
                let msg = format!("duplicate workload name {name:?} (also workloads[{first}])");
                ctx.error(Some(&t.key_span("name")), &t.field("name"), msg);
                ok = false;
            }
            names.push(name.to_string());
        }
        match workload(ctx, &t) {
            Some(w) => out.push(w),
            None => ok = false,
        }
    }
    ok.then_some(out)
}

fn workload(ctx: &mut Ctx, t: &Table<'_, '_>) -> Option<WorkloadSpec> {
    let name = t.required_string(ctx, "name", "a name for the workload");
    let kind = dataset_kind(ctx, t);
    let params: Vec<&str> = match kind {
        Some(k) => DATASETS
            .iter()
            .find(|(n, _)| *n == k)
            .map(|(_, p)| p.to_vec())
            .unwrap_or_default(),
        None => DATASETS
            .iter()
            .flat_map(|(_, p)| p.iter().copied())
            .collect(),
    };
    let known: Vec<&str> = COMMON
        .iter()
        .copied()
        .chain(params.iter().copied())
        .collect();
    let all: Vec<&str> = COMMON
        .iter()
        .copied()
        .chain(DATASETS.iter().flat_map(|(_, p)| p.iter().copied()))
        .collect();
    // A parameter of another dataset gets its own message: the key is real, just misplaced.
    let mut unknown_keys = Vec::new();
    for (k, _) in t.map.iter() {
        let key = k.get_ref().as_ref();
        if all.contains(&key) && !known.contains(&key) {
            let msg = format!(
                "{key:?} is not a parameter of dataset {:?} (it takes: {})",
                kind.unwrap_or_default(),
                params.join(", ")
            );
            ctx.error(Some(&k.span()), &t.field(key), msg);
        } else if !all.contains(&key) {
            unknown_keys.push(key);
        }
    }
    if !unknown_keys.is_empty() {
        t.check_keys(ctx, &all);
    }
    let dataset = kind.and_then(|k| dataset(ctx, t, k));
    let api = match t.get("api") {
        None => Some(Api::default()),
        Some(v) => match v.get_ref() {
            DeValue::String(s) if s == "completions" => Some(Api::Completions),
            DeValue::String(s) if s == "chat" => Some(Api::Chat),
            other => {
                let msg = format!(
                    "expected \"completions\" or \"chat\", got {}",
                    describe(other)
                );
                ctx.error(Some(&v.span()), &t.field("api"), msg);
                None
            }
        },
    };
    let model = t.string(ctx, "model").unwrap_or_default();
    let ignore_eos = if t.has("ignore_eos") {
        t.bool(ctx, "ignore_eos")
    } else {
        Some(true)
    };
    let seed = if t.has("seed") {
        t.u32(ctx, "seed", 0).map(u64::from)
    } else {
        Some(0)
    };
    Some(WorkloadSpec {
        name: name?,
        dataset: dataset?,
        api: api?,
        model,
        ignore_eos: ignore_eos?,
        seed: seed?,
    })
}

fn dataset_kind(ctx: &mut Ctx, t: &Table<'_, '_>) -> Option<&'static str> {
    let Some(v) = t.get("dataset") else {
        let kinds: Vec<_> = DATASETS.iter().map(|(n, _)| *n).collect();
        t.missing(
            ctx,
            "dataset",
            &format!("the dataset, one of: {}", kinds.join(", ")),
        );
        return None;
    };
    let found = match v.get_ref() {
        DeValue::String(s) => DATASETS
            .iter()
            .find(|(n, _)| *n == s.as_ref())
            .map(|(n, _)| *n),
        _ => None,
    };
    if found.is_none() {
        let kinds: Vec<_> = DATASETS.iter().map(|(n, _)| format!("{n:?}")).collect();
        let msg = format!(
            "expected one of {}, got {}",
            kinds.join(", "),
            describe(v.get_ref())
        );
        ctx.error(Some(&v.span()), &t.field("dataset"), msg);
    }
    found
}

fn dataset(ctx: &mut Ctx, t: &Table<'_, '_>, kind: &str) -> Option<Dataset> {
    let mut need_u32 = |key: &str, min: u32| -> Option<u32> {
        if !t.has(key) {
            t.missing(ctx, key, &format!("required for dataset {kind:?}"));
            return None;
        }
        t.u32(ctx, key, min)
    };
    match kind {
        "random" => {
            let input_len = need_u32("input_len", 1);
            let output_len = need_u32("output_len", 1);
            let range_ratio = match t.get("range_ratio") {
                None => Some(1.0),
                Some(v) => match t.f64(ctx, "range_ratio") {
                    Some(r) if r > 0.0 && r <= 1.0 => Some(r),
                    Some(r) => {
                        let msg = format!("must be in (0, 1] (1 = exact lengths), got {r}");
                        ctx.error(Some(&v.span()), &t.field("range_ratio"), msg);
                        None
                    }
                    None => None,
                },
            };
            Some(Dataset::Random {
                input_len: input_len?,
                output_len: output_len?,
                range_ratio: range_ratio?,
            })
        }
        "shared-prefix" => {
            let groups = need_u32("groups", 1);
            let prompts_per_group = need_u32("prompts_per_group", 1);
            let prefix_len = need_u32("prefix_len", 1);
            let suffix_len = need_u32("suffix_len", 0);
            let output_len = need_u32("output_len", 1);
            Some(Dataset::SharedPrefix {
                groups: groups?,
                prompts_per_group: prompts_per_group?,
                prefix_len: prefix_len?,
                suffix_len: suffix_len?,
                output_len: output_len?,
            })
        }
        "conversation" => {
            let turns = need_u32("turns", 1);
            let input_len = need_u32("input_len", 1);
            let output_len = need_u32("output_len", 1);
            let mut optional = |key: &str| {
                if t.has(key) {
                    t.u32(ctx, key, 0)
                } else {
                    Some(0)
                }
            };
            let think_time_ms = optional("think_time_ms");
            let system_prompt_len = optional("system_prompt_len");
            Some(Dataset::Conversation {
                turns: turns?,
                input_len: input_len?,
                output_len: output_len?,
                think_time_ms: think_time_ms?,
                system_prompt_len: system_prompt_len?,
            })
        }
        "trace" => trace(ctx, t),
        _ => {
            let path = t.required_string(ctx, "path", &format!("required for dataset {kind:?}"));
            let output_len = if t.has("output_len") {
                t.u32(ctx, "output_len", 0)
            } else {
                Some(0)
            };
            let (path, output_len) = (path?, output_len?);
            Some(match kind {
                "sharegpt" => Dataset::ShareGpt { path, output_len },
                _ => Dataset::Jsonl { path, output_len },
            })
        }
    }
}

/// A Mooncake trace: its path, and how its blocks and timestamps are replayed (each option its
/// recorded value when absent; bounds are checked with the other fields').
fn trace(ctx: &mut Ctx, t: &Table<'_, '_>) -> Option<Dataset> {
    use fleetbench_proto::limits::{TRACE_BLOCK_TOKENS_DEFAULT, TRACE_SPEEDUP_DEFAULT};
    let path = t.required_string(ctx, "path", "required for dataset \"trace\"");
    let block_tokens = if t.has("trace_block_tokens") {
        t.u32(ctx, "trace_block_tokens", 1)
    } else {
        Some(TRACE_BLOCK_TOKENS_DEFAULT)
    };
    let speedup = if t.has("trace_speedup") {
        t.f64(ctx, "trace_speedup")
    } else {
        Some(TRACE_SPEEDUP_DEFAULT)
    };
    Some(Dataset::Trace {
        path: path?,
        block_tokens: block_tokens?,
        speedup: speedup?,
    })
}

#[cfg(test)]
mod tests {
    use crate::{Dataset, parse};

    fn spec(workload: &str, load: &str) -> String {
        format!(
            "name = \"t\"\n[[configs]]\nname = \"a\"\nengine = \"sim\"\nmodel = \"m\"\n\
             [[workloads]]\nname = \"w\"\n{workload}\n[load]\n{load}\nrequests = 8\n"
        )
    }

    fn errors(text: &str) -> Vec<String> {
        match parse("t.toml", text) {
            Ok(s) => panic!("parsed: {s:?}"),
            Err(e) => e.iter().map(ToString::to_string).collect(),
        }
    }

    #[test]
    fn conversation_parses_with_defaults() {
        let text = spec(
            "dataset = \"conversation\"\nturns = 4\ninput_len = 64\noutput_len = 16",
            "concurrency = [2]",
        );
        let s = parse("t.toml", &text).unwrap_or_else(|e| panic!("{e:?}"));
        assert_eq!(
            s.workloads[0].dataset,
            Dataset::Conversation {
                turns: 4,
                input_len: 64,
                output_len: 16,
                think_time_ms: 0,
                system_prompt_len: 0,
            }
        );
    }

    #[test]
    fn trace_parses_with_defaults_and_bounds_its_options() {
        let s = parse(
            "t.toml",
            &spec(
                "dataset = \"trace\"\npath = \"/d/t.jsonl\"",
                "concurrency = [4]",
            ),
        )
        .unwrap_or_else(|e| panic!("{e:?}"));
        assert_eq!(
            s.workloads[0].dataset,
            Dataset::Trace {
                path: "/d/t.jsonl".into(),
                block_tokens: 512,
                speedup: 1.0,
            }
        );
        let s = parse(
            "t.toml",
            &spec(
                "dataset = \"trace\"\npath = \"/d/t.jsonl\"\ntrace_block_tokens = 16\n\
                 trace_speedup = 2.5",
                "concurrency = [4]",
            ),
        )
        .unwrap_or_else(|e| panic!("{e:?}"));
        assert_eq!(
            s.workloads[0].dataset,
            Dataset::Trace {
                path: "/d/t.jsonl".into(),
                block_tokens: 16,
                speedup: 2.5,
            }
        );
        let e = errors(&spec(
            "dataset = \"trace\"\npath = \"/d/t.jsonl\"\ntrace_block_tokens = 8\n\
             trace_speedup = 0.0",
            "request_rate = [2.0]",
        ));
        for want in [
            "workloads[0].trace_block_tokens",
            "workloads[0].trace_speedup",
            "workloads[0].dataset: a trace sends at its own timestamps",
        ] {
            assert!(e.iter().any(|e| e.contains(want)), "{want}: {e:?}");
        }
        let e = errors(&spec(
            "dataset = \"trace\"\ntrace_speedup = \"fast\"\noutput_len = 4",
            "concurrency = [4]",
        ));
        assert!(
            e.iter().any(|e| e.contains(
                "workloads[0].output_len: \"output_len\" is not a parameter of dataset \"trace\""
            )),
            "{e:?}"
        );
        assert!(
            e.iter().any(|e| e.contains("workloads[0].path: missing")),
            "{e:?}"
        );
        assert!(
            e.iter().any(|e| e.contains("workloads[0].trace_speedup")),
            "{e:?}"
        );
    }

    #[test]
    fn conversation_errors_name_the_field() {
        let e = errors(&spec(
            "dataset = \"conversation\"\ninput_len = 64\noutput_len = 16\nthink_time_ms = -1",
            "concurrency = [2]",
        ));
        assert!(
            e.iter().any(|e| e.contains("workloads[0].turns: missing")),
            "{e:?}"
        );
        assert!(
            e.iter().any(|e| e.contains("workloads[0].think_time_ms")),
            "{e:?}"
        );
        let e = errors(&spec(
            "dataset = \"conversation\"\nturns = 2000\ninput_len = 64\noutput_len = 16\npath = \"x\"",
            "concurrency = [2]",
        ));
        assert!(e.iter().any(|e| e.contains("workloads[0].turns")), "{e:?}");
        assert!(
            e.iter()
                .any(|e| e.contains("workloads[0].path: \"path\" is not a parameter")),
            "{e:?}"
        );
        let e = errors(&spec(
            "dataset = \"conversation\"\nturns = 2\ninput_len = 64\noutput_len = 16",
            "request_rate = [2.0]",
        ));
        assert!(
            e.iter().any(|e| e
                .contains("workloads[0].dataset: a conversation workload runs at a concurrency")),
            "{e:?}"
        );
    }
}
