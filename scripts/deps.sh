#!/usr/bin/env bash
# Installs what building the hub needs on Debian, if missing: a C++ toolchain and libclang
# (bindgen, for RocksDB), make (jemalloc), the system's CA certificates (ca-certificates: the roots https
# registries, webhooks and Prometheus are verified against), for the chaos runner's
# partitions iproute2 and nftables, for its disk faults e2fsprogs, for the dashboard's browser test (tests/dashboard.rs)
# Chromium with a font, protoc for building the etcd client of hub-bench, and Prometheus
# (prometheus and promtool) for the real-Prometheus canary test (tests/canary_prometheus.rs).
# Sourced by the other scripts; idempotent.
set -euo pipefail

need=()
command -v g++ >/dev/null 2>&1 || need+=(g++)
# make, for jemalloc's build (tikv-jemalloc-sys, hub-node's allocator).
command -v make >/dev/null 2>&1 || need+=(make)
dpkg -s libclang-dev >/dev/null 2>&1 || need+=(libclang-dev)
[ -s /etc/ssl/certs/ca-certificates.crt ] || need+=(ca-certificates)
command -v ip >/dev/null 2>&1 || need+=(iproute2)
command -v nft >/dev/null 2>&1 || need+=(nftables)
# The chaos runner's disk faults: a loop-mounted ext4 per node.
[ -x /usr/sbin/mkfs.ext4 ] || [ -x /sbin/mkfs.ext4 ] || need+=(e2fsprogs)
[ -x /usr/bin/chromium ] || need+=(chromium)
# protoc, for the etcd-client crate's build (hub-bench compare-etcd's etcd load).
command -v protoc >/dev/null 2>&1 || need+=(protobuf-compiler)
dpkg -s fonts-dejavu-core >/dev/null 2>&1 || need+=(fonts-dejavu-core)
if [ ${#need[@]} -gt 0 ]; then
  echo "installing: ${need[*]}" >&2
  SUDO=""
  [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need[@]}" >/dev/null
fi
# Debian's prometheus package, without its recommended node exporter: the canary test starts
# its own `prometheus` on a free loopback port with its own config and storage directory, so
# the package's service (on :9090 where an init system starts it) is never what it uses.
if ! command -v prometheus >/dev/null 2>&1 || ! command -v promtool >/dev/null 2>&1; then
  echo "installing: prometheus" >&2
  SUDO=""
  [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends prometheus >/dev/null
fi
command -v cargo >/dev/null 2>&1 || { echo "cargo not found: install the Rust toolchain (rustup)" >&2; exit 1; }

# One target dir outside the clone: RocksDB's C++ takes ~16 minutes to build once, and
# every clone (and CI) reuses it.
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/hub-target}"
