#!/usr/bin/env python3
"""A client looping connect, `stats` (REPEAT times, pipelined), close, never reading.

One thread churns connections as fast as it can; beside it, a victim opens a new connection
every 20 ms (`version`) and counts how many are refused (`ERROR Too many open connections`),
and a probe on one connection does `set` + `get` every 10 ms. Prints the churn rate,
refusals, `rejected_connections` and `curr_connections` after the churn, the probe's
latency, and the server's CPU seconds (from /proc).

Before the fix every `stats` read /proc/self/stat twice for `rusage_*` (half its CPU): at
~14,000 connections a second hkv fell behind, held up to 1,024 connections at once and
refused new clients (17-33 of ~100 victims); memcached kept up. Now `rusage_*` come from
one getrusage, as in memcached.

usage: hostile-stats-churn.py PID PORT [SECONDS] [REPEAT] [THREADS]
  (start the server first, e.g. `hkv -p 43110 -l 127.0.0.1 -m 64 -t 2`)
"""
import socket
import sys
import threading
import time


def cpu_seconds(pid):
    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / 100.0


def stat(port, names):
    # Retried: right after the churn the server may still be at -c and refuse this too.
    for _ in range(50):
        try:
            s = socket.create_connection(("127.0.0.1", port), timeout=10)
            s.sendall(b"stats\r\n")
            buf = b""
            while not buf.endswith(b"END\r\n"):
                d = s.recv(65536)
                if not d:
                    break
                buf += d
            s.close()
            if buf.endswith(b"END\r\n"):
                break
        except OSError:
            pass
        time.sleep(0.2)
    got = dict(line.split()[1:3] for line in buf.decode().split("\r\n") if line.startswith("STAT"))
    return {n: got.get(n) for n in names}


def churn(port, stop, cmd, count):
    while time.time() < stop:
        try:
            c = socket.create_connection(("127.0.0.1", port))
            c.sendall(cmd)
            c.close()
            count[0] += 1
        except OSError:
            time.sleep(0.01)


def victims(port, stop, out):
    while time.time() < stop:
        try:
            s = socket.create_connection(("127.0.0.1", port), timeout=5)
            s.sendall(b"version\r\n")
            r = s.recv(100)
            s.close()
            out["ok" if r.startswith(b"VERSION") else "refused"] += 1
        except OSError:
            out["refused"] += 1
        time.sleep(0.02)


def probe(port, stop, lat):
    s = socket.create_connection(("127.0.0.1", port), timeout=30)
    want = b"STORED\r\nVALUE probe 0 4\r\nabcd\r\nEND\r\n"
    while time.time() < stop:
        a = time.time()
        s.sendall(b"set probe 0 0 4\r\nabcd\r\nget probe\r\n")
        buf = b""
        while not buf.endswith(b"END\r\n"):
            d = s.recv(4096)
            if not d:
                raise SystemExit("probe connection closed by the server")
            buf += d
        if buf != want:
            raise SystemExit(f"probe got {buf!r}")
        lat.append(time.time() - a)
        time.sleep(0.01)


def main():
    pid, port = int(sys.argv[1]), int(sys.argv[2])
    seconds = float(sys.argv[3]) if len(sys.argv) > 3 else 8
    repeat = int(sys.argv[4]) if len(sys.argv) > 4 else 1
    threads = int(sys.argv[5]) if len(sys.argv) > 5 else 1
    before = stat(port, ["rejected_connections"])
    stop = time.time() + seconds
    count, seen, lat = [0], {"ok": 0, "refused": 0}, []
    cpu0 = cpu_seconds(pid)
    workers = [threading.Thread(target=churn, args=(port, stop, b"stats\r\n" * repeat, count))
               for _ in range(threads)]
    workers += [threading.Thread(target=victims, args=(port, stop - 1, seen)),
                threading.Thread(target=probe, args=(port, stop - 1, lat))]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    cpu = cpu_seconds(pid) - cpu0
    after = stat(port, ["rejected_connections", "curr_connections"])
    lat.sort()
    pct = lambda q: lat[min(len(lat) - 1, int(len(lat) * q))] * 1e3 if lat else float("nan")
    print(f"churn: {count[0] / seconds:.0f} connections/s x {repeat} stats, {threads} thread(s)")
    print(f"victims: {seen['ok']} answered, {seen['refused']} refused")
    print(f"rejected_connections +{int(after['rejected_connections']) - int(before['rejected_connections'])}, "
          f"curr_connections after {after['curr_connections']}")
    print(f"probe: n={len(lat)} p50={pct(0.5):.1f} ms p99={pct(0.99):.1f} ms max={pct(1.0):.1f} ms")
    print(f"server CPU: {cpu:.1f} s in {seconds:.0f} s")


if __name__ == "__main__":
    main()
