#!/usr/bin/env bash
# Quick start: builds the hub and starts a local 3-node cluster in .hub-dev/ (or $HUB_DEV_DIR).
# Stop it with: hubctl dev down --data-dir .hub-dev
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/deps.sh

# Always build the whole workspace: a package-scoped build unifies features differently
# and recompiles RocksDB.
cargo build --workspace --bins
# Put the binaries on the PATH a newcomer has: links in ~/.local/bin (kept current by every
# build, since they point into the target directory).
bin="${HUB_BIN_DIR:-$HOME/.local/bin}"
mkdir -p "$bin"
for b in hubctl hub-node hub-agent; do
  ln -sf "$CARGO_TARGET_DIR/debug/$b" "$bin/$b"
done
echo "Linked hubctl, hub-node and hub-agent into $bin."
case ":$PATH:" in
  *":$bin:"*) ;;
  *) echo "Add it to your PATH: export PATH=\"$bin:\$PATH\"" ;;
esac
dir="${HUB_DEV_DIR:-.hub-dev}"
hubctl="$bin/hubctl"
"$hubctl" dev up --nodes "${HUB_NODES:-3}" --data-dir "$dir"
cat <<TXT

The cluster runs in the background (logs: $dir/node-N.log), every node with mutual TLS.
$dir/hubctl.env holds the endpoints and the admin operator's certificate. Try:
  source $dir/hubctl.env
  hubctl cluster status --watch
  hubctl env create prod
  hubctl env list
Stop it:
  hubctl dev down --data-dir $dir
TXT
