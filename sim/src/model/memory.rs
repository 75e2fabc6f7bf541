//! GPU memory plan at start-up: weights, KV pool, activations, CUDA graphs.

use crate::args::SimArgs;

/// BF16 weights of the simulated model, all GPUs together.
pub const WEIGHTS_GB: f64 = 60.0;
/// KV bytes per token with one GPU (48 layers x 4 KV heads x 128 dims x K,V x 2 bytes).
pub const KV_BYTES_PER_TOKEN: f64 = 98_304.0;
/// Memory held by the CUDA context and NCCL before weights load.
pub const CONTEXT_GB: f64 = 1.2;
/// Activation memory outside the static pool, plus per chunked-prefill token.
pub const ACTIVATIONS_GB: f64 = 2.0;
pub const ACTIVATIONS_PER_CHUNK_TOKEN_GB: f64 = 0.0002;
/// CUDA graph memory: fixed plus per captured batch size.
pub const GRAPH_BASE_GB: f64 = 0.5;
pub const GRAPH_PER_BS_GB: f64 = 0.004;
/// SGLang's default `--mem-fraction-static` on a 141 GB GPU.
pub const DEFAULT_MEM_FRACTION: f64 = 0.88;
const GIB: f64 = (1u64 << 30) as f64;

/// Why the engine cannot start with these flags (what SGLang would die of).
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum MemoryError {
    /// The static pool cannot even hold the weights: no room for a KV cache.
    #[error(
        "Not enough memory. Please try to increase --mem-fraction-static. weights {weights_gb:.2} GB, static pool {static_gb:.2} GB"
    )]
    NoKvRoom { weights_gb: f64, static_gb: f64 },
    /// Activations and CUDA graphs do not fit next to the static pool.
    #[error(
        "CUDA out of memory. Tried to allocate {tried_gb:.2} GiB. GPU 0 has a total capacity of {total_gb:.2} GiB of which {free_gb:.2} GiB is free."
    )]
    OutOfMemory {
        tried_gb: f64,
        total_gb: f64,
        free_gb: f64,
    },
}

/// The memory plan the start-up log reports.
#[derive(Debug, Clone, PartialEq)]
pub struct Memory {
    pub total_gb: f64,
    pub mem_fraction_static: f64,
    pub weights_gb: f64,
    pub kv_gb: f64,
    pub graph_gb: f64,
    pub activations_gb: f64,
    pub max_total_num_tokens: u64,
    /// Free memory after the KV pool, before graphs (the `available_gpu_mem` of the log).
    pub available_after_kv_gb: f64,
}

impl Memory {
    /// Plans memory for `args` (per GPU).
    pub fn plan(args: &SimArgs) -> Result<Memory, MemoryError> {
        let total = args.gpu_memory_gb;
        let frac = args.mem_fraction_static.unwrap_or(DEFAULT_MEM_FRACTION);
        let tp = f64::from(args.tp_size);
        let weights = WEIGHTS_GB / tp;
        let static_gb = total * frac;
        let kv_gb = static_gb - weights - CONTEXT_GB;
        if kv_gb < 0.5 {
            return Err(MemoryError::NoKvRoom {
                weights_gb: weights,
                static_gb,
            });
        }
        let chunk = match args.chunked_prefill_size {
            Some(c) if c > 0 => c as f64,
            Some(_) => f64::from(args.max_prefill_tokens),
            None => f64::from(super::DEFAULT_CHUNKED_PREFILL),
        };
        let activations = ACTIVATIONS_GB + ACTIVATIONS_PER_CHUNK_TOKEN_GB * chunk;
        let graph = if args.disable_cuda_graph {
            0.0
        } else {
            GRAPH_BASE_GB
                + GRAPH_PER_BS_GB
                    * f64::from(
                        args.cuda_graph_max_bs
                            .unwrap_or(super::DEFAULT_CUDA_GRAPH_MAX_BS),
                    )
        };
        let rest = total - static_gb;
        if rest < activations + graph {
            return Err(MemoryError::OutOfMemory {
                tried_gb: activations + graph,
                total_gb: total,
                free_gb: rest.max(0.0),
            });
        }
        let dtype_factor = match args.kv_cache_dtype.as_str() {
            "fp8_e5m2" | "fp8_e4m3" | "mxfp8" => 0.5,
            "nvfp4" | "fp4_mx_block16" | "fp4_e2m1" => 0.25,
            _ => 1.0,
        };
        let per_token = KV_BYTES_PER_TOKEN * dtype_factor / tp.min(4.0);
        let mut max_total_num_tokens = (kv_gb * GIB / per_token) as u64;
        if let Some(cap) = args.max_total_tokens {
            max_total_num_tokens = max_total_num_tokens.min(u64::from(cap));
        }
        Ok(Memory {
            total_gb: total,
            mem_fraction_static: frac,
            weights_gb: weights,
            kv_gb,
            graph_gb: graph,
            activations_gb: activations,
            max_total_num_tokens,
            available_after_kv_gb: rest,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::args::parse_args;

    fn plan(s: &str) -> Result<Memory, MemoryError> {
        let v: Vec<String> = s.split_whitespace().map(String::from).collect();
        Memory::plan(&parse_args(&v).unwrap())
    }

    #[test]
    fn fraction_sets_kv_capacity() {
        let a = plan("").unwrap();
        let b = plan("--mem-fraction-static 0.6").unwrap();
        assert!(a.max_total_num_tokens > 600_000, "{a:?}");
        assert!(b.max_total_num_tokens < a.max_total_num_tokens / 2);
        assert!(plan("--tp-size 2").unwrap().max_total_num_tokens > a.max_total_num_tokens);
        let fp8 = plan("--kv-cache-dtype fp8_e4m3")
            .unwrap()
            .max_total_num_tokens;
        assert!(fp8 > a.max_total_num_tokens * 19 / 10);
        assert_eq!(
            plan("--max-total-tokens 5000")
                .unwrap()
                .max_total_num_tokens,
            5000
        );
    }

    #[test]
    fn over_commit_fails_at_start() {
        assert!(matches!(
            plan("--mem-fraction-static 0.98"),
            Err(MemoryError::OutOfMemory { .. })
        ));
        assert!(matches!(
            plan("--mem-fraction-static 0.4"),
            Err(MemoryError::NoKvRoom { .. })
        ));
        assert!(plan("--mem-fraction-static 0.4 --tp-size 2").is_ok());
    }
}
