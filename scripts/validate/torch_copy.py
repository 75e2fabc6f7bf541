#!/usr/bin/env python3
"""Reference figure for the P2P probe: PyTorch's 1 GiB copy between each ordered GPU pair."""
import time

import torch

n = torch.cuda.device_count()
for s in range(n):
    for d in range(n):
        if s == d:
            continue
        a = torch.empty(1 << 30, dtype=torch.uint8, device=f"cuda:{s}")
        b = torch.empty(1 << 30, dtype=torch.uint8, device=f"cuda:{d}")
        for _ in range(3):
            b.copy_(a)
        torch.cuda.synchronize(s)
        torch.cuda.synchronize(d)
        t = time.perf_counter()
        for _ in range(10):
            b.copy_(a)
        torch.cuda.synchronize(s)
        torch.cuda.synchronize(d)
        gbps = 10 * (1 << 30) / (time.perf_counter() - t) / 1e9
        print(f"torch copy_ 1 GiB cuda:{s} -> cuda:{d}: {gbps:.1f} GB/s", flush=True)
