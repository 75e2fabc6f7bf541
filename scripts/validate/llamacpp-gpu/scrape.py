#!/usr/bin/env python3
"""Polls a llama-server's /metrics and writes every `llamacpp:*` value with timestamps, one
JSON object a line: {"ts": ms when asked, "tr": ms when answered, "i": server instance,
"v": {name: value}}. The instance number goes up after a refused connection (a restart always
passes through one), so scrapes of one server process share it. An answer may take seconds:
llama-server answers /metrics from its decode loop, between two batches, so a scrape waits up to
10 s (at saturation with flash attention off it waited over 2 s) and the next one follows it.

The truth checks (truth.py) read the server's own counters at the edges of each load level
from this file. llama.cpp adds a request's generated tokens to `tokens_predicted_total` when
the request ends, so the first scrape asked after a level ended holds exactly that level's
tokens (the next level's first request ends a whole generation later). Stops on SIGTERM.

    python3 scrape.py --port 18080 --interval-ms 50 --out scrape.jsonl
"""

import argparse
import http.client
import json
import signal
import sys
import time


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--interval-ms", type=float, default=50)
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    stop = False

    def on_term(*_):
        nonlocal stop
        stop = True

    signal.signal(signal.SIGTERM, on_term)
    signal.signal(signal.SIGINT, on_term)
    conn = None
    instance = 0
    down = True
    with open(a.out, "a", buffering=1) as out:
        while not stop:
            t0 = time.time()
            try:
                if conn is None:
                    conn = http.client.HTTPConnection(a.host, a.port, timeout=10)
                conn.request("GET", "/metrics")
                resp = conn.getresponse()
                body = resp.read().decode("utf-8", "replace")
                t1 = time.time()
                if resp.status == 200:
                    if down:
                        instance += 1
                        down = False
                    v = {}
                    for line in body.splitlines():
                        if line.startswith("llamacpp:"):
                            name, _, val = line.rpartition(" ")
                            try:
                                v[name[len("llamacpp:"):]] = float(val)
                            except ValueError:
                                pass
                    out.write(json.dumps({"ts": round(t0 * 1000, 1), "tr": round(t1 * 1000, 1), "i": instance, "v": v}) + "\n")
            except (OSError, http.client.HTTPException) as e:
                # a slow answer is the same server; only a refused connection means it is gone
                if isinstance(e, ConnectionRefusedError):
                    down = True
                if conn is not None:
                    conn.close()
                conn = None
            left = a.interval_ms / 1000 - (time.time() - t0)
            if left > 0:
                time.sleep(left)
    return 0


if __name__ == "__main__":
    sys.exit(main())
