#!/usr/bin/env python3
"""fleetbench's load generator beside each engine's own benchmark client, the engine as arbiter.

Starts one real server (vLLM's CPU build, or SGLang on the CPU with fleetbench's stand-in for its
kernel helpers) with the tiny random-weight Llama that scripts/test.sh makes, then runs the same
closed-loop workload through each client in turn: `fleetbench bench`, and `vllm bench serve` or
SGLang's `bench_serving`. Around each client run it reads the engine's own /metrics, so every
client figure is set beside the engine's figure over exactly the requests that client sent:

- output tokens: the client's count against the engine's generation counter;
- TTFT and ITL means: the client's against the engine's own histograms (sum / count);
- client CPU per 1,000 output tokens: user + system time of the client process (sampled from
  /proc every 50 ms beside the engine's token counter) from its first generated token to its
  last, divided by the tokens the engine generated in between: start-up (Python imports,
  tokenizer, prompt building) and teardown are left out.

Only the engine's histograms can say which client is closer to the truth: the clients' own
figures differ by definition (what counts as the first token, per-chunk or per-token gaps) and by
what their own work adds. Results go to stdout as a table and to --out as JSON.

Run it with any Python 3 (it uses only the standard library; the engine and its client run from
the engine's virtual environment):

    python3 scripts/validate/engine_clients.py --engine vllm --fleetbench target/release/fleetbench
    python3 scripts/validate/engine_clients.py --engine sglang --fleetbench target/release/fleetbench
"""

import argparse
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SGLANG_NOTE = ("SGLang ran on the CPU with fleetbench's stand-in for its CPU kernel helpers "
               "(scripts/engines/sgl_kernel_cpu_standin); GPU kernels not exercised")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def get(url, timeout=5):
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return r.status, r.read().decode()


def scrape(base, prefix):
    """Sums every sample of each `prefix*` metric over its label sets (no _bucket lines)."""
    _, text = get(base + "/metrics")
    out = {}
    for line in text.splitlines():
        if not line.startswith(prefix) or "_bucket" in line:
            continue
        m = re.match(r"^([^{\s]+)(\{[^}]*\})?\s+(\S+)", line)
        if m:
            out[m.group(1)] = out.get(m.group(1), 0.0) + float(m.group(3))
    return out


def engine_delta(before, after, p):
    d = {k: after.get(k, 0.0) - before.get(k, 0.0) for k in after}

    def mean_ms(h):
        n = d.get(f"{p}:{h}_count", 0.0)
        return 1000.0 * d.get(f"{p}:{h}_sum", 0.0) / n if n else None

    return {
        "output_tokens": d.get(f"{p}:generation_tokens_total"),
        "prompt_tokens": d.get(f"{p}:prompt_tokens_total"),
        "ttft_mean_ms": mean_ms("time_to_first_token_seconds"),
        "itl_mean_ms": mean_ms("inter_token_latency_seconds"),
        "ttft_count": d.get(f"{p}:time_to_first_token_seconds_count"),
    }


def start_engine(args, venv, port, work):
    model = venv / "tiny-llama"
    env = dict(os.environ, HF_HUB_OFFLINE="1", OMP_NUM_THREADS="1", TMPDIR=str(work),
               HOME=str(work))
    if args.engine == "vllm":
        env.update(VLLM_CPU_KVCACHE_SPACE="1", VLLM_CPU_OMP_THREADS_BIND="nobind",
                   VLLM_NO_USAGE_STATS="1")
        cmd = [str(venv / "bin/vllm"), "serve", str(model), "--host", "127.0.0.1", "--port",
               str(port), "--dtype", "bfloat16", "--max-model-len", "512", "--enforce-eager",
               "--distributed-executor-backend", "uni", "--max-num-seqs", "8"]
    else:
        env.update(SGLANG_USE_CPU_ENGINE="1",
                   PYTHONPATH=str(ROOT / "scripts/engines/sgl_kernel_cpu_standin"))
        cmd = [str(venv / "bin/python"), "-m", "sglang.launch_server", "--model-path", str(model),
               "--host", "127.0.0.1", "--port", str(port), "--enable-metrics", "--device", "cpu",
               "--attention-backend", "torch_native", "--sampling-backend", "pytorch",
               "--disable-overlap-schedule", "--dtype", "bfloat16", "--context-length", "512",
               "--max-total-tokens", "8192", "--max-running-requests", "8"]
    log = open(work / "engine.log", "w")
    proc = subprocess.Popen(cmd, env=env, cwd=work, stdout=log, stderr=subprocess.STDOUT,
                            start_new_session=True)
    base = f"http://127.0.0.1:{port}"
    deadline = time.time() + 300
    while time.time() < deadline:
        if proc.poll() is not None:
            sys.exit(f"{args.engine} exited with {proc.returncode}; log: {work / 'engine.log'}")
        try:
            if get(base + "/health")[0] == 200:
                return proc, base, model
        except OSError:
            pass
        time.sleep(1)
    sys.exit(f"{args.engine} not ready in 300 s; log: {work / 'engine.log'}")


def proc_cpu_s(pid):
    """User + system CPU seconds of a process and its reaped children (/proc/PID/stat)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    ticks = os.sysconf("SC_CLK_TCK")
    # utime, stime, cutime, cstime are fields 14-17 (1-based); after ")" they start at index 11.
    return sum(int(x) for x in fields[11:15]) / ticks


def run_client(cmd, env, cwd, engine):
    """Runs one client to the end, sampling its CPU time and the engine's generated tokens
    every 50 ms. Returns (CPU s per generated token while tokens were being generated, wall s):
    from the first sample with a new token to the last, so the client's start-up (imports,
    tokenizer, prompt building) and teardown are left out."""
    base, counter = engine
    t = time.time()
    out = open(Path(cwd) / "client.log", "w")
    p = subprocess.Popen(cmd, env=env, cwd=cwd, stdout=out, stderr=subprocess.STDOUT)
    start = scrape(base, counter.split(":")[0]).get(counter, 0.0)
    first = last = None
    while p.poll() is None:
        try:
            cpu = proc_cpu_s(p.pid)
            tokens = scrape(base, counter.split(":")[0]).get(counter, 0.0) - start
        except (OSError, IndexError):
            break
        if tokens > 0:
            if first is None:
                first = (cpu, tokens)
            last = (cpu, tokens)
        time.sleep(0.05)
    p.wait()
    wall = time.time() - t
    if p.returncode != 0:
        sys.exit(f"{cmd[0]} failed ({p.returncode}): see {cwd}/client.log:\n"
                 + (Path(cwd) / "client.log").read_text()[-3000:])
    per_token = None
    if first and last and last[1] > first[1]:
        per_token = (last[0] - first[0]) / (last[1] - first[1])
    return per_token, wall


def fleetbench_client(args, base, model, work):
    out = work / "fleetbench.json"
    cmd = [args.fleetbench, "bench", "--base-url", base, "--model", str(model), "--dataset",
           "random", "--input-len", str(args.input_len), "--output-len", str(args.output_len),
           "--num-prompts", str(args.requests), "--concurrency", str(args.concurrency),
           "--warmup", "0", "--output-json", str(out)]
    cpu, wall = run_client(cmd, dict(os.environ), work, (base, args.counter))
    level = json.loads(out.read_text())
    level = level["levels"][0] if isinstance(level, dict) and "levels" in level else level[0]
    return {
        "client": "fleetbench bench",
        "output_tokens": level["output_tokens"],
        "ttft_mean_ms": level["ttft_ms"]["mean"],
        "itl_mean_ms": level["itl_ms"]["mean"],
        "output_tokens_per_s": level["output_tokens_per_s"],
        "cpu_s_per_token": cpu,
        "wall_s": wall,
    }


def engine_client(args, venv, base, model, work):
    env = dict(os.environ, HF_HUB_OFFLINE="1", TMPDIR=str(work), HOME=str(work))
    if args.engine == "vllm":
        cmd = [str(venv / "bin/vllm"), "bench", "serve", "--backend", "vllm", "--base-url", base,
               "--model", str(model), "--tokenizer", str(model), "--dataset-name", "random",
               "--random-input-len", str(args.input_len), "--random-output-len",
               str(args.output_len), "--random-range-ratio", "0", "--num-prompts",
               str(args.requests), "--max-concurrency", str(args.concurrency), "--ignore-eos",
               "--num-warmups", "0", "--save-result", "--result-dir", str(work),
               "--result-filename", "engine-client.json"]
        name = "vllm bench serve"
        cpu, wall = run_client(cmd, env, work, (base, args.counter))
        r = json.loads((work / "engine-client.json").read_text())
    else:
        env["PYTHONPATH"] = str(ROOT / "scripts/engines/sgl_kernel_cpu_standin")
        cmd = [str(venv / "bin/python"), "-m", "sglang.bench_serving", "--backend", "sglang",
               "--base-url", base, "--model", str(model), "--tokenizer", str(model),
               "--dataset-name", "random-ids", "--random-input-len", str(args.input_len),
               "--random-output-len", str(args.output_len), "--random-range-ratio", "1.0",
               "--num-prompts", str(args.requests), "--max-concurrency", str(args.concurrency),
               "--warmup-requests", "0", "--output-file", str(work / "engine-client.jsonl")]
        name = "sglang bench_serving"
        cpu, wall = run_client(cmd, env, work, (base, args.counter))
        r = json.loads((work / "engine-client.jsonl").read_text().strip().splitlines()[-1])
    return {
        "client": name,
        "output_tokens": r.get("total_output_tokens", r.get("total_output")),
        "ttft_mean_ms": r["mean_ttft_ms"],
        "itl_mean_ms": r["mean_itl_ms"],
        "output_tokens_per_s": r["output_throughput"],
        "cpu_s_per_token": cpu,
        "wall_s": wall,
    }


def pct(client, engine):
    if client is None or not engine:
        return "n/a"
    return f"{100.0 * (client - engine) / engine:+.1f}%"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--engine", choices=["vllm", "sglang"], required=True)
    ap.add_argument("--venv", type=Path, help="the engine's venv (default .venv-ENGINE, or "
                    "FLEETBENCH_VLLM_VENV / FLEETBENCH_SGLANG_VENV)")
    ap.add_argument("--fleetbench", default=str(ROOT / "target/release/fleetbench"))
    ap.add_argument("--input-len", type=int, default=128)
    ap.add_argument("--output-len", type=int, default=64)
    ap.add_argument("--requests", type=int, default=64)
    ap.add_argument("--concurrency", type=int, default=4)
    ap.add_argument("--rounds", type=int, default=2, help="client runs each, alternating")
    ap.add_argument("--out", type=Path, help="JSON results (default: stdout only)")
    args = ap.parse_args()
    env_var = {"vllm": "FLEETBENCH_VLLM_VENV", "sglang": "FLEETBENCH_SGLANG_VENV"}[args.engine]
    venv = args.venv or Path(os.environ.get(env_var, ROOT / f".venv-{args.engine}"))
    if not (venv / "tiny-llama/config.json").is_file():
        sys.exit(f"--venv {venv}: no tiny-llama there; scripts/test.sh makes it")
    args.fleetbench = str(Path(args.fleetbench).resolve())
    if not Path(args.fleetbench).is_file():
        sys.exit(f"--fleetbench {args.fleetbench}: not built (cargo build --release -p fleetbench)")
    prefix = {"vllm": "vllm", "sglang": "sglang"}[args.engine]
    args.counter = f"{prefix}:generation_tokens_total"
    work = Path(tempfile.mkdtemp(prefix="fb-clients-", dir=ROOT / "target"))
    proc, base, model = start_engine(args, venv, free_port(), work)
    rows = []
    load = []
    try:
        # One short unmeasured run first: the first requests of a fresh server pay one-time costs.
        fleetbench_client(argparse.Namespace(**{**vars(args), "requests": 8}), base, model, work)
        for rnd in range(args.rounds):
            order = ["fleetbench", "engine"] if rnd % 2 == 0 else ["engine", "fleetbench"]
            for who in order:
                before = scrape(base, prefix)
                c = (fleetbench_client(args, base, model, work) if who == "fleetbench"
                     else engine_client(args, venv, base, model, work))
                time.sleep(1.0)  # the engine updates its metrics after the last chunk
                c["engine"] = engine_delta(before, scrape(base, prefix), prefix)
                c["round"] = rnd + 1
                c["requests"] = args.requests
                c["cpu_ms_per_1k_tokens"] = (1e6 * c["cpu_s_per_token"]
                                             if c["cpu_s_per_token"] is not None else None)
                load.append(os.getloadavg()[0])
                rows.append(c)
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    print(f"{args.engine}: {args.requests} requests, input {args.input_len}, output "
          f"{args.output_len}, concurrency {args.concurrency}; tiny random-weight Llama on this CPU")
    if args.engine == "sglang":
        print(SGLANG_NOTE)
    print(f"{'client':<22}{'rnd':>4}{'reqs':>5}{'tokens':>8}{'engine':>8}{'TTFT ms':>9}"
          f"{'engine':>9}{'diff':>9}{'ITL ms':>8}{'engine':>8}{'diff':>8}{'tok/s':>8}"
          f"{'CPU ms/1k':>10}")
    for r in rows:
        e = r["engine"]
        k = r.get("cpu_ms_per_1k_tokens")
        print(f"{r['client']:<22}{r['round']:>4}{r['requests']:>5}{r['output_tokens']:>8}"
              f"{e['output_tokens']:>8.0f}{r['ttft_mean_ms']:>9.2f}{e['ttft_mean_ms'] or 0:>9.2f}"
              f"{pct(r['ttft_mean_ms'], e['ttft_mean_ms']):>9}"
              f"{r['itl_mean_ms']:>8.3f}{e['itl_mean_ms'] or 0:>8.3f}"
              f"{pct(r['itl_mean_ms'], e['itl_mean_ms']):>8}"
              f"{r['output_tokens_per_s']:>8.1f}"
              f"{(f'{k:.1f}' if k is not None else ''):>10}")
    print(f"CPU ms/1k: the client's CPU (user + system, reaped children included, sampled "
          f"every 50 ms) from its first generated token to its last, per 1,000 tokens the "
          f"engine counted in between (start-up and teardown excluded). "
          f"Load average during the runs: {min(load):.2f}-{max(load):.2f} on {os.cpu_count()} "
          f"CPUs (the engine, the client and anything else on this machine share them).")
    if args.out:
        args.out.write_text(json.dumps({"engine": args.engine, "args": {
            k: v for k, v in vars(args).items() if k not in ("out", "venv")}, "load_average": load, "rows": rows},
            indent=2, default=str))
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
