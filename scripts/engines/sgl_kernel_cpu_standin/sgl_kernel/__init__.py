"""A stand-in for the few CPU helpers SGLang 0.5.23 imports from its CPU kernel package.

Why: SGLang's CPU path (`SGLANG_USE_CPU_ENGINE=1`, `--device cpu`) imports a handful of
helpers from `sgl_kernel` unconditionally, and the registry has no CPU build of that package
(`sglang-kernel-cpu` is built from source upstream; `sgl-kernel` and `sglang-kernel` hold CUDA
objects only). The heavy kernels (GEMM, attention, norms) are guarded by a check for a
registered `torch.ops.sgl_kernel` op and fall back to plain torch, so they need nothing here.

Only `assign_req_to_token_pool_cpu` is called on the Llama path the tests use: it is written
here in plain torch, after SGLang's own Triton kernel `assign_req_to_token_pool`
(sglang/srt/mem_cache/allocation.py). Every other name raises if it is ever called, so a code
path that needs a real kernel fails loudly instead of computing something else.

Every SGLang result obtained with this module ran on the CPU with this stand-in for SGLang's
CPU kernel helpers: SGLang's GPU kernels are not exercised. Pinned to sglang 0.5.23 (see
scripts/engines/sglang.lock); a later release may import more names.
"""

import torch

STANDIN = "fleetbench stand-in for sgl_kernel CPU helpers (sglang 0.5.23)"


def assign_req_to_token_pool_cpu(
    req_pool_indices: torch.Tensor,
    req_to_token: torch.Tensor,
    start_offset: torch.Tensor,
    end_offset: torch.Tensor,
    out_cache_loc: torch.Tensor,
    pool_len: int,
) -> None:
    """Writes each request's new cache locations into its row of the request-to-token table:
    row `req_pool_indices[i]`, columns `start_offset[i]:end_offset[i]`, taken in order from
    `out_cache_loc` (the requests' locations one after another)."""
    del pool_len  # the row length is req_to_token's own
    starts = start_offset.tolist()
    ends = end_offset.tolist()
    rows = req_pool_indices.tolist()
    at = 0
    for row, start, end in zip(rows, starts, ends):
        n = end - start
        if n > 0:
            req_to_token[row, start:end] = out_cache_loc[at : at + n].to(req_to_token.dtype)
        at += n


def _not_stood_in(name: str):
    def missing(*args, **kwargs):
        raise NotImplementedError(
            f"sgl_kernel.{name} is not provided by the {STANDIN}: this SGLang code path needs "
            "SGLang's real CPU kernel package"
        )

    missing.__name__ = name
    return missing


copy_all_layer_kv_cache_cpu = _not_stood_in("copy_all_layer_kv_cache_cpu")
fill_accept_out_cache_loc_cpu = _not_stood_in("fill_accept_out_cache_loc_cpu")
fill_bonus_tokens_cpu = _not_stood_in("fill_bonus_tokens_cpu")
rotate_input_ids_cpu = _not_stood_in("rotate_input_ids_cpu")
build_tree_kernel_efficient_cpu = _not_stood_in("build_tree_kernel_efficient_cpu")
verify_tree_greedy_cpu = _not_stood_in("verify_tree_greedy_cpu")
build_draft_decode_metadata_cpu = _not_stood_in("build_draft_decode_metadata_cpu")
assign_draft_cache_locs_contiguous_cpu = _not_stood_in("assign_draft_cache_locs_contiguous_cpu")
assign_extend_cache_locs_cpu = _not_stood_in("assign_extend_cache_locs_cpu")
