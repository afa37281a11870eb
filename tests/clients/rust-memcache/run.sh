#!/usr/bin/env bash
# The Rust `memcache` crate's own tests (crates.io memcache 0.17.2: binary and ASCII
# protocols, CAS, UDP, TLS with and without client certificates, Unix sockets, and its
# doc-tests) against hkv, on the servers its tests/setup_tests.sh starts with memcached:
# TCP 12345-12349, TLS 12350 and 12351 (client certificates required), UDP 22345, and
# /tmp/memcached.sock and /tmp/memcached2.sock. Those are fixed in its tests, so this is not
# part of scripts/test.sh (it would also build ~60 crates); run it by hand:
#   HKV_BIN=target/release/hkv bash tests/clients/rust-memcache/run.sh
#   SERVER=memcached bash tests/clients/rust-memcache/run.sh     # the same against memcached
# Last line: "rust-memcache: N passed, M failed".
set -euo pipefail
VERSION=0.17.2
here=$(cd "$(dirname "$0")" && pwd)
server=${SERVER:-$(realpath "${HKV_BIN:-$here/../../../target/release/hkv}")}
extra=()
[ "$(basename "$server")" = memcached ] && extra=(-u root)
for p in 12345 12346 12347 12348 12349 12350 12351 12352; do
  if (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then
    echo "port $p is taken: the suite's ports are fixed" >&2
    exit 1
  fi
done
work=$(mktemp -d)
pids=()
cleanup() {
  if [ "${#pids[@]}" -gt 0 ]; then kill "${pids[@]}" 2>/dev/null || true; fi
  rm -rf "$work" /tmp/memcached.sock /tmp/memcached2.sock
}
trap cleanup EXIT
curl -sfL "https://static.crates.io/crates/memcache/memcache-$VERSION.crate" | tar xz -C "$work"
src="$work/memcache-$VERSION"
a="$src/tests/assets"
tls="ssl_key=$a/localhost.key,ssl_chain_cert=$a/localhost.crt"
start() { "$server" -l 127.0.0.1 "${extra[@]}" "$@" >/dev/null 2>&1 & pids+=($!); }
for p in 12345 12346 12347 12348 12349; do start -p "$p"; done
start -p 12350 -Z -o "$tls"
start -p 12351 -Z -o "$tls,ssl_verify_mode=2,ssl_ca_cert=$a/RUST_MEMCACHE_TEST_CERT.crt"
start -p 12352 -U 22345
rm -f /tmp/memcached.sock /tmp/memcached2.sock
"$server" -s /tmp/memcached.sock "${extra[@]}" >/dev/null 2>&1 & pids+=($!)
"$server" -s /tmp/memcached2.sock "${extra[@]}" >/dev/null 2>&1 & pids+=($!)
for _ in $(seq 100); do
  [ -S /tmp/memcached2.sock ] && (exec 3<>/dev/tcp/127.0.0.1/12351) 2>/dev/null && break
  sleep 0.05
done
out=$(cd "$src" && CARGO_TARGET_DIR="$work/target" cargo test 2>&1) || true
echo "$out" | grep -E '^test .*(FAILED|ok)$|panicked' || true
passed=$(echo "$out" | grep -cE '^test .* ok$' || true)
failed=$(echo "$out" | grep -cE '^test .* FAILED$' || true)
if ! echo "$out" | grep -q '^test result'; then
  echo "$out" | tail -20
  failed=$((failed + 1))
fi
echo "rust-memcache: ${passed} passed, ${failed} failed"
