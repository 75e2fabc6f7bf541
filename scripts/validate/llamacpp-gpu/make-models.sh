#!/usr/bin/env bash
# Makes the random-weight GGUFs of the GPU runs (no hub, no network):
#   llama31-8b-random.bf16.gguf  Llama-3.1-8B's shape (32 layers, 8.03 B parameters), 16 GB
#   llama32-1b-random.bf16.gguf  Llama-3.2-1B's shape (16 layers, 1.24 B parameters), 2.5 GB
# and a Q8_0 copy of each (llama-quantize). SHAPES picks others (make_model.py --shape).
#
# Usage: make-models.sh GGUF_PY MODELS [LLAMA_BIN]
#   GGUF_PY: llama.cpp's gguf-py folder; MODELS: where the files go; LLAMA_BIN: the folder
#   with llama-quantize (without it only the bf16 files are made). PYTHON: a python3 with numpy.
set -euo pipefail
GGUF_PY=${1:?usage: make-models.sh GGUF_PY MODELS [LLAMA_BIN]}
MODELS=${2:?usage: make-models.sh GGUF_PY MODELS [LLAMA_BIN]}
LLAMA_BIN=${3:-}
PYTHON=${PYTHON:-python3}
SHAPES=${SHAPES:-llama32-1b llama31-8b}
HERE=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$MODELS"
for shape in $SHAPES; do
  name=${shape}-random
  case $shape in llama31-8b|llama32-1b|tiny) ;; *) echo "error: unknown shape $shape" >&2; exit 2;; esac
  if [ ! -s "$MODELS/$name.bf16.gguf" ]; then
    "$PYTHON" "$HERE/make_model.py" --shape "$shape" --out "$MODELS/$name.bf16.gguf.part" --gguf-py "$GGUF_PY"
    mv "$MODELS/$name.bf16.gguf.part" "$MODELS/$name.bf16.gguf"
  fi
  if [ -n "$LLAMA_BIN" ] && [ ! -s "$MODELS/$name.q8_0.gguf" ]; then
    T0=$EPOCHREALTIME
    "$LLAMA_BIN/llama-quantize" "$MODELS/$name.bf16.gguf" "$MODELS/$name.q8_0.gguf.part" Q8_0 "$(nproc)" \
      > "$MODELS/$name.quantize.log" 2>&1 || { tail -20 "$MODELS/$name.quantize.log"; exit 1; }
    mv "$MODELS/$name.q8_0.gguf.part" "$MODELS/$name.q8_0.gguf"
    echo "quantized $name to Q8_0 in $(awk -v a="$T0" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.1f", b - a }') s: $(grep -E 'model size|quant size' "$MODELS/$name.quantize.log" | tr -s ' ' | tr '\n' ' ')"
  fi
done
ls -la "$MODELS"
