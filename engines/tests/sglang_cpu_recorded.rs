//! A start-up log recorded from a real SGLang 0.5.23 on the CPU (the tiny random-weight Llama
//! of `scripts/engines/make_tiny_llama.py`), run with fleetbench's stand-in for SGLang's CPU
//! kernel helpers (`scripts/engines/sgl_kernel_cpu_standin`; GPU kernels not exercised). Its
//! `server_args={...}` line is about 19 KiB: the agent keeps lines of up to 64 KiB for it. The
//! crash logs beside it are the same server started with flags that fail it.

mod common;

use common::{fixture_lines, one};
use fleetbench_engines::{EngineKind, parser};
use serde_json::Value;

#[test]
fn start_up_facts_of_the_real_server_on_cpu() {
    let lines = fixture_lines("sglang/startup_0.5.23_cpu_tiny_llama.log");
    let args_line = lines
        .iter()
        .find(|l| l.contains("server_args="))
        .expect("a server_args line");
    assert!(args_line.len() > 16 * 1024, "{}", args_line.len());
    let mut p = parser(EngineKind::Sglang);
    let f: Vec<_> = lines.iter().flat_map(|l| p.parse_line(l)).collect();
    let args: Value = serde_json::from_str(one(&f, "server_args")).unwrap();
    assert_eq!(args["device"], "cpu", "{args}");
    assert_eq!(args["attention_backend"], "torch_native", "{args}");
    assert_eq!(args["context_length"], 512, "{args}");
    assert_eq!(one(&f, "kv_cache_tokens"), "8192");
    assert_eq!(one(&f, "max_total_num_tokens"), "8192");
    assert_eq!(one(&f, "max_running_requests"), "4096");
    assert_eq!(one(&f, "context_len"), "512");
    assert_eq!(one(&f, "weight_load_s"), "0.06");
    assert_eq!(one(&f, "ready"), "true");
}

fn exited(code: i32) -> fleetbench_engines::ExitInfo {
    fleetbench_engines::ExitInfo {
        code: Some(code),
        ..Default::default()
    }
}

#[test]
fn a_bad_flag_value_is_an_argparse_usage_error() {
    // `--max-running-requests many`: argparse prints the whole usage, then its error, exit 2.
    let c = fleetbench_engines::classify(
        EngineKind::Sglang,
        &exited(2),
        &fixture_lines("crash/sglang_cpu_bad_flag_value.log"),
    );
    assert_eq!(c.class, fleetbench_engines::CrashClass::ExitCode, "{c:?}");
    assert_eq!(c.exception_type, "usage error", "{c:?}");
    assert_eq!(
        c.message,
        "sglang serve: error: argument --max-running-requests: invalid int value: 'many'"
    );
}

#[test]
fn a_model_path_that_does_not_exist_names_the_path() {
    let c = fleetbench_engines::classify(
        EngineKind::Sglang,
        &exited(1),
        &fixture_lines("crash/sglang_cpu_missing_model.log"),
    );
    assert_eq!(
        c.class,
        fleetbench_engines::CrashClass::PythonException,
        "{c:?}"
    );
    // transformers re-raises it as OSError ("raise OSError(...) from e"): the cause is named.
    assert_eq!(
        c.exception_type, "huggingface_hub.errors.HFValidationError",
        "{c:?}"
    );
    assert!(c.message.contains("/work/vrun/no-such-model"), "{c:?}");
}

/// How the agent sees SGLang end after a scheduler failure: SGLang SIGKILLs its own tree, so
/// the exit is a SIGKILL the agent did not send and the kernel's OOM killer did not either.
fn self_killed() -> fleetbench_engines::ExitInfo {
    fleetbench_engines::ExitInfo {
        signal: Some(9),
        from_outside: true,
        ..Default::default()
    }
}

/// The lines the agent classifies: the last 60 of the log (its `CRASH_TAIL`).
fn agent_tail(lines: &[String]) -> &[String] {
    &lines[lines.len().saturating_sub(60)..]
}

#[test]
fn a_kv_pool_of_no_tokens_is_oom_by_sglangs_own_message_not_a_kill_from_outside() {
    // `--max-total-tokens 0`: the scheduler's pool configurator raises, SGLang kills its tree.
    let lines = fixture_lines("crash/sglang_cpu_kv_cache_too_small.log");
    let c = fleetbench_engines::classify(EngineKind::Sglang, &self_killed(), agent_tail(&lines));
    assert_eq!(c.class, fleetbench_engines::CrashClass::Oom, "{c:?}");
    assert_eq!(c.exception_type, "RuntimeError", "{c:?}");
    assert_eq!(
        c.message,
        "Not enough memory. Please try to increase --mem-fraction-static."
    );
    assert_eq!(
        c.frames.last().unwrap(),
        "sglang/srt/model_executor/pool_configurator.py:99 in __post_init__: raise RuntimeError(msg)"
    );
    assert!(
        c.summary.ends_with("; killed itself with SIGKILL (9)"),
        "{}",
        c.summary
    );
}

#[test]
fn a_kv_pool_of_one_token_is_sglangs_assertion_not_a_kill_from_outside() {
    // `--max-total-tokens 1`: the pool is made, but it leaves no room for a running request.
    let lines = fixture_lines("crash/sglang_cpu_kv_cache_one_token.log");
    let c = fleetbench_engines::classify(EngineKind::Sglang, &self_killed(), agent_tail(&lines));
    assert_eq!(
        c.class,
        fleetbench_engines::CrashClass::PythonException,
        "{c:?}"
    );
    assert_eq!(c.exception_type, "AssertionError", "{c:?}");
    assert_eq!(c.message, "max_running_request is zero");
    assert_eq!(
        c.frames.last().unwrap(),
        "sglang/srt/managers/tp_worker.py:420 in alloc_memory_pool: \
         assert self.model_runner.max_running_requests > 0, \"max_running_request is zero\""
    );
    assert!(
        c.summary.ends_with("; killed itself with SIGKILL (9)"),
        "{}",
        c.summary
    );
}

#[test]
fn a_kv_pool_of_two_tokens_never_gets_ready_and_an_outside_sigterm_stays_outside() {
    // `--max-total-tokens 2`: SGLang starts, warns that the pool is smaller than the context,
    // refuses its own 8-token warm-up request and answers /health 503 until it is stopped.
    let lines = fixture_lines("crash/sglang_cpu_kv_cache_two_tokens.log");
    assert!(lines.iter().any(|l| l.contains(
        "KV pool holds 2 tokens, fewer than --context-length 512. One full-length request cannot fit"
    )));
    assert!(lines.iter().any(|l| {
        l.contains("Input length (8 tokens) exceeds the maximum allowed length (-4 tokens).")
    }));
    // At the start deadline the agent classifies the tail it has then: a startup timeout.
    let sigterm = lines
        .iter()
        .position(|l| l.contains("SIGTERM received."))
        .expect("the recording's SIGTERM");
    let at_deadline = fleetbench_engines::ExitInfo {
        startup_timed_out: true,
        ..Default::default()
    };
    let c = fleetbench_engines::classify(
        EngineKind::Sglang,
        &at_deadline,
        agent_tail(&lines[..sigterm]),
    );
    assert_eq!(
        c.class,
        fleetbench_engines::CrashClass::StartupTimeout,
        "{c:?}"
    );
    assert!(c.message.contains("GET /health HTTP/1.1\" 503"), "{c:?}");
    // The recording ended it with SIGTERM to its process group: the scheduler died of it, and
    // SGLang killed its tree with SIGKILL as after a failure. Had that SIGTERM come from
    // outside fleetbench, the kill is still an outsider's, not the config's.
    let c = fleetbench_engines::classify(EngineKind::Sglang, &self_killed(), agent_tail(&lines));
    assert_eq!(
        c.class,
        fleetbench_engines::CrashClass::KilledExternally,
        "{c:?}"
    );
}
