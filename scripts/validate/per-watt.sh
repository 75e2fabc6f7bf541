#!/usr/bin/env bash
# On a GPU host: a per-watt tuning search through a real deployment (fleetbench-controller and
# fleetbench-agent as separate processes over loopback, the agent reading power from NVML), run
# twice: once with the GPUs idle, once while scripts/validate/gpu_load.py keeps GPU 0 busy.
# Each level must carry the mean GPU power measured during it, and the objective must be tokens/s
# per watt of it. Then the P2P probe with its default buffer size.
#
# Usage: scripts/validate/per-watt.sh BIN OUT   (BIN holds fleetbench, fleetbench-controller,
#        fleetbench-agent, fleetbench-sim; run from the repository root)
set -u
BIN=$(cd "${1:?bin dir}" && pwd); OUT=$(mkdir -p "${2:?out dir}" && cd "$2" && pwd)
WORK=$(mktemp -d)
export PATH="$BIN:$PATH"
# fb COMMAND ARGS…: the CLI against the controller started below.
fb() { "$BIN/fleetbench" "$1" --controller http://127.0.0.1:17070 "${@:2}"; }
echo "== date: $(date -u +%FT%TZ)  host: $(hostname)"
nvidia-smi --query-gpu=index,name,power.draw,power.limit,utilization.gpu --format=csv

cat > "$WORK/agent.toml" <<TOML
name = "gpu-host"
listen = "127.0.0.1:17443"
insecure = true
data_dir = "$WORK/agent"
[profiles.sim]
kind = "sim"
port = 18081
models = ["fleetbench/sim-moe-30b-a3b"]
TOML
cat > "$WORK/controller.toml" <<TOML
listen = "127.0.0.1:17070"
store_url = "sqlite://$WORK/controller.db"
[[hosts]]
name = "gpu-host"
address = "127.0.0.1:17443"
TOML
# The example, shortened to fit the device time: one repeat, 6 s levels.
sed -e 's/^repeats = 2/repeats = 1/' -e 's/^duration = "20s"/duration = "6s"/' \
  examples/tune-watt.toml > "$WORK/watt.toml"

"$BIN/fleetbench-agent" --config "$WORK/agent.toml" > "$OUT/agent.log" 2>&1 &
AGENT=$!
"$BIN/fleetbench-controller" --config "$WORK/controller.toml" > "$OUT/controller.log" 2>&1 &
CTL=$!
LOAD=
trap 'kill -TERM $AGENT $CTL $LOAD 2>/dev/null; wait' EXIT
sleep 3

for phase in idle loaded; do
  if [ "$phase" = loaded ]; then
    echo "== GPU 0 busy: scripts/validate/gpu_load.py"
    python3 scripts/validate/gpu_load.py --host 127.0.0.1 --port 18090 --hold-gib 4 \
      > "$OUT/gpu_load.log" 2>&1 &
    LOAD=$!
    for _ in $(seq 1 120); do
      python3 -c 'import urllib.request as u; u.urlopen("http://127.0.0.1:18090/health", timeout=1)' \
        2> /dev/null && break
      sleep 0.5
    done
    nvidia-smi --query-gpu=index,power.draw,utilization.gpu --format=csv
  fi
  echo "== fleetbench tune (per watt), GPUs $phase"
  T0=$EPOCHREALTIME
  fb tune "$WORK/watt.toml" -o "$OUT/tuning-$phase.txt" 2>&1 | tee "$OUT/tune-$phase.log"
  echo "[exit ${PIPESTATUS[0]}] $(awk -v a="$T0" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.1f", b - a }') s"
done
[ -n "$LOAD" ] && kill -TERM "$LOAD"

echo "== fleetbench jobs"
fb jobs --kind tune
LAST=$(grep -oE 'job [0-9a-f]{32}' "$OUT/tune-loaded.log" | tail -1 | cut -d' ' -f2)
echo "== fleetbench jobs $LAST"
fb jobs "$LAST"
fb jobs "$LAST" --json > "$OUT/last-job.json"
python3 - "$OUT/last-job.json" <<'PY'
import json, sys
doc = json.load(open(sys.argv[1]))
levels = [l for c in doc.get("configs", [doc]) for l in c.get("levels", [])] or doc.get("levels", [])
print("levels with gpu_power_w:", sum(1 for l in levels if l.get("gpu_power_w")), "of", len(levels))
PY

echo "== fleetbench probe-p2p (default buffer)"
time "$BIN/fleetbench" probe-p2p
"$BIN/fleetbench" probe-p2p --json > "$OUT/probe-default.json"
