#!/usr/bin/env bash
# fleetbench with a real llama.cpp server on a GPU host (issue 17): fleetbench-controller and
# fleetbench-agent as separate processes, talking mutual TLS on loopback, the agent starting
# llama-server from a `llamacpp` profile and reading the GPU through NVML. Beside them, two
# independent witnesses: scrape.py reads llama-server's own /metrics every 50 ms (the engine's
# token and timing counters, for truth.py), and nvidia-smi logs memory, power and utilisation
# every 200 ms (when the old server's memory was really freed).
#
# Usage: run.sh BIN LLAMA_BIN MODELS OUT [PART...]     (run from the repository root)
#   BIN        fleetbench, fleetbench-controller, fleetbench-agent, fleetbench-agentctl
#   LLAMA_BIN  the folder holding llama-server (build-llamacpp.sh puts it in WORK/llama/build/bin)
#   MODELS     the GGUFs of make-models.sh
#   OUT        logs and results, and the controller's SQLite store (`fleetbench report JOB
#              --data-dir OUT` re-reads it on any machine)
#   PART       life (restarts timed, an out-of-memory start classified), sweep (the A/B sweep of
#              examples/llamacpp-gpu.toml), sampling (examples/llamacpp-gpu-sampling.toml), tune
#              (examples/tune-llamacpp-gpu.toml); default all
# Environment: SPECS (folder of the two specs, default examples/), LEVEL_DURATION (overrides
# the specs' level duration, e.g. "5s" for a quick pass), RUN_WORK (state folder; default a new
# temporary one).
set -u
BIN=$(cd "${1:?usage: run.sh BIN LLAMA_BIN MODELS OUT [PART...]}" && pwd)
LLAMA_BIN=$(cd "${2:?LLAMA_BIN}" && pwd)
MODELS=$(cd "${3:?MODELS}" && pwd)
OUT=$(mkdir -p "${4:?OUT}" && cd "$4" && pwd)
shift 4
PARTS=${*:-life sweep sampling tune}
HERE=$(cd "$(dirname "$0")" && pwd)
SPECS=$(cd "${SPECS:-$HERE/../../../examples}" && pwd)
WORK=${RUN_WORK:-$(mktemp -d)}
mkdir -p "$WORK"
PY=$(command -v python3)
P_ENGINE=18080 P_AGENT=17443 P_CTL=17070
OOM_CTX=${OOM_CTX:-4194304}
CTL_URL=http://127.0.0.1:$P_CTL
export RUST_LOG=${RUST_LOG:-info}
export NO_COLOR=1

step() { echo; echo "== $(date -u +%T) $*"; }
secs() { awk -v a="$1" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.1f", b - a }'; }
fb() { "$BIN/fleetbench" "$1" --controller "$CTL_URL" "${@:2}"; }
actl() {
  "$BIN/fleetbench-agentctl" --agent "https://127.0.0.1:$P_AGENT" --ca "$WORK/certs/ca.pem" \
    --cert "$WORK/certs/controller.pem" --key "$WORK/certs/controller.key" "$@"
}

echo "date: $(date -u +%FT%TZ)  host: $(hostname)  parts: $PARTS"
command -v nvidia-smi > /dev/null && nvidia-smi --query-gpu=index,name,memory.total,power.limit,driver_version --format=csv

# --- certificates, agent, controller --------------------------------------------------------
[ -f "$WORK/certs/ca.pem" ] || "$BIN/fleetbench" certs init "$WORK/certs" > /dev/null || exit 1
models_list=$(cd "$MODELS" && ls *.gguf | sed "s#^#\"$MODELS/#; s#\$#\"#" | paste -sd, -)
cat > "$WORK/agent.toml" <<TOML
name = "gpu-host"
listen = "127.0.0.1:$P_AGENT"
data_dir = "$WORK/agent"
labels = { validate = "issue-17" }
release_timeout_s = 120

[tls]
cert = "$WORK/certs/agent.pem"
key = "$WORK/certs/agent.key"
client_ca = "$WORK/certs/ca.pem"

[profiles.llamacpp]
kind = "llamacpp"
# The device machine runs everything as root and has no engine user (docs/security.md).
run_as_root = true
program = "$LLAMA_BIN/llama-server"
models = [$models_list]
port = $P_ENGINE
TOML
cat > "$WORK/controller.toml" <<TOML
listen = "127.0.0.1:$P_CTL"
store_url = "sqlite://$OUT/controller.db"

[agent_tls]
ca = "$WORK/certs/ca.pem"
cert = "$WORK/certs/controller.pem"
key = "$WORK/certs/controller.key"

[[hosts]]
name = "gpu-host"
address = "127.0.0.1:$P_AGENT"
TOML
cp "$WORK/agent.toml" "$WORK/controller.toml" "$OUT/"
"$BIN/fleetbench-agent" --config "$WORK/agent.toml" --check || exit 1

"$BIN/fleetbench-agent" --config "$WORK/agent.toml" >> "$OUT/agent.log" 2>&1 &
AGENT=$!
"$BIN/fleetbench-controller" --config "$WORK/controller.toml" >> "$OUT/controller.log" 2>&1 &
CTL=$!
"$PY" "$HERE/scrape.py" --port "$P_ENGINE" --interval-ms 50 --out "$OUT/scrape.jsonl" &
SCRAPE=$!
SMI=
if command -v nvidia-smi > /dev/null; then
  nvidia-smi --query-gpu=timestamp,memory.used,power.draw,utilization.gpu,clocks.sm,temperature.gpu \
    --format=csv,noheader,nounits -lms 200 >> "$OUT/smi.csv" 2>&1 &
  SMI=$!
fi
cleanup() {
  kill -TERM $SCRAPE $SMI 2> /dev/null
  kill -TERM $CTL 2> /dev/null; wait $CTL 2> /dev/null
  kill -TERM $AGENT 2> /dev/null; wait $AGENT 2> /dev/null
  mkdir -p "$OUT/engine-runs"; cp "$WORK"/agent/runs/*.log "$OUT/engine-runs/" 2> /dev/null
}
trap cleanup EXIT
for _ in $(seq 1 100); do actl engine > /dev/null 2>&1 && break; sleep 0.2; done
step "GetHost over mTLS"
actl host || exit 1

# --- the engine's life: restarts timed, a crash classified ----------------------------------
# apply NAME MODEL FLAG...: one ApplyEngine, its events as JSON lines in OUT/life/NAME.jsonl.
apply() {
  local name=$1 model=$2; shift 2
  local flags=()
  for f in "$@"; do flags+=(--flag "$f"); done
  local t0=$EPOCHREALTIME
  actl apply --profile llamacpp --model "$model" "${flags[@]}" --run-id "life-$name" --json \
    > "$OUT/life/$name.jsonl" 2>&1
  local rc=$?
  echo "apply $name: exit $rc after $(secs "$t0") s"
  grep -E '"(stopping|stopped|ready|failed)"' "$OUT/life/$name.jsonl" | cut -c1-400
}
if [[ " $PARTS " == *" life "* ]]; then
  mkdir -p "$OUT/life"
  step "life: start, restart with other flags, other models; each stop waits for NVML to show the memory freed"
  M8=$MODELS/llama31-8b-random.bf16.gguf
  Q8=$MODELS/llama31-8b-random.q8_0.gguf
  M1=$MODELS/llama32-1b-random.bf16.gguf
  common=(--n-gpu-layers=99 --parallel=8 --ctx-size=16384)
  apply 1-8b-bf16 "$M8" "${common[@]}" --flash-attn=on
  apply 2-8b-bf16-fa-off "$M8" "${common[@]}" --flash-attn=off
  apply 3-8b-q8 "$Q8" "${common[@]}" --flash-attn=on
  apply 4-1b-bf16 "$M1" "${common[@]}" --flash-attn=on
  apply 5-8b-bf16-again "$M8" "${common[@]}" --flash-attn=on
  step "life: stop"
  actl stop --json > "$OUT/life/6-stop.jsonl" 2>&1; cat "$OUT/life/6-stop.jsonl"
  # 4,194,304 tokens of f16 K and V for 32 layers of 8 x 128: 512 GiB, on a 141 GB GPU.
  step "life: a KV cache too large for the GPU (--ctx-size $OOM_CTX, --fit off)"
  apply 7-oom-ctx "$M8" --n-gpu-layers=99 --parallel=1 --ctx-size=$OOM_CTX --fit=off
  actl engine --json > "$OUT/life/7-engine.json" 2>&1
  step "life: the same context with --fit on (llama.cpp's default): does it shrink the context instead?"
  apply 8-fit-on "$M8" --n-gpu-layers=99 --parallel=1 --ctx-size=$OOM_CTX --fit=on
  actl engine --json > "$OUT/life/8-engine.json" 2>&1
  actl stop > /dev/null 2>&1
  sleep 0.5
  "$PY" "$HERE/life.py" "$OUT" | tee "$OUT/life/timings.txt"
fi

# --- jobs through the controller --------------------------------------------------------------
# spec NAME: the example with its /models/ paths pointed at MODELS (and LEVEL_DURATION).
spec() {
  sed -e "s#\"/models/#\"$MODELS/#g" "$SPECS/$1" > "$WORK/$1"
  [ -n "${LEVEL_DURATION:-}" ] && sed -i "s#^duration = \".*\"#duration = \"$LEVEL_DURATION\"#" "$WORK/$1"
  echo "$WORK/$1"
}
if [[ " $PARTS " == *" sweep "* ]]; then
  step "sweep: fleetbench run examples/llamacpp-gpu.toml"
  s=$(spec llamacpp-gpu.toml)
  T0=$EPOCHREALTIME
  fb run "$s" -o "$OUT/sweep" 2>&1 | tee "$OUT/sweep.log"
  echo "[exit ${PIPESTATUS[0]}] $(secs "$T0") s"
  JOB=$(grep -oE '[0-9a-f]{32}' "$OUT/sweep.log" | head -1)
  fb jobs "$JOB" --json > "$OUT/sweep/job.json"
  fb jobs "$JOB" | tee "$OUT/sweep/jobs.txt"
  "$PY" "$HERE/truth.py" --scrape "$OUT/scrape.jsonl" --job "$OUT/sweep/job.json" | tee "$OUT/sweep/truth.txt"
fi
if [[ " $PARTS " == *" sampling "* ]]; then
  step "sampling: fleetbench run examples/llamacpp-gpu-sampling.toml"
  s=$(spec llamacpp-gpu-sampling.toml)
  T0=$EPOCHREALTIME
  fb run "$s" -o "$OUT/sampling" 2>&1 | tee "$OUT/sampling.log"
  echo "[exit ${PIPESTATUS[0]}] $(secs "$T0") s"
  JOB=$(grep -oE '[0-9a-f]{32}' "$OUT/sampling.log" | head -1)
  fb jobs "$JOB" --json > "$OUT/sampling/job.json"
  fb jobs "$JOB" | tee "$OUT/sampling/jobs.txt"
  "$PY" "$HERE/truth.py" --scrape "$OUT/scrape.jsonl" --job "$OUT/sampling/job.json" | tee "$OUT/sampling/truth.txt"
fi
if [[ " $PARTS " == *" tune "* ]]; then
  step "tune: fleetbench tune examples/tune-llamacpp-gpu.toml"
  s=$(spec tune-llamacpp-gpu.toml)
  T0=$EPOCHREALTIME
  mkdir -p "$OUT/tune"
  fb tune "$s" -o "$OUT/tune/tuning.txt" 2>&1 | tee "$OUT/tune.log"
  echo "[exit ${PIPESTATUS[0]}] $(secs "$T0") s"
  fb jobs --kind tune | tee "$OUT/tune/jobs.txt"
  for j in $(grep -oE 'job [0-9a-f]{32}' "$OUT/tune.log" | cut -d' ' -f2 | sort -u); do
    fb jobs "$j" --json > "$OUT/tune/job-$j.json"
    fb jobs "$j" | tee -a "$OUT/tune/levels.txt"
    fb report "$j" --output "$OUT/tune/report-$j" > /dev/null
    "$PY" "$HERE/truth.py" --scrape "$OUT/scrape.jsonl" --job "$OUT/tune/job-$j.json" | tee -a "$OUT/tune/truth.txt"
  done
fi
step "done"
