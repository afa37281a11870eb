#!/usr/bin/env bash
# User-space instructions per operation of an hkv build under pipelined load, counted by
# valgrind's callgrind: the same for the same build whatever else the machine is doing, so
# it shows what a change to the request path saves where CPU time is too noisy to tell
# (docs/BENCHMARKS.md). Only the measured phase is counted (not start-up or the preload).
# The server runs on the epoll loop (valgrind does not follow io_uring) and, slowed ~50x,
# sees larger batches than at full speed: compare builds with this, not with CPU time.
#
#   bash scripts/instructions-per-op.sh [HKV_BINARY] [hkv-bench net arguments...]
#   bash scripts/instructions-per-op.sh target/release/hkv --protocol text
#
# Needs valgrind (Debian: valgrind) and a release build of hkv-bench.
set -euo pipefail
cd "$(dirname "$0")/.."
bin=${1:-target/release/hkv}
shift || true
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
out=$(mktemp -d)
valgrind --tool=callgrind --instr-atstart=no --callgrind-out-file="$out/cg.out" \
  "$bin" -p "$port" -m 256 -t 1 --io epoll >"$out/log" 2>&1 &
vg=$!
trap 'kill $vg 2>/dev/null || true; [ -n "${KEEP:-}" ] && cp "$out/cg.out" "$KEEP"; rm -rf "$out"' EXIT
for _ in $(seq 60); do
  python3 -c "import socket; socket.create_connection(('127.0.0.1',$port))" 2>/dev/null && break
  sleep 1
done
ops() {
  python3 - "$port" <<'PY'
import socket, sys
s = socket.create_connection(("127.0.0.1", int(sys.argv[1])))
s.sendall(b"stats\r\n")
buf = b""
while not buf.endswith(b"END\r\n"):
    buf += s.recv(65536)
st = dict(l.split()[1:3] for l in buf.decode().splitlines() if l.startswith("STAT "))
print(int(st["cmd_get"]) + int(st["cmd_set"]) + int(st.get("cmd_touch", 0)))
PY
}
bench=target/release/hkv-bench
"$bench" net --target "127.0.0.1:$port" --keys 100000 --duration 1 --warmup 0 "$@" >/dev/null
callgrind_control -i on "$vg" >/dev/null
before=$(ops)
"$bench" net --target "127.0.0.1:$port" --keys 100000 --duration "${SECONDS_MEASURED:-5}" \
  --warmup 0 --no-preload "$@" | grep '^run'
after=$(ops)
kill -TERM "$vg"
wait "$vg" 2>/dev/null || true
ir=$(grep Collected "$out/log" | awk '{print $4}' | tr -d ,)
n=$((after - before))
echo "$bin: $n operations, $ir instructions, $((ir / n)) per operation"
