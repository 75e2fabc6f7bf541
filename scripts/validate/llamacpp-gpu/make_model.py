#!/usr/bin/env python3
"""Writes a random-weight Llama GGUF in the layer shapes of a real model, with no hub.

Random weights give nonsense text but the real model's compute and memory traffic; with
`ignore_eos` the output lengths are exact. The file is written straight with llama.cpp's own
gguf-py (from the llama.cpp tree: pass its gguf-py folder with --gguf-py, or have `gguf`
installed) and numpy: no transformers, no conversion step, so the 16 GB bf16 file of the full
Llama-3.1-8B shape takes about a minute.

Tokenizer: a synthetic byte-level BPE of Llama 3's size (128,000 merged tokens + 256 special),
built by rule (every byte, then 2-, 3- and 4-letter groups of a-z and the space mark), stored as
`tokenizer.ggml.model = gpt2` with Llama 3's pre-tokenizer (`llama-bpe`). It is a valid BPE for
llama.cpp: every merge joins two tokens that exist, in rank order.

Weights are bf16 (1-D norm weights f32, as llama.cpp's converter writes them), drawn from
N(0, 0.02) with numpy's default_rng(seed). To keep the 8B file fast to make, each layer takes
one of two random layer sets in turn (the compute does not depend on the values).

    python3 make_model.py --shape llama31-8b --out /models/llama31-8b-random.bf16.gguf \
        --gguf-py llama.cpp/gguf-py
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

# name: (n_embd, n_layer, n_head, n_head_kv, n_ff, tied embeddings)
SHAPES = {
    # meta-llama/Llama-3.1-8B: 8.03 B parameters.
    "llama31-8b": (4096, 32, 32, 8, 14336, False),
    # meta-llama/Llama-3.2-1B: 1.24 B parameters (output tied to the token embeddings).
    "llama32-1b": (2048, 16, 32, 8, 8192, True),
    # For rehearsals on a CPU: the same vocabulary, two tiny layers.
    "tiny": (256, 2, 4, 2, 512, True),
}
N_VOCAB_NORMAL = 128000
N_VOCAB = 128256
CTX_TRAIN = 131072
ROPE_THETA = 500000.0
RMS_EPS = 1e-5
STD = 0.02


def bytes_to_unicode() -> dict[int, str]:
    """GPT-2's byte-to-character map, which llama.cpp's BPE decoder inverts."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, (chr(c) for c in cs)))


def vocabulary() -> tuple[list[str], list[int], list[str]]:
    """Tokens, token types and merges of the synthetic Llama-3-sized BPE."""
    byte_chars = bytes_to_unicode()
    tokens = [byte_chars[b] for b in range(256)]
    merges: list[str] = []
    alphabet = ["Ġ"] + [chr(c) for c in range(ord("a"), ord("z") + 1)]
    have = set(tokens)
    level = alphabet[:]  # groups of the previous length
    while len(tokens) < N_VOCAB_NORMAL:
        nxt = []
        for left in level:
            for ch in alphabet:
                if len(tokens) >= N_VOCAB_NORMAL:
                    break
                tok = left + ch
                if tok in have:
                    continue
                tokens.append(tok)
                have.add(tok)
                merges.append(f"{left} {ch}")
                nxt.append(tok)
        level = nxt
    types = [1] * len(tokens)  # NORMAL
    special = ["<|begin_of_text|>", "<|end_of_text|>"] + [
        f"<|reserved_special_token_{i}|>" for i in range(N_VOCAB - N_VOCAB_NORMAL - 2)
    ]
    tokens += special
    types += [3] * len(special)  # CONTROL
    assert len(tokens) == N_VOCAB
    return tokens, types, merges


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shape", choices=sorted(SHAPES), required=True)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--layers", type=int, help="override the shape's layer count")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--gguf-py", type=Path, help="llama.cpp's gguf-py folder (else the installed gguf)")
    a = ap.parse_args()
    if a.gguf_py:
        sys.path.insert(0, str(a.gguf_py))
    import gguf  # noqa: E402

    n_embd, n_layer, n_head, n_head_kv, n_ff, tied = SHAPES[a.shape]
    if a.layers:
        n_layer = a.layers
    head_dim = n_embd // n_head
    t0 = time.time()
    rng = np.random.default_rng(a.seed)

    def bf16(shape: tuple[int, ...]) -> np.ndarray:
        """N(0, STD) rounded to bf16, as uint16 bit patterns (written raw as BF16)."""
        x = rng.standard_normal(shape, dtype=np.float32)
        x *= STD
        bits = x.view(np.uint32)
        # round to nearest even, as torch does
        bits += 0x7FFF + ((bits >> 16) & 1)
        return (bits >> 16).astype(np.uint16)

    w = gguf.GGUFWriter(str(a.out), "llama")
    w.add_name(f"fleetbench random {a.shape}" + (f" ({n_layer} layers)" if a.layers else ""))
    w.add_context_length(CTX_TRAIN)
    w.add_embedding_length(n_embd)
    w.add_block_count(n_layer)
    w.add_feed_forward_length(n_ff)
    w.add_head_count(n_head)
    w.add_head_count_kv(n_head_kv)
    w.add_rope_dimension_count(head_dim)
    w.add_rope_freq_base(ROPE_THETA)
    w.add_layer_norm_rms_eps(RMS_EPS)
    w.add_vocab_size(N_VOCAB)
    w.add_file_type(gguf.LlamaFileType.MOSTLY_BF16)
    tokens, types, merges = vocabulary()
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("llama-bpe")
    w.add_token_list(tokens)
    w.add_token_types(types)
    w.add_token_merges(merges)
    w.add_bos_token_id(N_VOCAB_NORMAL)
    w.add_eos_token_id(N_VOCAB_NORMAL + 1)
    w.add_add_bos_token(True)

    BF16 = gguf.GGMLQuantizationType.BF16
    ones = np.ones(n_embd, dtype=np.float32)
    # Two random layer sets, used in turn.
    layer_shapes = {
        "attn_q": (n_embd, n_embd),
        "attn_k": (n_head_kv * head_dim, n_embd),
        "attn_v": (n_head_kv * head_dim, n_embd),
        "attn_output": (n_embd, n_embd),
        "ffn_gate": (n_ff, n_embd),
        "ffn_up": (n_ff, n_embd),
        "ffn_down": (n_embd, n_ff),
    }
    sets = [{k: bf16(s) for k, s in layer_shapes.items()} for _ in range(min(2, n_layer))]
    embd = bf16((N_VOCAB, n_embd))
    plan: list[tuple[str, np.ndarray]] = [("token_embd.weight", embd)]
    for i in range(n_layer):
        s = sets[i % len(sets)]
        plan.append((f"blk.{i}.attn_norm.weight", ones))
        for k in ("attn_q", "attn_k", "attn_v", "attn_output"):
            plan.append((f"blk.{i}.{k}.weight", s[k]))
        plan.append((f"blk.{i}.ffn_norm.weight", ones))
        for k in ("ffn_gate", "ffn_up", "ffn_down"):
            plan.append((f"blk.{i}.{k}.weight", s[k]))
    plan.append(("output_norm.weight", ones))
    if not tied:
        plan.append(("output.weight", bf16((N_VOCAB, n_embd))))
    params = 0
    for name, arr in plan:
        w.add_tensor_info(name, arr.shape, arr.dtype, arr.nbytes, raw_dtype=BF16 if arr.dtype == np.uint16 else None)
        params += arr.size
    t_gen = time.time() - t0
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_ti_data_to_file()
    for _, arr in plan:
        w.write_tensor_data(arr)
    w.close()
    size = a.out.stat().st_size
    print(
        f"wrote {a.out}: shape {a.shape}, {n_layer} layers, n_embd {n_embd}, heads {n_head}/{n_head_kv}, "
        f"n_ff {n_ff}, vocab {N_VOCAB}, {params / 1e9:.3f} B parameters, {size / 1e9:.2f} GB, "
        f"random values {t_gen:.1f} s, total {time.time() - t0:.1f} s",
        flush=True,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
