#!/usr/bin/env bash
# gomemcache's own test suite (github.com/bradfitz/gomemcache, pinned below) against hkv.
# The suite starts `memcached` from PATH for its Unix-socket and TLS tests and talks to
# localhost:11211 for the rest: a `memcached` on PATH here runs hkv with the same flags, and
# hkv is started on 127.0.0.1:11211 (the TCP tests are skipped if that port is taken).
#   HKV_BIN=target/release/hkv bash tests/clients/gomemcache/run.sh
# Last line: "gomemcache: N passed, M failed".
set -euo pipefail
VERSION=v0.0.0-20260422231931-4d751bb6e37c
here=$(cd "$(dirname "$0")" && pwd)
hkv=${HKV_BIN:-$here/../../../target/release/hkv}
hkv=$(realpath "$hkv")
command -v go >/dev/null 2>&1 || export PATH=$PATH:/usr/local/go/bin
work=$(mktemp -d)
pid=
cleanup() {
  if [ -n "$pid" ]; then kill "$pid" 2>/dev/null || true; fi
  chmod -R u+w "$work" 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT
dir=$(cd "$work" && go mod download -json "github.com/bradfitz/gomemcache@$VERSION" |
  sed -n 's/^\s*"Dir": "\(.*\)",$/\1/p')
cp -r "$dir" "$work/src"
chmod -R u+w "$work/src"
mkdir "$work/bin"
printf '#!/bin/sh\nexec %s "$@"\n' "$hkv" >"$work/bin/memcached"
chmod +x "$work/bin/memcached"
if ! (exec 3<>/dev/tcp/127.0.0.1/11211) 2>/dev/null; then
  # TestLocalhost writes flush_all on a connection it closes without reading the reply, then
  # starts storing on new ones: with one worker that flush runs before them, as it does in
  # practice on memcached; with several it may land on an idle worker after the first SETs.
  "$hkv" -p 11211 -l 127.0.0.1 -t 1 >/dev/null 2>&1 &
  pid=$!
  for _ in $(seq 100); do (exec 3<>/dev/tcp/127.0.0.1/11211) 2>/dev/null && break; sleep 0.05; done
else
  echo "port 11211 is taken: gomemcache's TestLocalhost will skip or use that server" >&2
fi
out=$(cd "$work/src" && PATH="$work/bin:$PATH" RUST_BACKTRACE=0 go test -count=1 -v ./... 2>&1) || true
echo "$out" | grep -E '^\s*--- (PASS|FAIL|SKIP)|^(ok|FAIL)\s' || true
echo "$out" | grep -B2 -A10 -E '^--- FAIL' || true
passed=$(echo "$out" | grep -cE '^\s*--- PASS' || true)
failed=$(echo "$out" | grep -cE '^\s*--- FAIL' || true)
if echo "$out" | grep -qE '^FAIL\s' && [ "$failed" -eq 0 ]; then
  echo "$out" | tail -20
  failed=1
fi
echo "gomemcache: ${passed} passed, ${failed} failed"
