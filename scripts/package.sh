#!/usr/bin/env bash
# Builds a release of fleetbench into dist/:
#   fleetbench-VERSION-x86_64-linux.tar.gz   stripped binaries (bin/), systemd units and example
#                                            configs (deploy/systemd/), docs/deploy.md, README.md
#   fleetbench_VERSION_amd64.deb, fleetbench-agent_…, fleetbench-controller_…   (cargo deb)
#   SHA256SUMS                               of every file above (sha256sum -c SHA256SUMS)
#
# Usage: scripts/package.sh [--no-build] [--tarball-only | --debs-only]
# The release build is the README's first command (`cargo build --release --workspace --bins`),
# so an existing one is reused as it is; --no-build skips even the up-to-date check.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
build=1 tarball=1 debs=1
for a in "$@"; do
  case "$a" in
    --no-build) build=0 ;;
    --tarball-only) debs=0 ;;
    --debs-only) tarball=0 ;;
    *) echo "scripts/package.sh: unknown argument $a (see the header of this script)" >&2; exit 2 ;;
  esac
done
VERSION=$(sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -1)
TARGET=${CARGO_TARGET_DIR:-$ROOT/target}
DIST=$ROOT/dist
BINS=(fleetbench fleetbench-controller fleetbench-agent fleetbench-agentctl fleetbench-sim)
mkdir -p "$DIST"
if [ "$build" = 1 ]; then
  cargo build --release --locked --workspace --bins
fi
for b in "${BINS[@]}"; do
  [ -x "$TARGET/release/$b" ] || { echo "scripts/package.sh: $TARGET/release/$b missing: run without --no-build" >&2; exit 1; }
done
files=()
if [ "$tarball" = 1 ]; then
  name=fleetbench-$VERSION-$(uname -m)-linux
  stage=$(mktemp -d)
  mkdir -p "$stage/$name/bin" "$stage/$name/deploy/systemd" "$stage/$name/docs"
  for b in "${BINS[@]}"; do
    install -m 0755 "$TARGET/release/$b" "$stage/$name/bin/"
    strip --strip-unneeded "$stage/$name/bin/$b"
  done
  cp deploy/systemd/*.service deploy/systemd/*.toml deploy/systemd/agent.env deploy/systemd/README.md "$stage/$name/deploy/systemd/"
  cp docs/deploy.md "$stage/$name/docs/"
  cp README.md "$stage/$name/"
  (cd "$stage/$name" && sha256sum bin/* > SHA256SUMS)
  tar -C "$stage" --owner=0 --group=0 --sort=name -czf "$DIST/$name.tar.gz" "$name"
  rm -rf "$stage"
  files+=("$name.tar.gz")
  echo "wrote dist/$name.tar.gz"
fi
if [ "$debs" = 1 ]; then
  command -v cargo-deb >/dev/null 2>&1 || cargo install cargo-deb --locked
  for p in fleetbench fleetbench-agent fleetbench-controller; do
    deb=$(cargo deb -p "$p" --no-build --strip --output "$DIST" | tail -1)
    files+=("$(basename "$deb")")
    echo "wrote dist/$(basename "$deb")"
  done
fi
(cd "$DIST" && sha256sum "${files[@]}" > SHA256SUMS)
echo "wrote dist/SHA256SUMS"
