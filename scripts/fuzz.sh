#!/usr/bin/env bash
# Fuzzes the parsers that read outside input (docs/security.md, "Fuzzing"): the job spec parser
# and validator, the SSE scanner, the Prometheus text parser, the crash classifier and log
# parsers, and the agent's request validation. Every target runs at the same time, each in
# libFuzzer's fork mode (crashes are kept and the run goes on), for SECONDS; then one line per
# target: executions, corpus size, crashes.
#
# Usage:
#   scripts/fuzz.sh [SECONDS]    build the targets (unless FUZZ_BIN_DIR) and fuzz each SECONDS
#                                (default 60)
#   scripts/fuzz.sh build        build only, and copy the stripped binaries to fuzz/prebuilt/
#                                (carry that directory to a machine without Rust)
#
# Environment:
#   FUZZ_BIN_DIR   directory of prebuilt target binaries (spec, sse, prom, logs, agent_request):
#                  skip the build (needs no Rust toolchain, only the repository's fuzz/corpus)
#   FUZZ_TARGETS   targets to run (default: all five)
#   FUZZ_JOBS      libFuzzer workers per target (default: CPUs / targets, at least 1)
#   FUZZ_WORK      where the grown corpus, crash inputs and logs go (default fuzz/work)
#   FUZZ_CGU       codegen units of the build (default 16: a faster build, a few % fewer execs/s)
#   OUT            when set: the summary is also written to $OUT/fuzz-summary.txt, crash inputs
#                  to $OUT/fuzz-crashes.tar.gz and the grown corpus to $OUT/fuzz-corpus.tar.gz
#
# Needs: a nightly toolchain and cargo-fuzz (cargo install cargo-fuzz) for the build; built
# without sanitizers (-s none: the Rust code here has no unsafe of its own, and the ASan build
# was several times larger), with debug assertions and overflow checks on.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
ALL_TARGETS=(spec sse prom logs agent_request)
read -r -a TARGETS <<<"${FUZZ_TARGETS:-${ALL_TARGETS[*]}}"
TRIPLE=x86_64-unknown-linux-gnu
BUILT="$ROOT/fuzz/target/$TRIPLE/release"

build() {
  command -v cargo-fuzz >/dev/null 2>&1 || {
    echo "scripts/fuzz.sh: cargo-fuzz is not installed (cargo install cargo-fuzz)" >&2
    exit 2
  }
  echo "== building ${TARGETS[*]} (cargo +nightly fuzz build -s none)" >&2
  (cd fuzz && cargo +nightly fuzz build -s none --codegen-units "${FUZZ_CGU:-16}" \
     --target-dir "$ROOT/fuzz/target" "$@")
}

if [ "${1:-}" = build ]; then
  build
  mkdir -p fuzz/prebuilt
  for t in "${ALL_TARGETS[@]}"; do
    cp "$BUILT/$t" fuzz/prebuilt/
    strip fuzz/prebuilt/"$t" 2>/dev/null || true
  done
  ls -l fuzz/prebuilt
  du -sh fuzz/prebuilt
  exit 0
fi

SECONDS_EACH=${1:-60}
[[ "$SECONDS_EACH" =~ ^[0-9]+$ ]] && [ "$SECONDS_EACH" -gt 0 ] || {
  echo "scripts/fuzz.sh: SECONDS must be a positive whole number, not '$SECONDS_EACH'" >&2
  exit 2
}
if [ -n "${FUZZ_BIN_DIR:-}" ]; then
  BIN=$(cd "$FUZZ_BIN_DIR" && pwd)
else
  build
  BIN=$BUILT
fi
for t in "${TARGETS[@]}"; do
  [ -x "$BIN/$t" ] || { echo "scripts/fuzz.sh: no target binary $BIN/$t" >&2; exit 2; }
done
CPUS=$(nproc)
JOBS=${FUZZ_JOBS:-$(( CPUS / ${#TARGETS[@]} ))}
[ "$JOBS" -ge 1 ] || JOBS=1
WORK=${FUZZ_WORK:-$ROOT/fuzz/work}
mkdir -p "$WORK"

echo "== fuzzing ${TARGETS[*]} for ${SECONDS_EACH}s each, ${JOBS} worker(s) each, ${CPUS} CPUs" >&2
pids=()
for t in "${TARGETS[@]}"; do
  mkdir -p "$WORK/corpus/$t" "$WORK/artifacts/$t"
  # New inputs go to the work corpus (first directory); the committed seeds are only read.
  "$BIN/$t" -fork="$JOBS" -ignore_crashes=1 -ignore_timeouts=1 -ignore_ooms=1 \
    -max_total_time="$SECONDS_EACH" -timeout=10 -rss_limit_mb=4096 -max_len=65536 \
    -print_final_stats=1 -artifact_prefix="$WORK/artifacts/$t/" \
    "$WORK/corpus/$t" "$ROOT/fuzz/corpus/$t" >"$WORK/$t.log" 2>&1 &
  pids+=($!)
done
status=0
for p in "${pids[@]}"; do wait "$p" || status=$?; done

summary=$WORK/fuzz-summary.txt
{
  echo "# scripts/fuzz.sh $SECONDS_EACH: $(date -u +%Y-%m-%dT%H:%M:%SZ), $CPUS CPUs, $JOBS worker(s) per target, $(git rev-parse --short HEAD 2>/dev/null || echo unknown)"
  printf '%-14s %8s %14s %10s %8s %8s %8s\n' target seconds executions exec/s corpus cov crashes
  for t in "${TARGETS[@]}"; do
    # fork mode's status lines: "#EXECS: cov: N ft: N corp: N exec/s: N oom/timeout/crash: a/b/c time: Ns ..."
    last=$(grep -aE '^#[0-9]+: cov:' "$WORK/$t.log" | tail -1 || true)
    execs=$(sed -nE 's/^#([0-9]+):.*/\1/p' <<<"$last")
    cov=$(sed -nE 's/.* cov: ([0-9]+).*/\1/p' <<<"$last")
    rate=$(( ${execs:-0} / SECONDS_EACH ))
    corpus=$(find "$WORK/corpus/$t" -type f | wc -l)
    crashes=$(find "$WORK/artifacts/$t" -type f -name 'crash-*' | wc -l)
    printf '%-14s %8s %14s %10s %8s %8s %8s\n' "$t" "$SECONDS_EACH" "${execs:-?}" "$rate" "$corpus" "${cov:-?}" "$crashes"
  done
  for t in "${TARGETS[@]}"; do
    for c in $(find "$WORK/artifacts/$t" -type f -name 'crash-*' | sort); do
      echo "crash $t: $c"
      grep -aE -m3 "panicked at|^thread '.*' panicked|ERROR: libFuzzer" "$WORK/$t.log" | sed 's/^/    /' || true
    done
  done
  echo "logs: $WORK/TARGET.log; reproduce a crash: FUZZ_BIN/TARGET CRASH_FILE"
} | tee "$summary"

if [ -n "${OUT:-}" ]; then
  mkdir -p "$OUT"
  cp "$summary" "$OUT/fuzz-summary.txt"
  if find "$WORK/artifacts" -type f -name 'crash-*' | grep -q .; then
    tar -C "$WORK" -czf "$OUT/fuzz-crashes.tar.gz" artifacts $(cd "$WORK" && ls ./*.log)
  fi
  tar -C "$WORK" -czf "$OUT/fuzz-corpus.tar.gz" corpus
  [ "$(stat -c %s "$OUT/fuzz-corpus.tar.gz")" -lt 15000000 ] || rm -f "$OUT/fuzz-corpus.tar.gz"
fi
exit "$status"
