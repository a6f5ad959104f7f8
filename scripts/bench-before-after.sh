#!/usr/bin/env bash
# Runs the write and agent benchmarks for two builds side by side, alternated ROUNDS times
# (default 2), each run on a fresh 3-node dev cluster, and prints every result with the
# build it came from. Usage:
#   scripts/bench-before-after.sh BEFORE_BIN_DIR AFTER_BIN_DIR [ROUNDS]
# A BIN_DIR holds hubctl, hub-node, hub-agent and hub-bench of one build (copy them out of
# $CARGO_TARGET_DIR/debug before building the other). Results go to $OUT (default a new
# temporary directory): writes.txt and agents.txt.
set -euo pipefail
[ $# -ge 2 ] || { sed -n 2,8p "$0" >&2; exit 2; }
rounds=${3:-2}
out=${OUT:-$(mktemp -d)}
mkdir -p "$out"
for dir in "$1" "$2"; do
  for bin in hubctl hub-node hub-agent hub-bench; do
    [ -x "$dir/$bin" ] || { echo "$dir/$bin: missing or not executable" >&2; exit 2; }
  done
done
cluster() { # BIN_DIR DATA_DIR
  rm -rf "$2"
  "$1/hubctl" dev up --nodes 3 --data-dir "$2" --base-port 0 >/dev/null
}
for round in $(seq 1 "$rounds"); do
  for which in before after; do
    bin=$1
    [ "$which" = after ] && bin=$2
    data="$out/cluster-$which-$round"
    cluster "$bin" "$data"
    echo "== writes $which ($bin) round $round" | tee -a "$out/writes.txt"
    "$bin/hub-bench" writes --cluster "$data" --concurrency 1,16,64 --seconds 10 2>&1 |
      tail -5 | tee -a "$out/writes.txt"
    "$bin/hubctl" dev down --data-dir "$data" >/dev/null
    cluster "$bin" "$data"
    echo "== agents $which ($bin) round $round" | tee -a "$out/agents.txt"
    # hub-bench before 2dbd86f polled every second; since, it takes the agent's default
    # (10 s) unless given --poll-wait-ms: compare builds on the same side of that change.
    "$bin/hub-bench" agents --cluster "$data" --agents 1000 --seconds 45 --release-every 15 2>&1 |
      tail -3 | tee -a "$out/agents.txt"
    "$bin/hubctl" dev down --data-dir "$data" >/dev/null
    rm -rf "$data"
  done
done
echo "results in $out"
