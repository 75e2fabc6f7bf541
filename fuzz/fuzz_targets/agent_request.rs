//! The agent's request validation: bytes decoded as the two requests that carry a caller's
//! numbers, flags, env and paths (`ApplyEngine`, `RunBenchmark`), checked the way the service
//! checks them. Never a panic; an accepted engine plan never carries `--trust-remote-code`
//! (no profile here allows it), never overrides the pinned `--tp-size 8`, and sets only
//! allowed environment variables; an accepted benchmark request builds a load generator
//! config or is refused by field.
#![no_main]

use std::sync::LazyLock;

use fleetbench_agent::Profile;
use fleetbench_agent::allow::DatasetRoots;
use fleetbench_proto::agentpb;
use libfuzzer_sys::fuzz_target;
use prost::Message;

static PROFILES: LazyLock<Vec<Profile>> = LazyLock::new(|| {
    [
        (
            "sg",
            "kind = \"sglang\"\nprogram = \"/bin/true\"\nmodels = [\"Qwen/Qwen3-8B\"]\n\
             args = [\"--model-path\", \"{model}\", \"--port\", \"{port}\", \"--tp-size\", \"8\"]\n",
        ),
        (
            "vl",
            "kind = \"vllm\"\nprogram = \"/bin/true\"\nmodels = [\"Qwen/Qwen3-8B\"]\n\
             model_roots = [\"/tmp\"]\nallow_flags = [\"--speculative-config\"]\n",
        ),
        ("lc", "kind = \"llamacpp\"\nprogram = \"/bin/true\"\nmodels = [\"*\"]\n"),
    ]
    .into_iter()
    .map(|(n, t)| fleetbench_agent::config::profile_from_toml(n, t).expect("fuzz profile"))
    .collect()
});

fn apply(bytes: &[u8], which: u8) {
    let Ok(req) = agentpb::ApplyEngineRequest::decode(bytes) else {
        return;
    };
    let Some(spec) = req.spec else { return };
    if fleetbench_agent::bounds::check_apply(&spec, &req.run_id).is_err() {
        return;
    }
    let profile = &PROFILES[usize::from(which) % PROFILES.len()];
    let Ok(plan) = profile.plan(&spec) else {
        return;
    };
    assert!(
        !plan.argv.iter().any(|a| a.starts_with("--trust-remote")),
        "argv {:?}",
        plan.argv
    );
    if profile.name == "sg" {
        let tp: Vec<&String> = plan
            .argv
            .iter()
            .filter(|a| a.starts_with("--tp") || a.starts_with("--tensor-parallel"))
            .collect();
        assert_eq!(
            tp,
            ["--tp-size"],
            "the pinned --tp-size 8 was overridden: {:?}",
            plan.argv
        );
    }
    for k in spec.env.keys() {
        assert!(
            profile.allowed_env.iter().any(|r| &r.name == k),
            "env {k:?} is not allowed"
        );
    }
}

fn bench(bytes: &[u8]) {
    let Ok(req) = agentpb::RunBenchmarkRequest::decode(bytes) else {
        return;
    };
    if fleetbench_agent::bounds::check_benchmark(&req).is_ok()
        && let Err(e) = fleetbench_agent::convert::bench_config(
            &req,
            "http://127.0.0.1:1",
            &DatasetRoots(vec!["/nonexistent-fuzz-root".into()]),
        )
    {
        assert!(!e.field.is_empty(), "a refusal that names no field: {e}");
    }
}

fuzz_target!(|data: &[u8]| {
    let Some((&which, rest)) = data.split_first() else {
        return;
    };
    if which & 0x80 == 0 {
        apply(rest, which);
    } else {
        bench(rest);
    }
});
