//! The performance model of the simulated engine, as pure functions.
//!
//! The simulated engine imitates SGLang serving a 30B-parameter MoE model (3B active, 60 GB of
//! BF16 weights) on H200s. Its scheduler runs SGLang's default loop: a prefill step (new requests
//! from the FCFS queue, up to `chunked_prefill_size` tokens, with prefill taking priority) or a
//! decode step (one token for every running request). The time of a step is
//!
//! ```text
//! step = slowdown * (SYNC + max(launch, gpu) + OVERLAP_LOSS * min(launch, gpu))
//! gpu  = (dense + moe) / tp^0.9 + allreduce(tp)
//! decode:  dense = DENSE_FIXED + DENSE_PER_REQ * attn * batch
//!          moe   = backend.fixed + backend.per_req * batch
//! prefill: dense = DENSE_FIXED + PREFILL_FIXED + PREFILL_DENSE_PER_TOKEN * attn * tokens
//!          moe   = backend.fixed + backend.prefill_per_token * tokens
//! launch = GRAPH_LAUNCH when the step replays a CUDA graph (decode, graphs on and
//!          batch <= cuda_graph_max_bs), else EAGER_LAUNCH (kernel launches of 48 layers)
//! ```
//!
//! and a client sees it multiplied by `--time-scale` (and, in the server only, by jitter seeded per start
//! `1 + jitter * N(0,1)` per step and a per-process drift `1 + jitter/2 * N(0,1)`).
//!
//! | constant | value | why |
//! |---|---|---|
//! | `SYNC` | 0.6 ms | scheduler, sampling and detokenizer hand-off per step |
//! | `GRAPH_LAUNCH` | 0.3 ms | one graph replay |
//! | `EAGER_LAUNCH` | 9.0 ms | ~3,000 kernel launches, overlapped with GPU work |
//! | `OVERLAP_LOSS` | 0.15 | launch gaps not hidden behind GPU work |
//! | `DENSE_FIXED` | 4.0 ms | attention/dense weights read once per step |
//! | `DENSE_PER_REQ` | 0.010 ms | attention and dense compute per decoded token |
//! | `PREFILL_FIXED` | 2.0 ms | extra per prefill step (extend kernels, metadata) |
//! | `PREFILL_DENSE_PER_TOKEN` | 0.004 ms | dense compute per prompt token |
//!
//! MoE runner backends (`fixed` ms, `per_req` ms per decoded token, `prefill_per_token` ms):
//!
//! | backend | fixed | per_req | prefill_per_token | shape |
//! |---|---|---|---|---|
//! | triton (and auto) | 3.00 | 0.075 | 0.0080 | cheapest at small batch, scales worst |
//! | flashinfer_cutlass | 3.60 | 0.035 | 0.0040 | loses below ~16, wins clearly above |
//! | deep_gemm | 4.60 | 0.030 | 0.0035 | best only at very large batch |
//! | cutlass | 3.40 | 0.050 | 0.0050 | in between |
//! | flashinfer_trtllm | 3.30 | 0.045 | 0.0045 | in between |
//!
//! Attention backends scale `DENSE_PER_REQ`/`PREFILL_DENSE_PER_TOKEN`: fa3 0.97, flashinfer 1.0,
//! triton 1.04, others 1.02. Tensor parallelism divides compute by `tp^0.9` and adds an
//! all-reduce of `0.15 ms * log2(tp) + 0.0005 ms * batch * log2(tp)`.
//!
//! Memory (see [`memory`]): `--mem-fraction-static` (default 0.88) of `--gpu-memory-gb` (141)
//! holds the weights (60 GB / tp) and the KV cache (96 KiB per token / min(tp, 4)); the rest must
//! hold activations (2 GB + 0.2 MB per chunked-prefill token) and CUDA graphs (0.5 GB + 4 MB per
//! captured batch size), or start-up fails with a CUDA OOM. Admission reserves
//! `input + max_tokens` KV tokens per request; a request that cannot be reserved waits.
//!
//! Everything returned by the functions of this module is what a client of a server started
//! with the same flags observes on average: time-scale and slowdown are applied, jitter is not.

pub mod memory;
pub mod predict;

use std::time::Duration;

use crate::args::{MoeBackend, SimArgs};

pub use memory::{Memory, MemoryError};
pub use predict::{LevelPrediction, Slo, closed_loop, knee, steady_state_throughput};

pub const SYNC_MS: f64 = 0.6;
pub const GRAPH_LAUNCH_MS: f64 = 0.3;
pub const EAGER_LAUNCH_MS: f64 = 9.0;
pub const OVERLAP_LOSS: f64 = 0.15;
pub const DENSE_FIXED_MS: f64 = 4.0;
pub const DENSE_PER_REQ_MS: f64 = 0.010;
pub const PREFILL_FIXED_MS: f64 = 2.0;
pub const PREFILL_DENSE_PER_TOKEN_MS: f64 = 0.004;

/// Cost curve of one MoE runner backend.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct MoeCost {
    pub fixed_ms: f64,
    pub per_req_ms: f64,
    pub prefill_per_token_ms: f64,
}

/// The cost curve of `backend` (`auto` resolves to triton, as on a GPU without a tuned config).
pub fn moe_cost(backend: MoeBackend) -> MoeCost {
    let (fixed_ms, per_req_ms, prefill_per_token_ms) = match backend {
        MoeBackend::Auto | MoeBackend::Triton => (3.00, 0.075, 0.0080),
        MoeBackend::FlashinferCutlass => (3.80, 0.035, 0.0040),
        MoeBackend::DeepGemm => (5.60, 0.033, 0.0035),
        MoeBackend::Cutlass => (3.40, 0.050, 0.0050),
        MoeBackend::FlashinferTrtllm => (3.30, 0.045, 0.0045),
        MoeBackend::Other("triton_kernel") => (3.10, 0.070, 0.0075),
        MoeBackend::Other("flashinfer_trtllm_routed") => (3.35, 0.045, 0.0045),
        MoeBackend::Other(_) => (3.50, 0.055, 0.0055),
    };
    MoeCost {
        fixed_ms,
        per_req_ms,
        prefill_per_token_ms,
    }
}

fn attention_factor(backend: Option<&str>) -> f64 {
    match backend {
        None | Some("flashinfer") => 1.0,
        Some("fa3") => 0.97,
        Some("triton") => 1.04,
        Some(_) => 1.02,
    }
}

/// The resolved parameters of the model for one set of flags.
#[derive(Debug, Clone, PartialEq)]
pub struct ModelParams {
    pub backend: MoeBackend,
    pub moe: MoeCost,
    pub attention: f64,
    pub tp: u32,
    pub cuda_graph: bool,
    pub cuda_graph_max_bs: u32,
    pub max_running_requests: u32,
    pub chunked_prefill_size: u32,
    pub max_total_num_tokens: u64,
    pub context_len: u32,
    pub time_scale: f64,
    pub slowdown: f64,
    pub crash_above_batch: Option<u32>,
    pub crash_backend: Option<MoeBackend>,
}

/// SGLang's default CUDA-graph capture limit on a large GPU.
pub const DEFAULT_CUDA_GRAPH_MAX_BS: u32 = 256;
/// Default chunked prefill size.
pub const DEFAULT_CHUNKED_PREFILL: u32 = 8192;
/// Default context length of the simulated model.
pub const DEFAULT_CONTEXT_LEN: u32 = 32768;

impl ModelParams {
    /// Resolves flags into model parameters; fails where the engine would fail at start-up.
    pub fn from_args(args: &SimArgs) -> Result<ModelParams, MemoryError> {
        let mem = Memory::plan(args)?;
        Ok(Self::with_kv_tokens(args, mem.max_total_num_tokens))
    }

    /// Parameters with a given KV pool size, memory plan skipped (for a server whose start-up
    /// is about to fail anyway, and for what-if questions).
    pub fn with_kv_tokens(args: &SimArgs, max_total_num_tokens: u64) -> ModelParams {
        let context_len = args.context_length.unwrap_or(DEFAULT_CONTEXT_LEN);
        // SGLang: the request pool is sized from the KV pool, clamped to [2048, 4096].
        let default_mrr =
            ((max_total_num_tokens / u64::from(context_len)) * 512).clamp(2048, 4096) as u32;
        let chunk = match args.chunked_prefill_size {
            Some(-1) => args.max_prefill_tokens.max(context_len),
            Some(c) => c as u32,
            None => DEFAULT_CHUNKED_PREFILL,
        };
        ModelParams {
            backend: args.moe_runner_backend,
            moe: moe_cost(args.moe_runner_backend),
            attention: attention_factor(args.attention_backend.as_deref()),
            tp: args.tp_size,
            cuda_graph: !args.disable_cuda_graph,
            cuda_graph_max_bs: args.cuda_graph_max_bs.unwrap_or(DEFAULT_CUDA_GRAPH_MAX_BS),
            max_running_requests: args.max_running_requests.unwrap_or(default_mrr),
            chunked_prefill_size: chunk,
            max_total_num_tokens,
            context_len,
            time_scale: args.time_scale,
            slowdown: args.slowdown,
            crash_above_batch: args.crash_above_batch,
            crash_backend: args.crash_backend,
        }
    }

    /// Whether a decode step of `batch` requests makes the engine crash (fault injection).
    pub fn crashes_at(&self, batch: u32) -> bool {
        match self.crash_above_batch {
            Some(n) => batch > n && self.crash_backend.is_none_or(|b| b == self.backend),
            None => false,
        }
    }

    /// Whether a decode step of `batch` replays a CUDA graph.
    pub fn uses_graph(&self, batch: u32, prefill_tokens: u32) -> bool {
        self.cuda_graph && prefill_tokens == 0 && batch <= self.cuda_graph_max_bs
    }

    /// Engine time of a step in milliseconds (slowdown applied, time-scale not).
    pub fn step_ms(&self, batch: u32, prefill_tokens: u32) -> f64 {
        let b = f64::from(batch);
        let p = f64::from(prefill_tokens);
        let mut dense = DENSE_FIXED_MS + DENSE_PER_REQ_MS * self.attention * b;
        let mut moe = self.moe.fixed_ms + self.moe.per_req_ms * b;
        if prefill_tokens > 0 {
            dense += PREFILL_FIXED_MS + PREFILL_DENSE_PER_TOKEN_MS * self.attention * p;
            moe += self.moe.prefill_per_token_ms * p;
        }
        let tp = f64::from(self.tp);
        let log_tp = tp.log2();
        let allreduce = if self.tp > 1 {
            0.15 * log_tp + 0.0005 * (b + p) * log_tp
        } else {
            0.0
        };
        let gpu = (dense + moe) / tp.powf(0.9) + allreduce;
        let launch = if self.uses_graph(batch, prefill_tokens) {
            GRAPH_LAUNCH_MS
        } else {
            EAGER_LAUNCH_MS
        };
        self.slowdown * (SYNC_MS + launch.max(gpu) + OVERLAP_LOSS * launch.min(gpu))
    }
}

/// Wall-clock time a client observes for one step: `batch` decoding requests plus
/// `prefill_tokens` prompt tokens (0 for a pure decode step).
pub fn step_time(params: &ModelParams, batch: u32, prefill_tokens: u32) -> Duration {
    Duration::from_secs_f64(params.step_ms(batch, prefill_tokens) * params.time_scale / 1e3)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::args::parse_args;

    pub(crate) fn params(flags: &str) -> ModelParams {
        let v: Vec<String> = flags.split_whitespace().map(String::from).collect();
        ModelParams::from_args(&parse_args(&v).unwrap()).unwrap()
    }

    #[test]
    fn eager_is_slower_at_small_batch_and_close_at_large() {
        let g = params("");
        let e = params("--disable-cuda-graph");
        let r1 = e.step_ms(1, 0) / g.step_ms(1, 0);
        let r256 = e.step_ms(256, 0) / g.step_ms(256, 0);
        assert!(r1 > 1.25, "batch 1 eager/graph {r1}");
        assert!(r256 > 1.0 && r256 < 1.1, "batch 256 eager/graph {r256}");
        // Above the capture limit, graphs are not used.
        assert_eq!(g.step_ms(300, 0), e.step_ms(300, 0));
    }

    #[test]
    fn backend_curves_cross() {
        let t = params("--moe-runner-backend triton");
        let f = params("--moe-runner-backend flashinfer_cutlass");
        assert!(f.step_ms(1, 0) > t.step_ms(1, 0) * 1.05);
        assert!(t.step_ms(128, 0) > f.step_ms(128, 0) * 1.2);
    }

    #[test]
    fn tp_and_slowdown_and_time_scale() {
        let one = params("");
        let two = params("--tp-size 2");
        assert!(two.step_ms(64, 0) < one.step_ms(64, 0));
        let slow = params("--slowdown 1.1");
        assert!((slow.step_ms(64, 0) / one.step_ms(64, 0) - 1.1).abs() < 1e-9);
        let fast = params("--time-scale 0.01");
        let d = step_time(&fast, 64, 0).as_secs_f64() * 1e3;
        assert!((d - one.step_ms(64, 0) * 0.01).abs() < 1e-6);
    }

    #[test]
    fn crash_matches_backend() {
        let p = params(
            "--moe-runner-backend flashinfer_cutlass --crash-above-batch 384 --crash-backend flashinfer_cutlass",
        );
        assert!(!p.crashes_at(384) && p.crashes_at(385));
        let p = params(
            "--moe-runner-backend triton --crash-above-batch 384 --crash-backend flashinfer_cutlass",
        );
        assert!(!p.crashes_at(512));
    }
}
