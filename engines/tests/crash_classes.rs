//! Crash classification on log tails of each engine (llama.cpp's recorded from the real
//! server; SGLang's and vLLM's written in their exact formats, from their source).

mod common;

use common::fixture_lines;
use fleetbench_engines::{Crash, CrashClass, EngineKind, ExitInfo, classify};

fn exited(code: i32) -> ExitInfo {
    ExitInfo {
        code: Some(code),
        ..Default::default()
    }
}

fn killed(sig: i32) -> ExitInfo {
    ExitInfo {
        signal: Some(sig),
        ..Default::default()
    }
}

fn run(kind: EngineKind, exit: ExitInfo, rel: &str) -> Crash {
    classify(kind, &exit, &fixture_lines(rel))
}

#[test]
fn sglang_attention_backend_attribute_error() {
    // The parent SGLang process kills its tree after SIGQUIT: it ends by its own SIGKILL.
    let c = run(
        EngineKind::Sglang,
        killed(9),
        "crash/sglang_attention_attribute_error.log",
    );
    assert_eq!(c.class, CrashClass::PythonException);
    assert_eq!(c.exception_type, "AttributeError");
    assert_eq!(
        c.message,
        "'PrefillMetadata' object has no attribute 'max_seq_len'"
    );
    assert!(c.frames.len() <= fleetbench_engines::crash::MAX_FRAMES);
    assert_eq!(
        c.frames.last().unwrap(),
        "sglang/srt/layers/attention/flashinfer_mla_backend.py:731 in forward_extend: max_seq_len=prefill_meta.max_seq_len,"
    );
    assert!(
        c.frames[0].starts_with("sglang/srt/managers/tp_worker.py:412 in forward_batch_generation"),
        "{:?}",
        c.frames
    );
    assert_eq!(
        c.summary,
        "python_exception: AttributeError: 'PrefillMetadata' object has no attribute 'max_seq_len' \
         (at sglang/srt/layers/attention/flashinfer_mla_backend.py:731 in forward_extend); killed itself with SIGKILL (9)"
    );
}

#[test]
fn sglang_cuda_oom_is_oom_not_python_exception() {
    let c = run(
        EngineKind::Sglang,
        exited(1),
        "crash/sglang_cuda_oom_decode.log",
    );
    assert_eq!(c.class, CrashClass::Oom);
    assert_eq!(c.exception_type, "torch.OutOfMemoryError");
    assert!(
        c.message
            .starts_with("CUDA out of memory. Tried to allocate 3.38 GiB.")
    );
    assert!(c.frames.last().unwrap().contains("fused_experts_impl"));
}

#[test]
fn sglang_kv_pool_too_small_is_oom() {
    let c = run(
        EngineKind::Sglang,
        exited(1),
        "crash/sglang_not_enough_memory.log",
    );
    assert_eq!(c.class, CrashClass::Oom);
    assert_eq!(c.exception_type, "RuntimeError");
    assert!(c.message.contains("--mem-fraction-static"));
}

#[test]
fn nan_detection_beats_the_device_side_assert_it_raises() {
    let c = run(
        EngineKind::Sglang,
        exited(1),
        "crash/sglang_nan_detected.log",
    );
    assert_eq!(c.class, CrashClass::Nan);
    assert_eq!(c.exception_type, "torch.AcceleratorError");
}

#[test]
fn sglang_argparse_error_names_the_ambiguous_flag() {
    let c = run(
        EngineKind::Sglang,
        exited(2),
        "crash/sglang_usage_error.log",
    );
    assert_eq!(c.class, CrashClass::ExitCode);
    assert_eq!(c.exception_type, "usage error");
    assert!(c.message.contains("ambiguous option: --cuda-graph-max-bs"));
    assert!(c.summary.ends_with("; exit code 2"), "{}", c.summary);
}

#[test]
fn sglang_uvicorn_bind_failure_is_port_in_use() {
    let c = run(
        EngineKind::Sglang,
        exited(1),
        "crash/sglang_port_in_use.log",
    );
    assert_eq!(c.class, CrashClass::PortInUse);
    assert!(c.message.contains("[Errno 98]"));
}

#[test]
fn vllm_engine_dead_after_worker_oom() {
    let c = run(
        EngineKind::Vllm,
        exited(1),
        "crash/vllm_engine_dead_oom.log",
    );
    assert_eq!(c.class, CrashClass::Oom);
    // The worker's own exception, not the EngineDeadError wrapper the API server printed.
    assert_eq!(c.exception_type, "torch.OutOfMemoryError");
    assert!(c.frames.last().unwrap().starts_with(
        "vllm/model_executor/layers/fused_moe/fused_moe.py:1711 in fused_experts_impl"
    ));
}

/// A KV cache too small for one request of the context is a memory failure (`oom`, as
/// SGLang's too-small KV pool), with vLLM's own ValueError as the cause; the real server
/// agrees (`vllm_cpu_recorded.rs`).
#[test]
fn vllm_init_failure_reports_the_root_cause_not_the_wrapper() {
    let c = run(
        EngineKind::Vllm,
        exited(1),
        "crash/vllm_init_failed_value_error.log",
    );
    assert_eq!(c.class, CrashClass::Oom);
    assert_eq!(c.exception_type, "ValueError");
    assert!(c.message.contains("max seq len (131072)"), "{}", c.message);
}

#[test]
fn vllm_illegal_address_is_cuda_error() {
    let c = run(
        EngineKind::Vllm,
        exited(1),
        "crash/vllm_illegal_memory_access.log",
    );
    assert_eq!(c.class, CrashClass::CudaError);
    assert_eq!(c.exception_type, "torch.AcceleratorError");
    assert_eq!(
        c.message,
        "CUDA error: an illegal memory access was encountered"
    );
}

#[test]
fn vllm_bind_failure_traceback_is_port_in_use() {
    let c = run(EngineKind::Vllm, exited(1), "crash/vllm_port_in_use.log");
    assert_eq!(c.class, CrashClass::PortInUse);
    assert_eq!(c.exception_type, "OSError");
}

#[test]
fn nccl_watchdog_timeout() {
    let c = run(
        EngineKind::Sglang,
        killed(6),
        "crash/nccl_watchdog_timeout.log",
    );
    assert_eq!(c.class, CrashClass::Nccl);
    assert!(
        c.message
            .contains("Watchdog caught collective operation timeout")
    );
    assert!(c.summary.contains("SIGABRT (6)"), "{}", c.summary);
}

#[test]
fn nccl_fallout_after_another_ranks_exception_is_that_exception() {
    let mut tail = fixture_lines("crash/sglang_attention_attribute_error.log");
    tail.extend(fixture_lines("crash/nccl_watchdog_timeout.log"));
    let c = classify(EngineKind::Sglang, &killed(9), &tail);
    assert_eq!(c.class, CrashClass::PythonException);
    assert_eq!(c.exception_type, "AttributeError");
}

#[test]
fn llamacpp_recorded_failures() {
    let c = run(
        EngineKind::Llamacpp,
        exited(1),
        "crash/llamacpp_port_in_use.log",
    );
    assert_eq!(c.class, CrashClass::PortInUse);
    assert!(c.message.contains("couldn't bind HTTP server socket"));

    let c = run(
        EngineKind::Llamacpp,
        exited(1),
        "crash/llamacpp_bad_argument.log",
    );
    assert_eq!(c.class, CrashClass::ExitCode);
    assert_eq!(c.exception_type, "llama.cpp: invalid argument");
    assert_eq!(
        c.message,
        "error while handling argument \"--parallel\": stoi"
    );

    let c = run(
        EngineKind::Llamacpp,
        exited(1),
        "crash/llamacpp_unknown_argument.log",
    );
    assert_eq!(c.exception_type, "llama.cpp: invalid argument");
    assert!(c.message.contains("--bogus-flag"));

    let c = run(
        EngineKind::Llamacpp,
        exited(1),
        "crash/llamacpp_missing_model.log",
    );
    assert_eq!(c.class, CrashClass::ExitCode);
    assert_eq!(c.exception_type, "llama.cpp: failed to load model");
    assert!(c.message.contains("/tmp/nonexist.gguf"), "{}", c.message);
}

/// Recorded on an H200 (CUDA build): a 4,194,304-token context for the Llama-3.1-8B shape asks
/// for 512 GiB of KV cache. The OOM line names only the size; the class says what did not fit,
/// which decides the remedy (--ctx-size or -ctk, not -ngl).
#[test]
fn llamacpp_cuda_kv_cache_oom_recorded_on_an_h200() {
    let c = run(
        EngineKind::Llamacpp,
        exited(1),
        "crash/llamacpp_cuda_kv_oom_h200.log",
    );
    assert_eq!(c.class, CrashClass::Oom);
    assert_eq!(
        c.exception_type,
        "llama.cpp: KV cache does not fit in GPU memory"
    );
    assert_eq!(
        c.message,
        "ggml_backend_cuda_buffer_type_alloc_buffer: allocating 524288.00 MiB on device 0: \
         cudaMalloc failed: out of memory"
    );
    assert!(
        c.summary
            .starts_with("oom: llama.cpp: KV cache does not fit in GPU memory: ggml_backend"),
        "{}",
        c.summary
    );
}

#[test]
fn evidence_beats_the_manner_of_death() {
    // OOM evidence with a startup timeout or a signal is still oom.
    let exit = ExitInfo {
        startup_timed_out: true,
        signal: Some(9),
        ..Default::default()
    };
    let c = run(EngineKind::Sglang, exit, "crash/sglang_cuda_oom_decode.log");
    assert_eq!(c.class, CrashClass::Oom);
    // A clean start-up log with a timeout is a startup timeout.
    let exit = ExitInfo {
        startup_timed_out: true,
        ..Default::default()
    };
    let c = run(EngineKind::Llamacpp, exit, "llamacpp/startup_np2_c2048.log");
    assert_eq!(c.class, CrashClass::StartupTimeout);
    assert!(c.summary.contains("not ready before the start deadline"));
}

#[test]
fn real_torch_errors_recorded_on_an_h200() {
    let c = run(
        EngineKind::Sglang,
        exited(1),
        "crash/torch_h200_cuda_oom.log",
    );
    assert_eq!(c.class, CrashClass::Oom);
    assert_eq!(c.exception_type, "torch.OutOfMemoryError");
    assert!(
        c.message
            .starts_with("CUDA out of memory. Tried to allocate 200.00 GiB.")
    );
    assert_eq!(c.frames, ["<stdin>:5 in <module>", "<stdin>:4 in alloc"]);

    let c = run(
        EngineKind::Sglang,
        exited(1),
        "crash/torch_h200_nan_assert.log",
    );
    assert_eq!(c.class, CrashClass::Nan);
    assert_eq!(c.exception_type, "torch.AcceleratorError");
    assert_eq!(c.message, "CUDA error: device-side assert triggered");

    // The same device-side assert without a NaN check behind it is a CUDA error.
    let c = run(
        EngineKind::Sglang,
        exited(1),
        "crash/torch_h200_index_assert.log",
    );
    assert_eq!(c.class, CrashClass::CudaError);
    assert_eq!(c.exception_type, "torch.AcceleratorError");
    assert_eq!(
        c.frames.last().unwrap(),
        "torch/cuda/__init__.py:1162 in synchronize: return torch._C._cuda_synchronize()"
    );
}
