#!/usr/bin/env python3
"""Measurement truth per load level: fleetbench's figures against llama-server's own counters.

Reads a job's stored results (`fleetbench jobs JOB --json`) and the /metrics log written by
scrape.py during the job, and for every level prints:

- out: output tokens fleetbench counted; the server's `tokens_predicted_total` over the level
  must be equal, and (with ignore_eos) equal to completed × output_len;
- ITL: fleetbench's mean inter-token latency against the server's own decode time per step,
  `tokens_predicted_seconds_total` / (tokens predicted − requests): llama.cpp times each request
  from its first token to its last, over n − 1 decode steps (the first token comes from the
  prompt's logits); within 5 %;
- lost: failed requests (0);
- reuse: prompt tokens the server took from its cache instead of evaluating them,
  `prompt_tokens_cached_total` / (`prompt_tokens_total` + `prompt_tokens_cached_total`), at most
  5 %; "sent" (usage) against "evald" + "cached" shows the edge drift described below.

Edges: a level's counters are read from the first scrape of the same server process asked
after the level ended (the next level's start), or, for the last level of a run when the
server was stopped before another scrape came, the last scrape of that process if it shows no
request in flight ("edge ms" is then negative). Generation counters move when a request ends,
so that read is exact; prompt counters move per batch, so up to one scrape interval (50 ms) of
the next level's first prompts can land in the level before it. The whole-job line sums the
prompt columns, which has no such edge.

    python3 truth.py --scrape scrape.jsonl --job job.json
"""

import argparse
import bisect
import json
import sys

try:
    import tomllib
except ImportError:  # Python < 3.11
    tomllib = None


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--scrape", required=True)
    ap.add_argument("--job", required=True)
    ap.add_argument("--itl-tolerance", type=float, default=0.05)
    ap.add_argument("--reuse-limit", type=float, default=0.05)
    a = ap.parse_args()

    scrapes = []
    with open(a.scrape) as f:
        for line in f:
            try:
                s = json.loads(line)
            except ValueError:
                continue
            if "tokens_predicted_total" in s.get("v", {}):
                scrapes.append(s)
    scrapes.sort(key=lambda s: s["ts"])
    # Server processes told apart by their counters, which start from zero in a new process
    # (the scraper's own instance numbers also went up on a slow answer in older logs).
    inst, prev = 0, None
    for s in scrapes:
        n = s["v"].get("n_decode_total", 0)
        if prev is None or n < prev:
            inst += 1
        prev = n
        s["i"] = inst
    ts = [s["ts"] for s in scrapes]
    doc = json.load(open(a.job))
    jobs = doc.get("jobs", [])
    output_len = {}
    if tomllib and jobs:
        spec = tomllib.loads(jobs[0]["spec_toml"])
        for w in spec.get("workloads", []):
            output_len[w["name"]] = w.get("output_len")
    runs = {r["run_id"]: r for r in doc.get("runs", [])}
    levels = [l for l in doc.get("levels", []) if l.get("result")]
    levels.sort(key=lambda l: l["result"]["started_unix_ms"])

    def first_after(t, instance):
        """The first scrape of `instance` asked at or after t; else its last one, when idle."""
        i = bisect.bisect_left(ts, t)
        if i < len(scrapes) and scrapes[i].get("i") == instance:
            return scrapes[i]
        j = i - 1
        if j >= 0 and scrapes[j].get("i") == instance and scrapes[j]["v"].get("requests_processing", 1) == 0:
            return scrapes[j]
        return None

    def last_before(t, not_before):
        i = bisect.bisect_right(ts, t) - 1
        while i >= 0 and scrapes[i]["tr"] > t:
            i -= 1
        return scrapes[i] if i >= 0 and scrapes[i]["ts"] >= not_before else None

    name = jobs[0]["name"] if jobs else a.job
    print(f"truth checks for job {name} ({len(levels)} levels, {len(scrapes)} scrapes)")
    hdr = (f"{'config':<14} {'c':>4} {'done':>5} {'lost':>4} {'out':>7} {'server':>7} {'=':>3} "
           f"{'ITL ms':>7} {'srv ms':>7} {'diff':>6} {'sent':>7} {'evald':>7} {'cached':>6} {'reuse':>6} {'edge ms':>7}")
    print(hdr)
    fails = 0
    sums = {"sent": 0, "evald": 0, "cached": 0}
    prev_end = {}
    for l in levels:
        r = l["result"]
        run = runs.get(l["run_id"], {})
        ready_ms = run.get("started_unix_ms", 0) + 1000 * (run.get("engine_start_s") or 0)
        start = prev_end.get(l["run_id"]) or last_before(r["started_unix_ms"], ready_ms)
        end = first_after(r["finished_unix_ms"], start.get("i")) if start else None
        c = (r.get("level") or {}).get("concurrency")
        tag = f"{l['config_name']:<14} {c if c is not None else '-':>4}"
        if start is None or end is None:
            print(f"{tag} no scrape at the level's edges: not checked")
            fails += 1
            continue
        prev_end[l["run_id"]] = end
        v0, v1 = start["v"], end["v"]
        d = {k: v1.get(k, 0) - v0.get(k, 0) for k in v1}
        done, failed, out = r["completed"], r["failed"], r["output_tokens"]
        pred = round(d["tokens_predicted_total"])
        want = output_len.get(l["workload"])
        ok_out = pred == out and (want is None or out == done * want)
        steps = pred - done
        srv_itl = 1000 * d.get("tokens_predicted_seconds_total", 0) / steps if steps > 0 else float("nan")
        itl = (r.get("itl_ms") or {}).get("mean") or float("nan")
        diff = itl / srv_itl - 1 if srv_itl == srv_itl and srv_itl > 0 else float("nan")
        ok_itl = abs(diff) <= a.itl_tolerance
        sent = r["input_tokens"]
        evald = round(d.get("prompt_tokens_total", 0))
        cached = round(d.get("prompt_tokens_cached_total", 0))
        reuse = cached / (evald + cached) if evald + cached > 0 else float("nan")
        ok_reuse = reuse <= a.reuse_limit
        sums["sent"] += sent
        sums["evald"] += evald
        sums["cached"] += cached
        ok_lost = failed == 0 and done > 0
        fails += not (ok_out and ok_itl and ok_reuse and ok_lost)
        mark = lambda ok: "ok" if ok else "NO"
        print(f"{tag} {done:>5} {failed:>4} {out:>7} {pred:>7} {mark(ok_out):>3} {itl:>7.2f} {srv_itl:>7.2f} "
              f"{100 * diff:>+5.1f}% {sent:>7} {evald:>7} {cached:>6} {100 * reuse:>5.1f}% {end['ts'] - r['finished_unix_ms']:>7.0f}"
              f"{'' if ok_itl else '  ITL off by more than %.0f%%' % (100 * a.itl_tolerance)}"
              f"{'' if ok_reuse else '  prompt reuse above limit'}{'' if ok_lost else '  requests lost'}")
    if sums["sent"]:
        print(f"whole job: prompt tokens sent {sums['sent']}, evaluated {sums['evald']}, taken from the cache "
              f"{sums['cached']}: reuse {100 * (1 - sums['evald'] / sums['sent']):.2f}%, "
              f"evaluated + cached - sent = {sums['evald'] + sums['cached'] - sums['sent']}")
    print("all checks passed" if fails == 0 else f"{fails} level(s) failed a check")
    return 0 if fails == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
