#!/usr/bin/env bash
# The cost of TLS, measured: writes at 1/16/64 clients and leader failover on a 3-node hub
# with mutual TLS (as deployed) and with --insecure, alternating TLS, plaintext, TLS,
# plaintext in one run so both see the same machine. Usage:
#   scripts/bench-tls.sh [SECONDS] [KILLS]   (default 15 s per client count, 10 kills)
# Prints hub-bench's tables with a header per run; the clusters live in a temporary
# directory that is removed at the end.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/deps.sh
seconds=${1:-15}
kills=${2:-10}
B="$CARGO_TARGET_DIR/debug"
cargo build --workspace --bins >&2
work=$(mktemp -d)
cleanup() {
  for d in "$work"/*/; do
    [ -f "$d/cluster.json" ] && "$B/hubctl" dev down --data-dir "$d" >/dev/null 2>&1 || true
  done
  rm -rf "$work"
}
trap cleanup EXIT
for round in 1 2; do
  for mode in tls insecure; do
    dir="$work/$mode-$round"
    flag=()
    [ "$mode" = insecure ] && flag=(--insecure)
    "$B/hubctl" dev up --nodes 3 --data-dir "$dir" --base-port 0 "${flag[@]}" -o json >/dev/null
    echo "== round $round: $mode, writes =="
    "$B/hub-bench" writes --cluster "$dir" --concurrency 1,16,64 --seconds "$seconds"
    echo "== round $round: $mode, failover =="
    "$B/hub-bench" failover --cluster "$dir" --kills "$kills"
    "$B/hubctl" dev down --data-dir "$dir" >/dev/null
  done
done
