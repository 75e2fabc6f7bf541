#!/usr/bin/env bash
# The agent's GPU release check on a real GPU, the way the Helm chart runs the agent: uid 10001 in
# its own PID namespace (no hostPID). Needs: root, an NVIDIA GPU, torch in $PY, and the agent and
# agentctl binaries in $BIN. Prints NVML's process list next to what the agent logs.
set -uo pipefail
BIN=${BIN:-.device-carry}; PY=${PY:-$(command -v python3)}; HERE=$(cd "$(dirname "$0")" && pwd)
W=/tmp/fbg; rm -rf $W; mkdir -m 755 -p $W/data $W/cache; chown 10001:10001 $W/data $W/cache; chmod 750 $W/data $W/cache
cp "$HERE/engine.py" $W/engine.py; chmod 644 $W/engine.py
cat > $W/agent.toml <<TOML
listen = "127.0.0.1:7443"
insecure = true
data_dir = "$W/data"
release_timeout_s = 15
[profiles.gpu]
kind = "generic"
program = "$PY"
args = ["$W/engine.py", "--port", "{port}"]
flags_mode = "replace"
flags = [{ name = "--gib", type = "int", min = 1, max = 64 }]
health_path = "/health"
metrics_path = ""
port = 31000
grace_s = 10
start_timeout_s = 120
TOML
chmod 644 $W/agent.toml
nvml() { echo "-- NVML at $1:"; nvidia-smi --query-compute-apps=pid,used_memory --format=csv,noheader; nvidia-smi --query-gpu=memory.used --format=csv,noheader; }
ctl() { "$BIN/fleetbench-agentctl" --agent http://127.0.0.1:7443 "$@"; }
unshare --pid --fork --mount-proc --kill-child -- setpriv --reuid=10001 --regid=10001 --clear-groups --no-new-privs -- \
  env -i PATH=/usr/bin:/bin LD_LIBRARY_PATH="${LD_LIBRARY_PATH:-}" HOME=$W/data XDG_CACHE_HOME=$W/cache TRITON_CACHE_DIR=$W/cache/triton RUST_LOG=info \
  "$BIN/fleetbench-agent" --config $W/agent.toml > $W/agent.log 2>&1 &
for _ in $(seq 50); do (exec 3<>/dev/tcp/127.0.0.1/7443) 2>/dev/null && break; sleep 0.2; done
AGENT=$(pgrep -f "^$BIN/fleetbench-agent --config" | head -1)
echo "agent host pid $AGENT, $(grep NSpid /proc/$AGENT/status), uid $(stat -c %u /proc/$AGENT)"
nvml "idle"
ctl host | grep -iE "gpu|nvml" | head -3
echo "== start (4 GiB)"; ctl apply --profile gpu --model x --flag --gib=4 | grep -E "spawned|ready|failed"
nvml "engine 1 running"
echo "== restart (8 GiB)"; ctl apply --profile gpu --model x --flag --gib=8 | grep -E "stopp|spawned|ready|failed"
nvml "engine 2 running"
echo "== a stranger starts a CUDA process in the host namespace while engine 2 runs"
"$PY" -c "import torch,time; x=torch.empty(1<<30,dtype=torch.uint8,device='cuda'); torch.cuda.synchronize(); time.sleep(30)" & STRANGER=$!
sleep 10; nvml "stranger (host pid $STRANGER) and engine 2"
echo "== restart (2 GiB): NVML hides the stranger from the agent in its namespace, so it does not wait for it"
ctl apply --profile gpu --model x --flag --gib=2 | grep -E "stopp|spawned|ready|failed"
nvml "engine 3 running"
kill $STRANGER; wait $STRANGER 2>/dev/null
ctl stop | tail -2
nvml "stopped"
kill $AGENT; sleep 2
echo "== the agent's stop records"
grep -E "stopped|still hold" $W/agent.log | sed 's/\x1b\[[0-9;]*m//g'
