#!/usr/bin/env bash
# Quick start: builds the hub and starts a local 3-node cluster in .hub-dev/ (or $HUB_DEV_DIR).
# Stop it with: $CARGO_TARGET_DIR/debug/hubctl dev down --data-dir .hub-dev
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/deps.sh

# Always build the whole workspace: a package-scoped build unifies features differently
# and recompiles RocksDB.
cargo build --workspace --bins
dir="${HUB_DEV_DIR:-.hub-dev}"
hubctl="$CARGO_TARGET_DIR/debug/hubctl"
"$hubctl" dev up --nodes "${HUB_NODES:-3}" --data-dir "$dir"
cat <<TXT

The cluster runs in the background (logs: $dir/node-N.log), every node with mutual TLS.
$dir/hubctl.env holds the endpoints and the admin operator's certificate. Try:
  source $dir/hubctl.env
  $hubctl cluster status
  $hubctl env create prod
  $hubctl env list
Stop it:
  $hubctl dev down --data-dir $dir
TXT
