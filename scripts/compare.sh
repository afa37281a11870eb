#!/usr/bin/env bash
# The side-by-side comparison from one command on a fresh Debian machine: installs memcached
# and Redis, builds hkv, runs `hkv-bench compare` (about 10 minutes) and rewrites the compare
# section of docs/BENCHMARKS.md and the plots in docs/bench/.
#   bash scripts/compare.sh                 # the full comparison
#   bash scripts/compare.sh --quick         # seconds; writes to target/compare-quick
# Any other hkv-bench compare flag passes through (hkv-bench compare --help).
set -euo pipefail
cd "$(dirname "$0")/.."
need=()
command -v memcached >/dev/null 2>&1 || need+=(memcached)
command -v redis-server >/dev/null 2>&1 || need+=(redis-server)
if [ ${#need[@]} -gt 0 ]; then
  if [ "$(id -u)" -ne 0 ]; then
    echo "need Debian packages: ${need[*]} (run as root, or install them)" >&2
    exit 1
  fi
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null
fi
cargo build --release --locked -p hkv-server -p hkv-bench
exec ./target/release/hkv-bench compare "$@"
