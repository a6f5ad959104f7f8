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
cargo test --workspace -- --test-threads=1
