#!/usr/bin/env python3
"""A GPU-bound process for the agent's `generic` engine profile on a GPU host.

Runs bf16 matrix products on one GPU in a loop and answers GET /health with 200 once the first
product has finished (503 before), so the agent's readiness probe sees a real start-up. Holds
--hold-gib of GPU memory so that NVML shows the process and its memory until it exits.
"""
import argparse
import http.server
import signal
import sys
import threading
import time
import os
import traceback

import torch

ready = threading.Event()
stop = threading.Event()
stats = {"tflops": 0.0, "products": 0}


def burn(size: int, hold_gib: float) -> None:
    dev = torch.device("cuda", 0)
    held = torch.empty(int(hold_gib * (1 << 30)), dtype=torch.uint8, device=dev)
    held.fill_(1)
    a = torch.randn(size, size, dtype=torch.bfloat16, device=dev)
    b = torch.randn(size, size, dtype=torch.bfloat16, device=dev)
    c = a @ b
    torch.cuda.synchronize()
    print(f"gpu_load: ready on {torch.cuda.get_device_name(0)}, holding {hold_gib} GiB", flush=True)
    ready.set()
    n = 0
    t0 = time.time()
    while not stop.is_set():
        for _ in range(20):
            c = a @ b
        torch.cuda.synchronize()
        n += 20
        stats["products"] += 20
        if time.time() - t0 >= 5:
            tflops = 2 * size**3 * n / (time.time() - t0) / 1e12
            stats["tflops"] = tflops
            print(f"gpu_load: {tflops:.0f} TFLOP/s", flush=True)
            n, t0 = 0, time.time()
    del c, held


class Health(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        body = b""
        if self.path == "/health":
            code = 200 if ready.is_set() else 503
        elif self.path == "/metrics":
            code = 200
            body = (
                "# TYPE gpu_load_tflops gauge\n"
                f"gpu_load_tflops {stats['tflops']:.1f}\n"
                "# TYPE gpu_load_products_total counter\n"
                f"gpu_load_products_total {stats['products']}\n"
            ).encode()
        else:
            code = 404
        self.send_response(code)
        self.send_header("Content-Type", "text/plain; version=0.0.4")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--size", type=int, default=8192)
    p.add_argument("--hold-gib", type=float, default=4.0)
    args = p.parse_args()
    server = http.server.ThreadingHTTPServer((args.host, args.port), Health)
    signal.signal(signal.SIGTERM, lambda *_: (stop.set(), threading.Thread(target=server.shutdown).start()))
    def guarded():
        try:
            burn(args.size, args.hold_gib)
        except BaseException:
            traceback.print_exc()
            sys.stderr.flush()
            os._exit(1)

    worker = threading.Thread(target=guarded, daemon=True)
    worker.start()
    print(f"gpu_load: listening on {args.host}:{args.port}", flush=True)
    server.serve_forever()
    worker.join(timeout=10)
    print("gpu_load: stopped", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
