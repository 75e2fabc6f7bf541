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
