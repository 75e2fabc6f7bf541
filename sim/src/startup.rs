//! Start-up: the effective server args, the memory plan, the SGLang start-up log lines spread
//! over the configured delay, and the start-up faults.

use serde_json::{Value, json};

use crate::args::SimArgs;
use crate::faults;
use crate::logs;
use crate::model::{Memory, MemoryError, ModelParams};

/// Version string reported by `/server_info` and `/get_server_info`.
pub const VERSION: &str = "0.5.9-fleetbench-sim";

/// The effective args, with SGLang's key names, in SGLang's order (roughly).
pub fn effective_args(args: &SimArgs, params: &ModelParams) -> Vec<(String, Value)> {
    let mem_frac = args
        .mem_fraction_static
        .unwrap_or(crate::model::memory::DEFAULT_MEM_FRACTION);
    let mut v: Vec<(&str, Value)> = vec![
        ("model_path", json!(args.model_path)),
        ("tokenizer_path", json!(args.model_path)),
        ("served_model_name", json!(args.served_model_name())),
        ("host", json!(args.host)),
        ("port", json!(args.port)),
        ("trust_remote_code", json!(args.trust_remote_code)),
        ("context_length", json!(args.context_length)),
        ("mem_fraction_static", json!(mem_frac)),
        ("max_running_requests", json!(args.max_running_requests)),
        ("chunked_prefill_size", json!(params.chunked_prefill_size)),
        ("max_prefill_tokens", json!(args.max_prefill_tokens)),
        ("schedule_policy", json!("fcfs")),
        ("tp_size", json!(args.tp_size)),
        ("random_seed", json!(args.seed)),
        ("log_level", json!(args.log_level)),
        ("enable_metrics", json!(args.enable_metrics)),
        (
            "attention_backend",
            json!(args.attention_backend.as_deref().unwrap_or("flashinfer")),
        ),
        (
            "moe_runner_backend",
            json!(args.moe_runner_backend.as_str()),
        ),
        ("disable_cuda_graph", json!(args.disable_cuda_graph)),
        ("cuda_graph_max_bs", json!(params.cuda_graph_max_bs)),
        ("kv_cache_dtype", json!(args.kv_cache_dtype)),
        ("stream_interval", json!(args.stream_interval)),
        ("max_total_tokens", json!(args.max_total_tokens)),
        (
            "stream_response_default_include_usage",
            json!(args.default_include_usage),
        ),
    ];
    v.push((
        "sim_mode",
        json!(if args.fixed_latency().is_some() {
            "fixed-latency"
        } else {
            "model"
        }),
    ));
    if let Some((ttft, itl)) = args.fixed_latency() {
        v.push(("sim_ttft_ms", json!(ttft.as_secs_f64() * 1e3)));
        v.push(("sim_itl_ms", json!(itl.as_secs_f64() * 1e3)));
    }
    v.extend([
        ("sim_time_scale", json!(args.time_scale)),
        ("sim_jitter", json!(args.jitter)),
        ("sim_slowdown", json!(args.slowdown)),
        ("sim_gpu_memory_gb", json!(args.gpu_memory_gb)),
    ]);
    let mut out: Vec<(String, Value)> = v.into_iter().map(|(k, x)| (k.to_string(), x)).collect();
    // Compatibility flags the model ignores still show, as SGLang shows every arg.
    for (flag, value) in &args.accepted {
        out.push((
            flag.trim_start_matches("--").replace('-', "_"),
            json!(value),
        ));
    }
    out
}

fn py_repr(v: &Value) -> String {
    match v {
        Value::Null => "None".into(),
        Value::Bool(true) => "True".into(),
        Value::Bool(false) => "False".into(),
        Value::String(s) => format!("'{}'", s.replace('\\', "\\\\").replace('\'', "\\'")),
        other => other.to_string(),
    }
}

/// `server_args=ServerArgs(model_path='…', …)` as SGLang logs it.
pub fn server_args_line(fields: &[(String, Value)]) -> String {
    let inner: Vec<String> = fields
        .iter()
        .map(|(k, v)| format!("{k}={}", py_repr(v)))
        .collect();
    format!("server_args=ServerArgs({})", inner.join(", "))
}

/// The `/server_info` document: the effective args plus scheduler facts.
pub fn server_info(fields: &[(String, Value)], params: &ModelParams) -> Value {
    let mut m = serde_json::Map::new();
    for (k, v) in fields {
        m.insert(k.clone(), v.clone());
    }
    m.insert(
        "max_total_num_tokens".into(),
        json!(params.max_total_num_tokens),
    );
    m.insert(
        "internal_states".into(),
        json!([{
            "max_total_num_tokens": params.max_total_num_tokens,
            "max_running_requests": params.max_running_requests,
            "chunked_prefill_size": params.chunked_prefill_size,
            "context_len": params.context_len,
            "cuda_graph": params.cuda_graph,
        }]),
    );
    m.insert("version".into(), json!(VERSION));
    Value::Object(m)
}

/// How start-up ends.
#[derive(Debug)]
pub enum StartupOutcome {
    /// Ready to serve.
    Ready,
    /// The engine died; the caller exits with status 1 (traceback already printed).
    Failed,
}

/// Prints the start-up log spread over the delay, imitating the failures that happen there.
/// `sleep` waits a wall-clock duration (tokio's timer is precise enough at this scale).
pub async fn run(args: &SimArgs, fields: &[(String, Value)]) -> StartupOutcome {
    let delay = args.effective_startup_delay();
    let part = |f: f64| tokio::time::sleep(delay.mul_f64(f));
    logs::server(&server_args_line(fields));
    let tp = f64::from(args.tp_size);
    let total = args.gpu_memory_gb;
    let weights = crate::model::memory::WEIGHTS_GB / tp;
    let ctx = crate::model::memory::CONTEXT_GB;
    logs::info(&format!(
        "Init torch distributed ends. mem usage={ctx:.2} GB"
    ));
    logs::info(&format!(
        "Load weight begin. avail mem={:.2} GB",
        total - ctx
    ));
    part(0.55).await;
    if args.faults.oom_at_start {
        logs::raw(&faults::oom_traceback(weights * 0.25, total, 0.12));
        return StartupOutcome::Failed;
    }
    // Load time of 60 GB at ~2.6 GB/s, in simulated seconds.
    let load_s = 23.18 / tp.sqrt();
    logs::info(&format!(
        "Load weight end. elapsed={load_s:.2} s, type=Qwen3MoeForCausalLM, avail mem={:.2} GB, mem usage={weights:.2} GB.",
        total - ctx - weights
    ));
    let mem = match Memory::plan(args) {
        Ok(m) => m,
        Err(e @ MemoryError::NoKvRoom { .. }) => {
            logs::raw(&faults::no_kv_room_traceback(&e.to_string()));
            return StartupOutcome::Failed;
        }
        Err(MemoryError::OutOfMemory {
            tried_gb,
            total_gb,
            free_gb,
        }) => {
            logs::info(&format!(
                "Capture cuda graph begin. This can take up to several minutes. avail mem={free_gb:.2} GB"
            ));
            logs::raw(&faults::oom_traceback(tried_gb, total_gb, free_gb));
            return StartupOutcome::Failed;
        }
    };
    logs::info(&format!(
        "KV Cache is allocated. #tokens: {}, K size: {:.2} GB, V size: {:.2} GB",
        mem.max_total_num_tokens,
        mem.kv_gb / 2.0,
        mem.kv_gb / 2.0
    ));
    logs::info(&format!(
        "Memory pool end. avail mem={:.2} GB",
        mem.available_after_kv_gb
    ));
    part(0.15).await;
    let params = match ModelParams::from_args(args) {
        Ok(p) => p,
        Err(_) => return StartupOutcome::Failed,
    };
    if params.cuda_graph {
        let bs: Vec<String> = graph_batch_sizes(params.cuda_graph_max_bs)
            .iter()
            .map(u32::to_string)
            .collect();
        logs::info(&format!(
            "Capture cuda graph begin. This can take up to several minutes. avail mem={:.2} GB",
            mem.available_after_kv_gb
        ));
        part(0.2).await;
        logs::info(&format!(
            "Capture cuda graph end. Time elapsed: {:.2} s. mem usage={:.2} GB. avail mem={:.2} GB.",
            4.0 + 0.02 * bs.len() as f64,
            mem.graph_gb,
            mem.available_after_kv_gb - mem.graph_gb
        ));
    } else {
        part(0.2).await;
    }
    logs::info(&format!(
        "max_total_num_tokens={}, chunked_prefill_size={}, max_prefill_tokens={}, max_running_requests={}, context_len={}, available_gpu_mem={:.2} GB",
        params.max_total_num_tokens,
        params.chunked_prefill_size,
        args.max_prefill_tokens,
        params.max_running_requests,
        params.context_len,
        mem.available_after_kv_gb - mem.graph_gb
    ));
    logs::server(&format!(
        "INFO:     Uvicorn running on http://{}:{} (Press CTRL+C to quit)",
        args.host, args.port
    ));
    part(0.1).await;
    logs::server("The server is fired up and ready to roll!");
    StartupOutcome::Ready
}

/// The batch sizes SGLang captures graphs for, up to `max_bs`.
pub fn graph_batch_sizes(max_bs: u32) -> Vec<u32> {
    let mut v: Vec<u32> = vec![1, 2, 4, 8, 12];
    let mut b = 16;
    while b <= max_bs {
        v.push(b);
        b += if b < 256 { 8 } else { 16 };
    }
    v.retain(|&b| b <= max_bs);
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn server_args_line_is_python_like() {
        let args = SimArgs::default();
        let params = ModelParams::from_args(&args).unwrap();
        let line = server_args_line(&effective_args(&args, &params));
        assert!(
            line.starts_with("server_args=ServerArgs(model_path='"),
            "{line}"
        );
        assert!(line.contains("max_running_requests=None"));
        assert!(line.contains("disable_cuda_graph=False"));
        assert!(line.contains("moe_runner_backend='auto'"));
        let info = server_info(&effective_args(&args, &params), &params);
        assert_eq!(info["tp_size"], 1);
        assert_eq!(info["cuda_graph_max_bs"], 256);
    }

    #[test]
    fn graph_sizes_stop_at_max() {
        let v = graph_batch_sizes(32);
        assert_eq!(v, vec![1, 2, 4, 8, 12, 16, 24, 32]);
    }
}
