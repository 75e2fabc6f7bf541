#!/usr/bin/env bash
# First checks on a one-GPU H200 machine (device tool): nvidia-smi figures for comparison,
# fleetbench-gpu-check (facts, telemetry, the P2P probe's one-GPU report), telemetry under a
# GPU load, and the load process's memory freed after it stops.
# Usage: scripts/validate/single-gpu.sh BIN_DIR OUT_DIR
set -u
BIN=${1:?bin dir}; OUT=${2:?out dir}
PY=${PYTHON:-python3}
echo "== date: $(date -u +%FT%TZ)"
echo "== nvidia-smi"
nvidia-smi
nvidia-smi --query-gpu=index,name,uuid,pci.bus_id,memory.total,pcie.link.gen.current,pcie.link.width.current,pcie.link.gen.max,pcie.link.width.max,power.limit,driver_version --format=csv
nvidia-smi topo -m
nvidia-smi nvlink -s || true
echo "== fleetbench-gpu-check (idle, default probe: 256 MiB, 10 runs)"
time "$BIN/fleetbench-gpu-check" --samples 4 --interval-ms 300 --json "$OUT/probe-1gpu.json"
echo "exit $?"
echo "== probe with a pair on a one-GPU host (must fail naming the pair)"
"$BIN/fleetbench-gpu-check" --samples 0 --pairs 0-1; echo "exit $?"
echo "== GPU load: telemetry while it runs"
$PY scripts/validate/gpu_load.py --port 18080 --hold-gib 4 > "$OUT/gpu_load.log" 2>&1 &
LOAD=$!
for i in $(seq 1 120); do
  code=$($PY -c 'import urllib.request as u,sys
try: print(u.urlopen("http://127.0.0.1:18080/health", timeout=1).status)
except Exception as e: print(getattr(e, "code", 0))')
  [ "$code" = 200 ] && break; sleep 0.25
done
echo "health: $code after ~$((i / 4)) s"
"$BIN/fleetbench-gpu-check" --samples 6 --interval-ms 500 --no-probe
nvidia-smi --query-gpu=utilization.gpu,power.draw,memory.used,clocks.sm,temperature.gpu --format=csv
nvidia-smi --query-compute-apps=pid,used_memory --format=csv
echo "load pid $LOAD"
kill -TERM $LOAD; wait $LOAD; echo "load exit $?"
echo "== after stop"
"$BIN/fleetbench-gpu-check" --samples 1 --no-probe
cat "$OUT/gpu_load.log"
