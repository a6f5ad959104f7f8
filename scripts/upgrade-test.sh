#!/usr/bin/env bash
# A rolling upgrade across real releases (issue 56 item 5; docs/RELEASES.md).
#
#   scripts/upgrade-test.sh [FROM_TAG] [chaos run options…]
#
# Builds the previous release (FROM_TAG, by default the newest v* tag before HEAD) from its
# tag in its own target directory, starts a 3-node hub of it under the chaos runner's
# register and rollout workloads (sim agents, a process agent with the demo service's
# canary), and upgrades one node at a time to this build (followers first, the leader last,
# each stopped with SIGTERM and started on its data). Before each upgrade the runner submits a
# command of this build's feature level, which must be refused ("upgrade every node first");
# once the last node is upgraded the leader must raise the cluster's level and the command
# must apply. Every other checker of the runner judges the run too: no acknowledged write
# lost, the history linearizable, every task run at most once, every rollout terminal, the
# nodes' states equal. Exits non-zero on a violation; the report stays in the output dir.
#
# The previous release is built with the same RocksDB as this build when both lock the same
# librocksdb-sys (it links this target dir's librocksdb.a instead of compiling RocksDB's C++
# again); otherwise it builds its own once. Both builds stay cached.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/deps.sh
root=$(pwd)

from=""
if [ $# -gt 0 ] && [[ "$1" != -* ]]; then
  from=$1
  shift
fi
# The newest release before HEAD: from the tags, else from scripts/releases.txt (a clone
# made without tags still has the commits, and the source is cached once extracted).
previous_release() {
  local here
  here=$(git tag --points-at HEAD --list 'v*' | head -1)
  here=${here:-$(awk -v h="$(git rev-parse HEAD)" '$2 == h { print $1 }' scripts/releases.txt)}
  { git tag --list 'v*' --merged HEAD; grep -v '^#' scripts/releases.txt | awk '{ print $1 }'; } |
    grep -vxF "${here:-none}" | sort -u -V -r | head -1 || true
}
# The commit of release $1: its tag's, else the one scripts/releases.txt records.
release_commit() {
  git rev-parse -q --verify "refs/tags/$1^{commit}" 2>/dev/null ||
    awk -v t="$1" '$1 == t { print $2 }' scripts/releases.txt
}
if [ -z "$from" ]; then
  from=$(previous_release)
fi
rev=$(release_commit "$from" || true)
if [ -z "$from" ] || [ -z "$rev" ]; then
  echo "upgrade-test: no previous release (${from:-none found}); give one: $0 v0.3.0" >&2
  exit 2
fi

cache="${HUB_UPGRADE_CACHE:-$HOME/.cache/hub-upgrade}"
src="$cache/src-$from"
old_target="${HUB_UPGRADE_TARGET:-$HOME/.cache/hub-target-$from}"
if [ ! -f "$src/Cargo.lock" ]; then
  echo "upgrade-test: extracting $from into $src"
  rm -rf "$src" && mkdir -p "$src"
  if ! git cat-file -e "$rev^{commit}" 2>/dev/null; then
    # A shallow clone: fetch the release's commit from where it came from.
    git fetch -q --depth 1 origin "$rev"
  fi
  git archive "$rev" | tar -x -C "$src"
fi

# This build first: its librocksdb.a is what the previous release may link.
cargo build --workspace --bins

rocksdb_of() { grep -A1 '^name = "librocksdb-sys"$' "$1" | sed -n 's/^version = "\(.*\)"$/\1/p'; }
old_env=()
if [ "$(rocksdb_of "$src/Cargo.lock")" = "$(rocksdb_of Cargo.lock)" ]; then
  lib=$(ls -t "$CARGO_TARGET_DIR"/debug/build/librocksdb-sys-*/out/librocksdb.a 2>/dev/null | head -1 || true)
  if [ -n "$lib" ]; then
    mkdir -p "$cache/rocksdb-$(rocksdb_of Cargo.lock)"
    kept="$cache/rocksdb-$(rocksdb_of Cargo.lock)/librocksdb.a"
    cmp -s "$lib" "$kept" 2>/dev/null || cp "$lib" "$kept"
    # librocksdb-sys links a prebuilt static RocksDB from ROCKSDB_LIB_DIR; that path does not
    # add the C++ runtime, so it is linked explicitly.
    old_env=(ROCKSDB_LIB_DIR="$(dirname "$kept")" ROCKSDB_STATIC=1 RUSTFLAGS="-C link-arg=-lstdc++")
  fi
fi
echo "upgrade-test: building $from in $old_target${old_env:+ (RocksDB linked from this build)}"
(cd "$src" && env "${old_env[@]}" CARGO_TARGET_DIR="$old_target" cargo build --workspace --bins --locked)

out=$(mktemp -d)
echo "upgrade-test: $from ($("$old_target/debug/hub-node" --version)) -> $(git describe --tags --always --dirty) ($("$CARGO_TARGET_DIR/debug/hub-node" --version)), output in $out"
"$CARGO_TARGET_DIR/debug/chaos" run --nodes 3 --duration 45s --seed 20261207 \
  --faults upgrade --upgrade-from "$old_target/debug" --out "$out/run" "$@"
rm -rf "$out"
