#!/usr/bin/env python3
"""The network loop's benchmark (issue 15, docs/network.md): hkv on io_uring, hkv on epoll and
memcached, same worker threads, each driven by hkv-bench net (pipelined, unpipelined,
multi-key GETs) and by memcaslap from libmemcached-tools (an independent load generator),
with each server's CPU per operation read from /proc. Prints a Markdown table of medians.

    python3 scripts/network-bench.py [--runs 3] [--seconds 4] [--threads 1] [--client-threads 1]
        [--servers hkv-uring,hkv-epoll,memcached] [--loads "unpipelined;memcaslap"]

A server named hkv-uring@50 is hkv on io_uring with --busy-poll-us 50.

--client-threads gives both load generators more threads, for machines with cores to spare
(on 2 cores the client and the server share them).
"""
import argparse
import json
import os
import re
import socket
import statistics
import subprocess
import sys
import time

from benchserver import free_port

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
HKV = os.path.join(ROOT, "target/release/hkv")
BENCH = os.path.join(ROOT, "target/release/hkv-bench")
TICK = os.sysconf("SC_CLK_TCK")
CLIENT_THREADS = 1


def cpu_seconds(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK


def start(server, threads, port):
    if server == "memcached":
        cmd = ["memcached", "-u", "root", "-l", "127.0.0.1", "-p", str(port), "-U", str(port),
               "-t", str(threads), "-m", "1024", "-c", "4096"]
    else:
        # "hkv-uring@50": hkv on io_uring with --busy-poll-us 50.
        name, _, busy = server.partition("@")
        io = name.split("-")[1]
        cmd = [HKV, "-l", "127.0.0.1", "-p", str(port), "-U", str(port), "-t", str(threads),
               "-m", "1024",
               "-c", "4096", "--io", io] + (["--busy-poll-us", busy] if busy else [])
    p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    for _ in range(200):
        try:
            socket.create_connection(("127.0.0.1", port)).close()
            return p
        except OSError:
            time.sleep(0.02)
    raise SystemExit(f"{server} did not start")


def bench_net(port, pid, seconds, extra):
    cmd = [BENCH, "net", "--target", f"127.0.0.1:{port}", "--keys", "100000",
           "--dataset", "k16", "--duration", str(seconds), "--warmup", "1", "--runs", "1",
           "--json", "--no-preload", "--threads", str(CLIENT_THREADS)] + extra
    before = cpu_seconds(pid)
    t0 = time.time()
    out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
    r = json.loads(out.strip().splitlines()[-1])
    # CPU over the whole command (warm-up included) against the operations of the measured
    # part scaled to the same wall time.
    cpu = cpu_seconds(pid) - before
    ops = r["ops_per_sec"] * (time.time() - t0)
    return r["ops_per_sec"], cpu / ops * 1e9, r["p99_us"]


def bench_memcaslap(port, pid, seconds, conns, udp=False):
    # memcaslap over UDP needs the UDP port equal to the TCP one (both servers get -U PORT).
    cmd = ["memcaslap", "-s", f"127.0.0.1:{port}", "-t", f"{seconds}s", "-c", str(conns),
           "-T", str(CLIENT_THREADS), "-X", "64"] + (["-U"] if udp else [])
    before = cpu_seconds(pid)
    out = subprocess.run(cmd, capture_output=True, text=True).stdout
    cpu = cpu_seconds(pid) - before
    m = re.findall(r"Run time: [\d.]+s Ops: (\d+) TPS: (\d+)", out)
    if not m:
        raise SystemExit(f"memcaslap output not understood:\n{out}")
    ops, tps = map(int, m[-1])
    return tps, cpu / max(ops, 1) * 1e9, None


LOADS = [
    ("pipelined 8x16, binary (hkv-bench)", lambda p, pid, s: bench_net(
        p, pid, s, ["--protocol", "binary", "--conns", "8", "--pipeline", "16"])),
    ("pipelined 8x16, text (hkv-bench)", lambda p, pid, s: bench_net(
        p, pid, s, ["--protocol", "text", "--conns", "8", "--pipeline", "16"])),
    ("unpipelined 32x1, text (hkv-bench)", lambda p, pid, s: bench_net(
        p, pid, s, ["--protocol", "text", "--conns", "32", "--pipeline", "1"])),
    ("get of 10 keys, 8x4 (hkv-bench)", lambda p, pid, s: bench_net(
        p, pid, s, ["--protocol", "text", "--conns", "8", "--pipeline", "4",
                    "--multiget", "10", "--workload", "c"])),
    ("get of 100 keys, 8x1 (hkv-bench)", lambda p, pid, s: bench_net(
        p, pid, s, ["--protocol", "text", "--conns", "8", "--pipeline", "1",
                    "--multiget", "100", "--workload", "c"])),
    ("32 conns, 90% get, 64 B values (memcaslap)", lambda p, pid, s: bench_memcaslap(
        p, pid, s, 32)),
    ("UDP, 8 conns, 90% get, 64 B values (memcaslap)", lambda p, pid, s: bench_memcaslap(
        p, pid, s, 8, udp=True)),
]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--seconds", type=int, default=4)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--servers", default="hkv-uring,hkv-epoll,memcached")
    ap.add_argument("--client-threads", type=int, default=1)
    ap.add_argument("--loads", default="", help="only the loads whose names contain one of "
                    "these ';'-separated strings (names hold commas)")
    a = ap.parse_args()
    global CLIENT_THREADS
    CLIENT_THREADS = a.client_threads
    servers = a.servers.split(",")
    words = [w for w in a.loads.split(";") if w]
    loads = [(n, f) for n, f in LOADS if not words or any(w in n for w in words)]
    res = {}
    for server in servers:
        port = free_port()
        p = start(server, a.threads, port)
        try:
            # Preload every key once so GETs hit.
            subprocess.run([BENCH, "net", "--target", f"127.0.0.1:{port}", "--keys", "100000",
                            "--dataset", "k16", "--duration", "1", "--warmup", "0",
                            "--runs", "1", "--json"], capture_output=True, check=True)
            for name, f in loads:
                runs = [f(port, p.pid, a.seconds) for _ in range(a.runs)]
                res[(server, name)] = (
                    statistics.median(r[0] for r in runs),
                    statistics.median(r[1] for r in runs),
                    (min(r[0] for r in runs), max(r[0] for r in runs)),
                )
                print(f"{server:10} {name:45} {res[(server, name)][0]:>10.0f} ops/s "
                      f"{res[(server, name)][1]:>7.0f} ns CPU/op", file=sys.stderr)
        finally:
            p.terminate()
            p.wait()
    print(f"Server threads {a.threads}, client threads {a.client_threads}; median of {a.runs} runs of {a.seconds} s; "
          "ops/s (run-to-run range) and server CPU ns per operation.\n")
    hkvs = [s for s in servers if s.startswith("hkv") and "memcached" in servers]
    print("| load | " + " | ".join(servers) + "".join(f" | {h} / memcached" for h in hkvs) + " |")
    print("| --- |" + " ---: |" * (len(servers) + len(hkvs)))
    for name, _ in loads:
        cells = []
        for s in servers:
            ops, cpu, (lo, hi) = res[(s, name)]
            cells.append(f"{ops:,.0f} ({lo:,.0f}-{hi:,.0f}), {cpu:,.0f} ns")
        m = res[("memcached", name)] if hkvs else None
        for h in hkvs:
            u = res[(h, name)]
            cells.append(f"{u[0] / m[0]:.2f}x ops, {u[1] / m[1]:.2f}x CPU")
        print(f"| {name} | " + " | ".join(cells) + " |")

if __name__ == "__main__":
    main()
