#!/usr/bin/env python3
"""The engine's life on the GPU, from run.sh's records: for every ApplyEngine of the life part
(OUT/life/*.jsonl, `fleetbench-agentctl apply --json` events) the time from the stop signal to
the old server's GPU memory freed (the agent's `stopped` event, which waits for NVML to show no
process of the old run holding memory) and from spawn to ready; nvidia-smi's log (OUT/smi.csv,
every 200 ms) says independently when the GPU's used memory fell. Then start-to-ready of every
run of the sweep and tune jobs (the controller's `engine_start_s`).

    python3 life.py OUT
"""

import datetime
import glob
import json
import os
import sys


def smi_samples(path):
    out = []
    if not os.path.exists(path):
        return out
    for line in open(path):
        parts = [p.strip() for p in line.split(",")]
        if len(parts) < 3:
            continue
        try:
            t = datetime.datetime.strptime(parts[0], "%Y/%m/%d %H:%M:%S.%f").replace(tzinfo=datetime.timezone.utc)
            out.append((t.timestamp() * 1000, float(parts[1]), float(parts[2])))
        except ValueError:
            continue
    return out


def main() -> int:
    out = sys.argv[1]
    smi = smi_samples(os.path.join(out, "smi.csv"))
    idle_mib = min((m for _, m, _ in smi), default=None)
    print("restart timings (life part):")
    print(f"  {'apply':<20} {'stop->freed s':>13} {'smi freed s':>11} {'spawn->ready s':>14} {'GPU MiB held':>12}  outcome")
    applies = []
    for path in sorted(glob.glob(os.path.join(out, "life", "*.jsonl"))):
        by = {}
        for line in open(path):
            try:
                e = json.loads(line)
            except ValueError:
                continue
            if isinstance(e, dict) and "event" in e:
                by.setdefault(e["event"], e)
        if by:
            applies.append((os.path.basename(path)[:-6], by))
    for n, (name, by) in enumerate(applies):
        stop = ""
        smi_freed = ""
        if "stopping" in by and "stopped" in by:
            stop = f"{by['stopped']['data']['took_s']:.2f}"
            t0 = by["stopping"]["unix_ms"]
            if idle_mib is not None:
                # the first sample after the stop signal whose used memory is back near idle
                freed = next((t for t, m, _ in smi if t >= t0 and m <= idle_mib + 64), None)
                smi_freed = f"{(freed - t0) / 1000:.2f}" if freed else "?"
        ready = by.get("ready")
        failed = by.get("failed")
        r = f"{ready['data']['elapsed_s']:.2f}" if ready else "-"
        held = ""
        if ready and smi:
            # the most memory used while this server ran: until the next apply's stop signal
            nxt = applies[n + 1][1].get("stopping") if n + 1 < len(applies) else None
            end = nxt["unix_ms"] if nxt else ready["unix_ms"] + 2000
            during = [m for t, m, _ in smi if ready["unix_ms"] - 200 <= t <= end]
            held = f"{max(during):.0f}" if during else ""
        outcome = "ready" if ready else ("failed: " + failed["data"].get("summary", "")[:150] if failed else "?")
        print(f"  {name:<20} {stop:>13} {smi_freed:>11} {r:>14} {held:>12}  {outcome}")
    for kind in ("sweep", "tune"):
        files = sorted(glob.glob(os.path.join(out, kind, "job*.json")))
        for f in files:
            doc = json.load(open(f))
            name = doc["jobs"][0]["name"] if doc.get("jobs") else f
            starts = [(r["config_name"], r["engine_start_s"]) for r in doc.get("runs", [])]
            if starts:
                print(f"start->ready, job {name}: " + ", ".join(f"{c} {s:.1f} s" for c, s in starts))
    return 0


if __name__ == "__main__":
    sys.exit(main())
