#!/usr/bin/env bash
# Runs the whole workspace test suite N times while CPU hogs keep both cores busy, to find
# tests that depend on timing. Usage: scripts/stress-tests.sh [RUNS] [HOGS]  (default 5, 2)
#
# The test binaries and the daemons they start are copied to a snapshot directory first, so a
# build started while the runs go on (they take a while) changes nothing they execute. Each
# binary runs from its package's directory with one test thread, as `cargo test` would run it
# in scripts/test.sh. Writes one line per run and the failures' output under $OUT (default a
# new temporary directory) and prints a summary table.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/deps.sh
runs=${1:-5}
hogs=${2:-2}
command -v stress-ng >/dev/null 2>&1 || {
  SUDO=""
  [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq stress-ng >/dev/null
}
out=${OUT:-$(mktemp -d)}
mkdir -p "$out"
snap="$out/bin"
mkdir -p "$snap/deps"

cargo build --workspace --bins
# "executable" and "manifest_path" of every test binary.
cargo test --workspace --no-run --message-format=json 2>/dev/null |
  python3 -c '
import json, sys
for line in sys.stdin:
    try:
        m = json.loads(line)
    except ValueError:
        continue
    if m.get("reason") == "compiler-artifact" and m.get("executable") and m["profile"]["test"]:
        print(m["executable"], m["manifest_path"].rsplit("/", 1)[0])
' >"$out/tests.txt"
# The daemons the black-box tests start sit beside the test binaries' parent (target/debug).
for f in "$CARGO_TARGET_DIR"/debug/*; do
  [ -f "$f" ] && [ -x "$f" ] && cp "$f" "$snap/"
done
while read -r exe dir; do
  cp "$exe" "$snap/deps/"
done <"$out/tests.txt"

hog_pids=()
cleanup() { [ ${#hog_pids[@]} -gt 0 ] && kill "${hog_pids[@]}" 2>/dev/null || true; }
trap cleanup EXIT
stress-ng --cpu "$hogs" --timeout 0 >/dev/null 2>&1 &
hog_pids+=($!)

printf '%-4s %8s %8s %10s  %s\n' run passed failed seconds failures | tee "$out/summary.txt"
for run in $(seq 1 "$runs"); do
  start=$(date +%s)
  passed=0 failed=0 names=""
  while read -r exe dir; do
    bin="$snap/deps/$(basename "$exe")"
    log="$out/run$run-$(basename "$exe").log"
    set +e
    (cd "$dir" && "$bin" --test-threads=1) >"$log" 2>&1
    set -e
    p=$(awk '/^test result:/ { for (i = 1; i <= NF; i++) if ($i ~ /^passed;?$/) s += $(i-1) } END { print s + 0 }' "$log")
    f=$(awk '/^test result:/ { for (i = 1; i <= NF; i++) if ($i ~ /^failed;?$/) s += $(i-1) } END { print s + 0 }' "$log")
    passed=$((passed + p))
    failed=$((failed + f))
    if [ "$f" -gt 0 ] || ! grep -q '^test result:' "$log"; then
      names="$names $(grep -E '^test .* FAILED$' "$log" | awk '{print $2}' | tr '\n' ' ')"
      [ "$f" -gt 0 ] || { failed=$((failed + 1)); names="$names $(basename "$exe")(no result)"; }
    else
      rm -f "$log"
    fi
  done <"$out/tests.txt"
  printf '%-4s %8d %8d %10d  %s\n' "$run" "$passed" "$failed" $(($(date +%s) - start)) "$names" |
    tee -a "$out/summary.txt"
done
echo "stress runs: output in $out"
