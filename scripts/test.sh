#!/usr/bin/env bash
# Runs every check and test: formatting, clippy, unit tests, the storage suite and crash
# tests, and the black-box tests that start real hub-node processes.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/deps.sh

cargo fmt --all -- --check
# --workspace everywhere: a package-scoped build recompiles RocksDB (feature unification).
cargo clippy --workspace --all-targets -- -D warnings
cargo build --workspace --bins
# Black-box tests start 3- and 5-node clusters: one test at a time keeps them stable on 2 cores.
log=$(mktemp)
trap 'rm -f "$log"' EXIT
set +e
cargo test --workspace -- --test-threads=1 2>&1 | tee "$log"
status=${PIPESTATUS[0]}
set -e
# One closing line over every test binary (cargo prints one "test result" per binary).
awk '/^test result:/ { for (i = 1; i <= NF; i++) { if ($i ~ /^passed;?$/) p += $(i-1); if ($i ~ /^failed;?$/) f += $(i-1) } }
     END { printf "tests: %d passed, %d failed\n", p, f }' "$log"
exit "$status"
