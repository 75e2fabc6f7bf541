//! The text of the failures the simulator imitates, shaped like SGLang's own.

use crate::logs;

/// The scheduler traceback SGLang prints when a batch crashes an attention backend.
pub fn batch_crash_traceback(batch: u32, backend: &str) -> String {
    format!(
        "[{ts} TP0] Scheduler hit an exception: Traceback (most recent call last):
  File \"/usr/local/lib/python3.12/dist-packages/sglang/srt/managers/scheduler.py\", line 3214, in run_scheduler_process
    scheduler.event_loop_overlap()
  File \"/usr/local/lib/python3.12/dist-packages/torch/utils/_contextlib.py\", line 120, in decorate_context
    return func(*args, **kwargs)
  File \"/usr/local/lib/python3.12/dist-packages/sglang/srt/managers/scheduler.py\", line 1102, in event_loop_overlap
    batch_result = self.run_batch(batch)
  File \"/usr/local/lib/python3.12/dist-packages/sglang/srt/managers/scheduler.py\", line 2051, in run_batch
    batch_result = self.model_worker.forward_batch_generation(model_worker_batch)
  File \"/usr/local/lib/python3.12/dist-packages/sglang/srt/managers/tp_worker.py\", line 281, in forward_batch_generation
    logits_output, can_run_cuda_graph = self.model_runner.forward(forward_batch)
  File \"/usr/local/lib/python3.12/dist-packages/sglang/srt/model_executor/model_runner.py\", line 2003, in forward
    output = self._forward_raw(forward_batch, skip_attn_backend_init, pp_proxy_tensors)
  File \"/usr/local/lib/python3.12/dist-packages/sglang/srt/model_executor/model_runner.py\", line 2061, in _forward_raw
    ret = self.forward_decode(forward_batch, pp_proxy_tensors=pp_proxy_tensors)
  File \"/usr/local/lib/python3.12/dist-packages/sglang/srt/model_executor/model_runner.py\", line 1930, in forward_decode
    self.attn_backend.init_forward_metadata(forward_batch)
  File \"/usr/local/lib/python3.12/dist-packages/sglang/srt/layers/attention/flashinfer_mla_backend.py\", line 412, in init_forward_metadata
    max_seq_len=self.forward_metadata.prefill_metadata.max_seq_len,
AttributeError: 'PrefillMetadata' object has no attribute 'max_seq_len'

[{ts}] Received sigquit from a child process. It usually means the child failed.
[{ts}] batch_size={batch} moe_runner_backend={backend}: scheduler process exited, killing the server.
",
        ts = chrono::Local::now().format("%Y-%m-%d %H:%M:%S"),
    )
}

/// The traceback of a CUDA OOM during start-up.
pub fn oom_traceback(tried_gb: f64, total_gb: f64, free_gb: f64) -> String {
    format!(
        "[{ts} TP0] Scheduler hit an exception: Traceback (most recent call last):
  File \"/usr/local/lib/python3.12/dist-packages/sglang/srt/managers/scheduler.py\", line 3201, in run_scheduler_process
    scheduler = Scheduler(server_args, port_args, gpu_id, tp_rank, moe_ep_rank, pp_rank, dp_rank)
  File \"/usr/local/lib/python3.12/dist-packages/sglang/srt/managers/scheduler.py\", line 412, in __init__
    self.tp_worker = TpModelWorker(
  File \"/usr/local/lib/python3.12/dist-packages/sglang/srt/managers/tp_worker.py\", line 93, in __init__
    self.model_runner = ModelRunner(
  File \"/usr/local/lib/python3.12/dist-packages/sglang/srt/model_executor/model_runner.py\", line 361, in __init__
    self.initialize(min_per_gpu_memory)
  File \"/usr/local/lib/python3.12/dist-packages/sglang/srt/model_executor/model_runner.py\", line 498, in initialize
    self.init_cuda_graphs()
  File \"/usr/local/lib/python3.12/dist-packages/sglang/srt/model_executor/cuda_graph_runner.py\", line 402, in capture
    out = run_once()
torch.OutOfMemoryError: CUDA out of memory. Tried to allocate {tried_gb:.2} GiB. GPU 0 has a total capacity of {total_gb:.2} GiB of which {free_gb:.2} GiB is free. Of the allocated memory {used:.2} GiB is allocated by PyTorch. See documentation for Memory Management  (https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)

[{ts}] Received sigquit from a child process. It usually means the child failed.
",
        ts = chrono::Local::now().format("%Y-%m-%d %H:%M:%S"),
        used = total_gb - free_gb,
    )
}

/// The traceback SGLang prints when the KV pool has no room (a `RuntimeError`).
pub fn no_kv_room_traceback(msg: &str) -> String {
    format!(
        "[{ts} TP0] Scheduler hit an exception: Traceback (most recent call last):
  File \"/usr/local/lib/python3.12/dist-packages/sglang/srt/managers/scheduler.py\", line 3201, in run_scheduler_process
    scheduler = Scheduler(server_args, port_args, gpu_id, tp_rank, moe_ep_rank, pp_rank, dp_rank)
  File \"/usr/local/lib/python3.12/dist-packages/sglang/srt/model_executor/model_runner.py\", line 1512, in init_memory_pool
    raise RuntimeError(
RuntimeError: {msg}

[{ts}] Received sigquit from a child process. It usually means the child failed.
",
        ts = chrono::Local::now().format("%Y-%m-%d %H:%M:%S"),
    )
}

/// Prints the batch-crash traceback and ends the process with status 1, as SGLang's server
/// does when its scheduler child dies.
pub fn crash_batch(batch: u32, backend: &str) -> ! {
    logs::raw(&batch_crash_traceback(batch, backend));
    std::process::exit(1);
}
