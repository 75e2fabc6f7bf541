//! A start-up log recorded from a real SGLang 0.5.23 on the CPU (the tiny random-weight Llama
//! of `scripts/engines/make_tiny_llama.py`), run with fleetbench's stand-in for SGLang's CPU
//! kernel helpers (`scripts/engines/sgl_kernel_cpu_standin`; GPU kernels not exercised). Its
//! `server_args={...}` line is about 19 KiB: the agent keeps lines of up to 64 KiB for it.

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
