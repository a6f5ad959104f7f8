#!/usr/bin/env bash
# Packages the demo product (examples/demo-service) as process-driver release artifacts.
#
# usage: scripts/demo-package.sh OUT_DIR [VERSION[:broken] ...]
#
# For each version (default: 1.0.0 1.1.0 2.0.0:broken) writes
#   OUT_DIR/registry/demo-service/demo-service-VERSION.tar.gz   the artifact:
#       service.json         the process driver's contract (command, args, readiness, ...)
#       bin/demo-service     the binary
#   OUT_DIR/manifests/demo-service-VERSION.yml                  its release manifest
# and prints one line per release: VERSION SHA256 TARBALL_PATH.
#
# A ":broken" release passes --never-ready: its readiness check (GET /healthz) never passes.
# Manifests name the artifact by a relative URI (demo-service/demo-service-VERSION.tar.gz),
# which the hub resolves against the environment's first registry: file://OUT_DIR/registry.
#
# Tarballs are deterministic (sorted entries, fixed mtime and modes, owner 0:0, gzip -n):
# the same binary gives the same sha256.
#
# The binary is $DEMO_SERVICE_BIN if set; otherwise the script builds the workspace's
# binaries (cargo build --workspace --bins, never -p: a package-scoped build rebuilds
# RocksDB) in ${CARGO_TARGET_DIR:-$HOME/.cache/hub-target} and uses debug/demo-service.
set -euo pipefail

usage() {
  echo "usage: $0 OUT_DIR [VERSION[:broken] ...]   (default versions: 1.0.0 1.1.0 2.0.0:broken)" >&2
  exit 2
}
die() {
  echo "demo-package: $*" >&2
  exit 1
}

[ $# -ge 1 ] || usage
case "$1" in -h | --help) usage ;; "") die "OUT_DIR must not be empty" ;; esac
out_arg=$1
shift
if [ $# -gt 0 ]; then
  specs=("$@")
else
  specs=(1.0.0 1.1.0 2.0.0:broken)
fi

# Validate every version before writing anything.
version_re='^[0-9]+\.[0-9]+\.[0-9]+(-[0-9A-Za-z.-]+)?(\+[0-9A-Za-z.-]+)?$'
for spec in "${specs[@]}"; do
  v=${spec%:broken}
  [[ $v =~ $version_re ]] || die "invalid release ${spec@Q}: expected VERSION or VERSION:broken, VERSION like 1.2.3"
done

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)

if [ -n "${DEMO_SERVICE_BIN:-}" ]; then
  bin=$DEMO_SERVICE_BIN
  [ -f "$bin" ] && [ -x "$bin" ] || die "DEMO_SERVICE_BIN=$bin is not an executable file"
else
  export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/hub-target}"
  command -v cargo >/dev/null 2>&1 || die "cargo not found (or set DEMO_SERVICE_BIN)"
  echo "demo-package: building (cargo build --workspace --bins) in $CARGO_TARGET_DIR" >&2
  (cd "$repo" && cargo build --workspace --bins >&2) || die "cargo build failed"
  bin=$CARGO_TARGET_DIR/debug/demo-service
  [ -x "$bin" ] || die "$bin was not built"
fi

mkdir -p "$out_arg/registry/demo-service" "$out_arg/manifests"
out=$(cd "$out_arg" && pwd)
registry=$out/registry/demo-service
manifests=$out/manifests

stage=$(mktemp -d)
tmp="" mtmp=""
trap 'rm -rf "$stage" ${tmp:+"$tmp"} ${mtmp:+"$mtmp"}' EXIT
mtime=${SOURCE_DATE_EPOCH:-1704067200} # 2024-01-01T00:00:00Z

for spec in "${specs[@]}"; do
  v=${spec%:broken}
  extra=""
  [ "$spec" != "$v" ] && extra=', "--never-ready"'

  root=$stage/$v
  mkdir -p "$root/bin"
  cp "$bin" "$root/bin/demo-service"
  chmod 0755 "$root" "$root/bin" "$root/bin/demo-service"
  cat >"$root/service.json" <<EOF
{
  "command": "bin/demo-service",
  "args": ["--config", "\${CONFIG}", "--version", "$v"$extra],
  "env": {},
  "readiness": {"http": "/healthz"},
  "ready_timeout_ms": 10000,
  "stop_timeout_ms": 5000
}
EOF
  chmod 0644 "$root/service.json"

  name=demo-service-$v.tar.gz
  tarball=$registry/$name
  tmp=$registry/.$name.tmp.$$
  LC_ALL=C tar -C "$root" --sort=name --format=gnu --mtime="@$mtime" \
    --owner=0 --group=0 --numeric-owner --mode='u+rwX,go+rX,go-w' \
    -cf - bin service.json | gzip -n -9 >"$tmp"
  chmod 0644 "$tmp"
  mv -f "$tmp" "$tarball"
  sha=$(sha256sum "$tarball" | cut -d' ' -f1)

  manifest=$manifests/demo-service-$v.yml
  mtmp=$manifest.tmp.$$
  cat >"$mtmp" <<EOF
product-group: com.example
product-name: demo-service
product-version: $v
artifacts:
  - uri: demo-service/$name
    sha256: $sha
EOF
  chmod 0644 "$mtmp"
  mv -f "$mtmp" "$manifest"
  echo "$v $sha $tarball"
done
