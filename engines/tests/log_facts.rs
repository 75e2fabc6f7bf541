//! Log fact parsers against recorded (llama.cpp) and source-derived (SGLang, vLLM) start-up
//! logs under `tests/fixtures/`.

mod common;

use common::{fixture, one, values};
use fleetbench_engines::EngineKind;
use fleetbench_engines::logs::parse_all;
use serde_json::Value;

fn facts(kind: EngineKind, rel: &str) -> Vec<fleetbench_engines::LogFact> {
    let text = fixture(rel);
    parse_all(kind, text.lines())
}

#[test]
fn sglang_059_dataclass_repr_and_rank_zero_facts() {
    let f = facts(EngineKind::Sglang, "sglang/startup_0.5.9_tp4.log");
    let args: Value = serde_json::from_str(one(&f, "server_args")).unwrap();
    assert_eq!(args["model_path"], "Qwen/Qwen3-30B-A3B");
    assert_eq!(args["tp_size"], 4);
    assert_eq!(args["mem_fraction_static"], 0.85);
    assert_eq!(args["enable_metrics"], true);
    assert_eq!(args["moe_runner_backend"], "flashinfer_cutlass");
    assert_eq!(args["cuda_graph_bs"].as_array().unwrap().len(), 36);
    assert!(args.as_object().unwrap().len() > 150, "all fields read");
    // Per-rank lines from TP1..TP3 are ignored: one value each.
    assert_eq!(one(&f, "weight_load_s"), "14.87");
    assert_eq!(one(&f, "weight_mem_gb"), "14.41");
    assert_eq!(one(&f, "kv_cache_tokens"), "2285186");
    assert_eq!(one(&f, "kv_cache_gb"), "104.60");
    assert_eq!(one(&f, "cuda_graph_s"), "21.64");
    assert_eq!(one(&f, "max_total_num_tokens"), "2285186");
    assert_eq!(one(&f, "chunked_prefill_size"), "8192");
    assert_eq!(one(&f, "max_prefill_tokens"), "16384");
    assert_eq!(one(&f, "max_running_requests"), "256");
    assert_eq!(one(&f, "context_len"), "40960");
    assert_eq!(one(&f, "available_gpu_mem_gb"), "15.71");
    assert_eq!(one(&f, "ready"), "true");
    // The ready fact comes last, after every start-up fact.
    assert_eq!(f.last().unwrap().key, "ready");
}

#[test]
fn sglang_0523_dict_form_dtype_and_two_graph_captures() {
    let f = facts(EngineKind::Sglang, "sglang/startup_0.5.23_dp_attention.log");
    let args: Value = serde_json::from_str(one(&f, "server_args")).unwrap();
    assert_eq!(args["model_path"], "deepseek-ai/DeepSeek-V3");
    assert_eq!(args["attn_dp_size"], 8);
    assert_eq!(args["cuda_graph_max_bs_decode"], 128);
    assert_eq!(args["cuda_graph_config"]["decode"]["backend"], "full");
    assert_eq!(one(&f, "kv_cache_dtype"), "torch.float8_e4m3fn");
    assert_eq!(one(&f, "kv_cache_tokens"), "1046016");
    assert_eq!(one(&f, "kv_cache_gb"), "36.48");
    assert_eq!(one(&f, "weight_load_s"), "90.41");
    // Decode then prefill capture on rank 0: a running total.
    assert_eq!(values(&f, "cuda_graph_s"), ["28.96", "36.46"]);
    assert_eq!(one(&f, "max_running_requests"), "512");
    assert_eq!(one(&f, "context_len"), "163840");
    assert_eq!(one(&f, "ready"), "true");
}

#[test]
fn sim_uses_the_sglang_parser() {
    let f = facts(EngineKind::Sim, "sglang/startup_0.5.9_tp4.log");
    assert_eq!(one(&f, "kv_cache_tokens"), "2285186");
}

#[test]
fn vllm_startup_facts_from_rank_zero() {
    let f = facts(EngineKind::Vllm, "vllm/startup_0.33_tp2.log");
    let args: Value = serde_json::from_str(one(&f, "non_default_args")).unwrap();
    assert_eq!(args["tensor_parallel_size"], 2);
    assert_eq!(args["compilation_config"]["mode"], 3);
    assert_eq!(args["enable_prefix_caching"], true);
    assert_eq!(one(&f, "gpu_kv_cache_tokens"), "2018736");
    assert_eq!(one(&f, "max_concurrency"), "61.61");
    assert_eq!(one(&f, "max_concurrency_tokens_per_request"), "32768");
    assert_eq!(one(&f, "model_load_gib"), "28.45");
    assert_eq!(one(&f, "model_load_s"), "15.118934");
    assert_eq!(one(&f, "available_kv_cache_gib"), "92.41");
    assert_eq!(one(&f, "graph_capture_s"), "14");
    assert_eq!(one(&f, "graph_capture_gib"), "1.38");
    assert_eq!(one(&f, "init_engine_s"), "47.81");
    assert_eq!(one(&f, "ready"), "true");
}

#[test]
fn vllm_colour_codes_are_stripped() {
    let f = facts(EngineKind::Vllm, "vllm/startup_coloured_tty.log");
    let args: Value = serde_json::from_str(one(&f, "non_default_args")).unwrap();
    assert_eq!(args["enforce_eager"], true);
    assert_eq!(one(&f, "gpu_kv_cache_tokens"), "453984");
    assert_eq!(one(&f, "max_concurrency_tokens_per_request"), "131072");
}

#[test]
fn llamacpp_recorded_default_log() {
    // Recorded from the packaged llama-server: -np 2 -c 2048, default verbosity.
    let f = facts(EngineKind::Llamacpp, "llamacpp/startup_np2_c2048.log");
    assert_eq!(one(&f, "n_slots"), "2");
    assert_eq!(one(&f, "n_ctx_slot"), "1024");
    assert_eq!(one(&f, "n_threads"), "2");
    assert_eq!(one(&f, "ready"), "true");
}

#[test]
fn llamacpp_recorded_verbose_log_has_model_facts() {
    // Recorded with -np 4 -c 4096 -lv 4; requests follow start-up and repeat n_ctx_slot.
    let f = facts(
        EngineKind::Llamacpp,
        "llamacpp/startup_verbose_np4_c4096.log",
    );
    assert_eq!(one(&f, "n_slots"), "4");
    assert_eq!(one(&f, "n_ctx_slot"), "1024");
    assert_eq!(one(&f, "n_ctx"), "4096");
    assert_eq!(one(&f, "n_batch"), "2048");
    assert_eq!(one(&f, "n_ubatch"), "512");
    assert_eq!(one(&f, "n_ctx_train"), "8192");
    assert_eq!(one(&f, "model_params"), "134.52 M");
    assert_eq!(one(&f, "model_name"), "Smollm2 135M 8k Lc100K Mix1 Ep2");
    assert_eq!(one(&f, "model_file_type"), "Q4_1");
    assert_eq!(one(&f, "kv_cache_mib"), "90.00");
    // The host prompt cache that served replayed prompts (docs/validation/h200.md, run 9).
    assert_eq!(one(&f, "prompt_cache_mib"), "8192");
    assert_eq!(one(&f, "kv_unified"), "false");
    assert_eq!(one(&f, "ready"), "true");
}

#[test]
fn llamacpp_recorded_cuda_log_on_an_h200() {
    // Recorded on a 1xH200: CUDA build, Llama-3.1-8B shape bf16, -ngl 99 -np 64 -c 65536 -fa on,
    // default verbosity (no device or buffer lines at this level), then the first requests.
    let f = facts(EngineKind::Llamacpp, "llamacpp/startup_cuda_h200_np64.log");
    assert_eq!(one(&f, "n_slots"), "64");
    assert_eq!(one(&f, "n_ctx_slot"), "1024");
    assert_eq!(one(&f, "kv_unified"), "false");
    assert_eq!(one(&f, "n_threads"), "16");
    assert_eq!(one(&f, "ready"), "true");
}

#[test]
fn llamacpp_recorded_fit_failure_and_context_overflow() {
    // Recorded on the H200: --ctx-size 4194304 --fit on -ngl 99; the KV cache then failed.
    let f = facts(EngineKind::Llamacpp, "crash/llamacpp_cuda_kv_oom_h200.log");
    assert_eq!(
        one(&f, "fit_failed"),
        "n_gpu_layers already set by user to 99, abort"
    );
    assert_eq!(one(&f, "n_ctx_seq"), "4194304");
    assert_eq!(one(&f, "n_ctx_train"), "131072");
    assert!(f.iter().all(|x| x.key != "ready"), "{f:?}");
}

#[test]
fn llamacpp_older_build_format() {
    let f = facts(EngineKind::Llamacpp, "llamacpp/startup_older_build.log");
    assert_eq!(one(&f, "n_slots"), "2");
    assert_eq!(one(&f, "n_ctx_slot"), "1024");
    assert_eq!(one(&f, "n_ctx"), "2048");
    assert_eq!(one(&f, "model_params"), "134.52 M");
    assert_eq!(one(&f, "ready"), "true");
}

#[test]
fn unknown_variants_fail_soft() {
    let lines = [
        "[2026-11-29 13:53:02] server_args=ServerArgs(model_path='m', broken=",
        "[2026-11-29 13:53:02 TP0] KV Cache is allocated. #tokens: lots",
        "[2026-11-29 13:53:02 TP0] max_total_num_tokens=?",
        "(APIServer pid=1) INFO 11-29 14:20:03 [x.py:1] non-default args: not a dict",
        "\u{1b}[31m garbage \u{fffd}",
        "",
    ];
    for kind in EngineKind::ALL {
        assert!(
            parse_all(kind, lines).is_empty(),
            "{kind}: {:?}",
            parse_all(kind, lines)
        );
    }
}

#[test]
fn generic_knows_no_facts() {
    let text = fixture("sglang/startup_0.5.9_tp4.log");
    assert!(parse_all(EngineKind::Generic, text.lines()).is_empty());
}
