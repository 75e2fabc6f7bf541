#!/usr/bin/env bash
# The .deb packages as an operator meets them: build them (scripts/package.sh, release build),
# `dpkg -i` all three, check what postinst made (users, directories, the API token, modes), run
# each unit's ExecStartPre (--check) and ExecStart as the unit does it (its User, Environment and
# WorkingDirectory, from the installed unit file) with the installed configs plus the documented
# first-host step, run a job against them with the installed `fleetbench`, then `dpkg --purge`
# and check that nothing is left. Needs root (dpkg); scripts/test.sh runs it as root in CI.
set -euo pipefail
cd "$(dirname "$0")/.."
[ "$(id -u)" = 0 ] || { echo "scripts/test-packages.sh: needs root (dpkg -i)" >&2; exit 2; }
log() { printf '\n== packages: %s\n' "$*"; }
fail() { echo "FAILED packages: $*" >&2; exit 1; }
WORK=$(mktemp -d)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
  if dpkg -s fleetbench-controller >/dev/null 2>&1 || dpkg -s fleetbench-agent >/dev/null 2>&1 || dpkg -s fleetbench >/dev/null 2>&1; then
    dpkg --purge fleetbench fleetbench-agent fleetbench-controller >/dev/null 2>&1 || true
  fi
  rm -rf "$WORK"
}
trap cleanup EXIT
for p in 7070 7443 9464; do
  ! (exec 3<>/dev/tcp/127.0.0.1/$p) 2>/dev/null || fail "port $p is in use: the installed configs listen there"
done

log "building the packages"
scripts/package.sh --debs-only ${FLEETBENCH_PACKAGE_NO_BUILD:+--no-build}
debs=(dist/fleetbench_*_amd64.deb dist/fleetbench-agent_*_amd64.deb dist/fleetbench-controller_*_amd64.deb)
for d in "${debs[@]}"; do
  [ -f "$d" ] || fail "$d missing"
  echo "$d: $(du -h "$d" | cut -f1), $(dpkg-deb -f "$d" Depends)"
done
(cd dist && sha256sum -c --ignore-missing SHA256SUMS)

log "dpkg -i"
dpkg -i "${debs[@]}"
for u in fleetbench fleetbench-agent fleetbench-engine; do id "$u" >/dev/null || fail "no system user $u"; done
[ "$(stat -c %U:%G:%a /var/lib/fleetbench)" = fleetbench:fleetbench:750 ] || fail "/var/lib/fleetbench: $(stat -c %U:%G:%a /var/lib/fleetbench)"
for d in /var/lib/fleetbench-agent /var/cache/fleetbench-agent; do
  [ "$(stat -c %U:%G:%a $d)" = fleetbench-agent:fleetbench-agent:750 ] || fail "$d: $(stat -c %U:%G:%a $d)"
done
[ "$(stat -c %U:%G:%a /etc/fleetbench/token)" = root:fleetbench:640 ] || fail "token: $(stat -c %U:%G:%a /etc/fleetbench/token)"
[ "$(wc -c < /etc/fleetbench/token)" -ge 40 ] || fail "token too short"
[ "$(stat -c %G:%a /etc/fleetbench/controller.toml)" = fleetbench:640 ] || fail "controller.toml mode"
[ "$(stat -c %G:%a /etc/fleetbench/agent.toml)" = fleetbench-agent:640 ] || fail "agent.toml mode"
! ls /etc/fleetbench/tls/ca.key >/dev/null 2>&1 || fail "a CA key on the host"
dpkg -L fleetbench-agent | grep -qx /lib/systemd/system/fleetbench-agent.service || fail "agent unit not installed"
dpkg -L fleetbench-controller | grep -qx /lib/systemd/system/fleetbench-controller.service || fail "controller unit not installed"
# Debian's convention: a first install enables both units (deb-systemd-helper, which works
# without a running systemd as here; starting them is systemd's part, done by hand below).
WANTS=/etc/systemd/system/multi-user.target.wants
for u in fleetbench-agent fleetbench-controller; do
  [ -L "$WANTS/$u.service" ] || fail "$u.service not enabled by the first install"
done

# The documented first-host step (docs/deploy.md, "Packages"): the controller learns the agent.
cat >> /etc/fleetbench/controller.toml <<'TOML'

[[hosts]]
name = "local"
address = "127.0.0.1:7443"
TOML

# Runs a unit's ExecStartPre and ExecStart the way systemd would: as its User, with only its
# Environment= lines, in its WorkingDirectory. Adds the started process to `pids`.
start_unit() {
  local unit=/lib/systemd/system/$1.service user wd pre exec
  user=$(sed -n 's/^User=//p' "$unit")
  wd=$(sed -n 's/^WorkingDirectory=//p' "$unit")
  pre=$(sed -n 's/^ExecStartPre=//p' "$unit")
  exec=$(sed -n 's/^ExecStart=//p' "$unit")
  local envs=(PATH=/usr/bin:/bin)
  while IFS= read -r e; do envs+=("$e"); done < <(sed -n 's/^Environment=//p' "$unit")
  (cd "$wd" && runuser -u "$user" -- env -i "${envs[@]}" $pre) || return 1
  echo "$1: $pre: passed"
  (cd "$wd" && exec runuser -u "$user" -- env -i "${envs[@]}" $exec >"$WORK/$1.log" 2>&1) &
  pids+=($!)
}
log "starting the agent and the controller from the installed units"
start_unit fleetbench-agent || fail "agent --check"
start_unit fleetbench-controller || fail "controller --check"
for p in 7443 7070; do
  for _ in $(seq 100); do (exec 3<>/dev/tcp/127.0.0.1/$p) 2>/dev/null && break; sleep 0.2; done
  (exec 3<>/dev/tcp/127.0.0.1/$p) 2>/dev/null || fail "nothing listens on $p: $(cat "$WORK"/*.log)"
done

log "a job against them with the installed fleetbench"
cat > "$WORK/job.toml" <<'TOML'
name = "package-smoke"
[[configs]]
name = "sim"
engine = "sim"
model = "fleetbench/sim-dense-8b"
flags = { "--time-scale" = 0.25 }
[[workloads]]
name = "short"
dataset = "random"
input_len = 64
output_len = 32
ignore_eos = true
[load]
concurrency = [1, 4]
duration = "2s"
TOML
TOKEN=$(cat /etc/fleetbench/token)
(cd "$WORK" && /usr/bin/fleetbench run job.toml --controller http://127.0.0.1:7070 --token "$TOKEN") > "$WORK/run.out" 2>&1 \
  || fail "fleetbench run: $(tail -20 "$WORK/run.out"); controller: $(tail -20 "$WORK/fleetbench-controller.log"); agent: $(tail -20 "$WORK/fleetbench-agent.log")"
tail -8 "$WORK/run.out"
/usr/bin/fleetbench jobs --controller http://127.0.0.1:7070 --token "$TOKEN" | grep -q package-smoke || fail "the job is not in the controller's store"
ls /var/lib/fleetbench-agent/runs/*.log >/dev/null || fail "no engine run log in the agent's state directory"
[ "$(stat -c %U "$(ls /var/lib/fleetbench-agent/runs/*.log | head -1)")" = fleetbench-agent ] || fail "run log owner"

log "an upgrade keeps the operator's disable and leaves the running services alone"
systemctl disable fleetbench-agent.service
[ ! -e "$WANTS/fleetbench-agent.service" ] || fail "systemctl disable left the agent enabled"
# The same version again: dpkg runs the upgrade path (prerm upgrade, postinst configure VERSION).
dpkg -i "${debs[@]}" > "$WORK/upgrade.out" 2>&1 || fail "dpkg -i over the installed packages: $(cat "$WORK/upgrade.out")"
[ ! -e "$WANTS/fleetbench-agent.service" ] || fail "the upgrade enabled the agent the operator had disabled"
[ -L "$WANTS/fleetbench-controller.service" ] || fail "the upgrade disabled the controller"
for p in "${pids[@]}"; do kill -0 "$p" 2>/dev/null || fail "a service process died during the upgrade"; done
echo "upgrade: the agent stays disabled, the controller enabled, both still running"

log "dpkg --purge"
for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
pids=()
dpkg --purge fleetbench fleetbench-agent fleetbench-controller
left=$(ls -d /usr/bin/fleetbench* /etc/fleetbench /var/lib/fleetbench /var/lib/fleetbench-agent /var/cache/fleetbench-agent /lib/systemd/system/fleetbench-* 2>/dev/null || true)
[ -z "$left" ] || fail "left after purge: $left"
left=$(ls -d /etc/systemd/system/*/fleetbench-* /etc/systemd/system/fleetbench-* /var/lib/systemd/deb-systemd-helper-*/fleetbench-* /var/lib/systemd/deb-systemd-helper-*/*/fleetbench-* 2>/dev/null || true)
[ -z "$left" ] || fail "systemd state left after purge: $left"
echo "packages: 3 installed, started, ran a job, purged cleanly (${SECONDS} s with the build)"
