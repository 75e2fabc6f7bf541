#!/usr/bin/env bash
# On a machine with several GPUs: topology from nvidia-smi, the P2P probe (timed), a PyTorch
# reference copy, then the whole agent validation. Usage: scripts/validate/multi-gpu.sh BIN OUT
set -u
BIN=${1:?bin dir}; OUT=${2:?out dir}
echo "== date: $(date -u +%FT%TZ)"
nvidia-smi topo -m
nvidia-smi nvlink -s | head -48
echo "== fleetbench probe-p2p (defaults), timed"
time "$BIN/fleetbench" probe-p2p
echo "== PyTorch reference copy"
python3 scripts/validate/torch_copy.py
echo "== agent validation"
bash scripts/validate-h200.sh "$BIN" "$OUT"
