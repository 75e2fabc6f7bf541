#!/usr/bin/env python3
"""Writes the seed corpus of the fuzz targets (fuzz/corpus/TARGET/seed-*) from the repository's
own examples and fixtures, plus hand-encoded agent requests. Run from the repository root;
the seeds are committed, so this is needed only to regenerate them."""
import os
import shutil
import struct

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CORPUS = os.path.join(ROOT, "fuzz", "corpus")


def put(target, name, data):
    d = os.path.join(CORPUS, target)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "seed-" + name), "wb") as f:
        f.write(data if isinstance(data, bytes) else data.encode())


def copy(target, src, name=None):
    with open(os.path.join(ROOT, src), "rb") as f:
        put(target, name or os.path.basename(src), f.read())


# spec: every example spec and suite (small TOML files)
for f in sorted(os.listdir(os.path.join(ROOT, "examples"))):
    if f.endswith(".toml"):
        copy("spec", os.path.join("examples", f))

# sse: OpenAI-style streams (completions, chat with reasoning, usage, error, junk); byte 0 = cuts
put("sse", "completions", b"\x03\x40\x80\xc0"
    b'data: {"choices":[{"text":"Hi","finish_reason":null}]}\n\n'
    b'data: {"choices":[{"text":" there","finish_reason":"stop"}],"usage":{"prompt_tokens":5,"completion_tokens":2}}\n\n'
    b"data: [DONE]\n\n")
put("sse", "chat", b"\x02\x10\x90"
    b'data: {"choices":[{"delta":{"reasoning_content":"think"},"finish_reason":null}]}\r\n\r\n'
    b'data: {"choices":[{"delta":{"content":"ok"},"finish_reason":"stop"}]}\r\n'
    b": keep-alive\nevent: x\nid: 1\n"
    b'data: {"choices":[],"usage":{"prompt_tokens":9,"completion_tokens":1}}\n'
    b"data: [DONE]\n")
put("sse", "error", b"\x01\x20"
    b'data: {"error":{"message":"bad","code":400}}\n'
    b'data: {"object":"error","message":"x"}\n'
    b"data: not json\ndata:\n")

# prom: the engines' /metrics fixtures
for sub in ("metrics", "sglang", "vllm", "llamacpp"):
    d = os.path.join(ROOT, "engines", "tests", "fixtures", sub)
    if not os.path.isdir(d):
        continue
    for f in sorted(os.listdir(d)):
        p = os.path.join(d, f)
        if f.endswith(".txt") and os.path.getsize(p) <= 16384:
            copy("prom", os.path.join("engines", "tests", "fixtures", sub, f), sub + "-" + f)

# logs: crash fixtures, each with a kind and an exit status in its first three bytes
kinds = {"sglang": 0, "vllm": 1, "llamacpp": 2, "torch": 0, "nccl": 1}
d = os.path.join(ROOT, "engines", "tests", "fixtures", "crash")
for f in sorted(os.listdir(d)):
    with open(os.path.join(d, f), "rb") as fh:
        log = fh.read()
    kind = kinds.get(f.split("_")[0], 0)
    put("logs", f, bytes([kind, 0x01, 1]) + log)
    put("logs", "signal-" + f, bytes([kind, 0x02, 9]) + log[:512])


# logs: engine startup logs (the log parsers' facts), exit code 0
for sub, kind in (("sglang", 0), ("vllm", 1), ("llamacpp", 2)):
    d = os.path.join(ROOT, "engines", "tests", "fixtures", sub)
    for f in sorted(os.listdir(d)) if os.path.isdir(d) else []:
        p = os.path.join(d, f)
        if f.endswith(".log") and os.path.getsize(p) <= 16384:
            with open(p, "rb") as fh:
                put("logs", sub + "-" + f, bytes([kind, 0x01, 0]) + fh.read())


# agent_request: protobuf by hand (field numbers from proto/.../agent.proto)
def varint(n):
    out = b""
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out += bytes([b | 0x80])
        else:
            return out + bytes([b])


def key(field, wire):
    return varint(field << 3 | wire)


def ld(field, data):
    data = data.encode() if isinstance(data, str) else data
    return key(field, 2) + varint(len(data)) + data


def u(field, n):
    return key(field, 0) + varint(n)


def dbl(field, x):
    return key(field, 1) + struct.pack("<d", x)


def flag(name, value=None):
    return ld(3, ld(1, name) + (ld(2, value) if value is not None else b""))


def env(k, v):
    return ld(4, ld(1, k) + ld(2, v))


def apply(profile, model, flags=b"", envs=b"", port=31000):
    spec = ld(1, profile) + ld(2, model) + flags + envs + u(5, port)
    return ld(1, spec) + ld(2, "run-1")


# byte 0: bit 7 clear = ApplyEngine (low bits pick the profile: 0 sg, 1 vl, 2 lc)
put("agent_request", "apply-sg", b"\x00" + apply("sg", "Qwen/Qwen3-8B",
    flag("--mem-fraction-static", "0.8") + flag("--tensor-parallel-size=1")))
put("agent_request", "apply-vl", b"\x01" + apply("vl", "Qwen/Qwen3-8B",
    flag("--speculative-config", '{"method":"ngram","num_speculative_tokens":4}')
    + flag("--trust-remote-code"), env("NCCL_DEBUG", "WARN") + env("CUDA_VISIBLE_DEVICES", "0,1")))
put("agent_request", "apply-lc", b"\x02" + apply("lc", "/tmp/m.gguf",
    flag("-c", "4096") + flag("--no-mmap") + flag("-ngl", "99")))
workload = ld(1, "w") + ld(2, u(1, 128) + u(2, 64) + dbl(3, 0.5)) + u(7, 1) + ld(8, "m") + u(10, 7)
levels = ld(2, u(1, 4) + dbl(3, 1.0)) + ld(2, dbl(2, 2.5) + dbl(3, 0.5))
put("agent_request", "bench-random", b"\x80" + ld(1, workload) + levels + u(3, 2) + u(4, 100)
    + ld(6, struct.pack("<3d", 50, 90, 99)) + ld(7, dbl(1, 200) + dbl(5, 50)) + ld(8, "run-1"))
sharegpt = ld(1, "s") + ld(3, ld(1, "/nonexistent-fuzz-root/a.json") + u(2, 32))
put("agent_request", "bench-sharegpt", b"\x80" + ld(1, sharegpt) + ld(2, u(1, 1)) + dbl(5, 2.0)
    + dbl(10, 0.5) + dbl(11, 1.0) + u(12, 1))
