#!/usr/bin/env bash
# Proves the agent on a real GPU host (issue 4, "Proven on the H200 machines", point 2):
# fleetbench-agent with NVML, driven by fleetbench-agentctl over loopback (insecure config):
#   GetHost lists the GPUs with their facts; a `generic` profile starts a GPU-bound PyTorch
#   process (scripts/validate/gpu_load.py) that answers a readiness probe; StreamMetrics shows
#   utilisation and power rising; StopEngine ends it and waits until NVML shows its memory
#   freed; a second start succeeds; a disallowed flag is refused. Then the P2P probe through the
#   agent's ProbeP2P RPC, through `fleetbench probe-p2p`, and fleetbench-gpu-check.
#
# Usage: scripts/validate-h200.sh [BIN_DIR] [OUT_DIR]   (run from the repository root)
#   BIN_DIR holds fleetbench-agent, fleetbench-agentctl, fleetbench, fleetbench-gpu-check
#   (default .device-carry); OUT_DIR receives the logs (default ./validate-out).
set -u
BIN=$(cd "${1:-.device-carry}" && pwd)
OUT=$(mkdir -p "${2:-validate-out}" && cd "${2:-validate-out}" && pwd)
ROOT=$(pwd)
PY=$(command -v python3)
WORK=$(mktemp -d)
PORT_AGENT=17443
PORT_ENGINE=18080
CTL=("$BIN/fleetbench-agentctl" --agent "http://127.0.0.1:$PORT_AGENT")

step() { echo; echo "== $*"; }
run() { echo "\$ ${*#$BIN/}"; "$@"; local rc=$?; echo "[exit $rc]"; return $rc; }
since() { awk -v a="$1" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.2f", b - a }'; }

echo "date: $(date -u +%FT%TZ)  host: $(hostname)"
nvidia-smi --query-gpu=index,name,uuid,pci.bus_id,memory.total,pcie.link.gen.current,pcie.link.width.current,power.limit,driver_version --format=csv

cat > "$WORK/agent.toml" <<TOML
name = "h200-validate"
listen = "127.0.0.1:$PORT_AGENT"
insecure = true
data_dir = "$WORK/data"
release_timeout_s = 60

[profiles.gpuload]
kind = "generic"
program = "$PY"
args = ["$ROOT/scripts/validate/gpu_load.py", "--host", "{host}", "--port", "{port}"]
port = $PORT_ENGINE
models = ["none"]
start_timeout_s = 180
grace_s = 15
# The device machine runs everything as root and has no engine user (docs/security.md).
run_as_root = true
flags = [
  { name = "--hold-gib", type = "float", min = 0.5, max = 64.0 },
  { name = "--size", type = "int", min = 1024, max = 16384 },
]
TOML
step "agent config"
cat "$WORK/agent.toml"
run "$BIN/fleetbench-agent" --config "$WORK/agent.toml" --check || exit 1

step "start the agent"
"$BIN/fleetbench-agent" --config "$WORK/agent.toml" > "$OUT/agent.log" 2>&1 &
AGENT=$!
trap 'kill -TERM $AGENT 2>/dev/null; wait $AGENT 2>/dev/null' EXIT
for _ in $(seq 1 100); do
  "${CTL[@]}" engine > /dev/null 2>&1 && break
  sleep 0.2
done

step "GetHost"
run "${CTL[@]}" host
"${CTL[@]}" host --json > "$OUT/host.json"

step "StreamMetrics while idle"
run "${CTL[@]}" metrics --interval-ms 500 --count 3

step "ApplyEngine: generic GPU load (4 GiB held)"
T0=$EPOCHREALTIME
run "${CTL[@]}" apply --profile gpuload --model none --flag --hold-gib=4
echo "apply took $(since "$T0") s"

step "StreamMetrics while it runs (utilisation and power should rise)"
run "${CTL[@]}" metrics --interval-ms 500 --count 10
run "${CTL[@]}" engine
nvidia-smi --query-compute-apps=pid,used_memory --format=csv
nvidia-smi --query-gpu=utilization.gpu,power.draw,memory.used --format=csv

step "StopEngine (waits until NVML shows the memory freed)"
T0=$EPOCHREALTIME
run "${CTL[@]}" stop
echo "stop took $(since "$T0") s"
nvidia-smi --query-compute-apps=pid,used_memory --format=csv
nvidia-smi --query-gpu=memory.used --format=csv
run "${CTL[@]}" metrics --interval-ms 100 --count 1

step "second start (2 GiB held, 4096² products)"
run "${CTL[@]}" apply --profile gpuload --model none --flag --hold-gib=2 --flag --size=4096
run "${CTL[@]}" metrics --interval-ms 500 --count 4

step "a disallowed flag is refused and nothing changes"
run "${CTL[@]}" apply --profile gpuload --model none --flag --evil=1
run "${CTL[@]}" engine

step "stop"
run "${CTL[@]}" stop
nvidia-smi --query-compute-apps=pid,used_memory --format=csv

step "ProbeP2P through the agent"
run "${CTL[@]}" probe-p2p
"${CTL[@]}" probe-p2p --json > "$OUT/probe-agent.json"

step "fleetbench probe-p2p (local)"
run "$BIN/fleetbench" probe-p2p
"$BIN/fleetbench" probe-p2p --json > "$OUT/probe-cli.json"; echo "[--json exit $?]"
run "$BIN/fleetbench" probe-p2p --pairs 0-1
run "$BIN/fleetbench" probe-p2p --buffer-mib 64 --repeats 5

step "fleetbench-gpu-check (facts, samples, NVML call costs, pair code path on GPU 0 against itself)"
run "$BIN/fleetbench-gpu-check" --samples 3 --interval-ms 300 --no-probe --self-test

step "agent shutdown"
kill -TERM $AGENT; wait $AGENT; echo "[agent exit $?]"
trap - EXIT
tail -n 40 "$OUT/agent.log"
