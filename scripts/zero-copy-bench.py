#!/usr/bin/env python3
"""Where sending values without a copy pays (issue 15, docs/network.md "Replies without
copying values"): GETs of one value size at a time, against hkv copying every value
(`--zero-copy-min 0`), hkv sending every value from item memory (`--zero-copy-min 1`) and
memcached 1.6, same worker threads, each driven by hkv-bench net (100% GET, uniform keys,
8 connections x pipeline 4), each server's CPU per GET read from /proc. The runs of each
size are interleaved across the servers; the table gives medians.

    python3 scripts/zero-copy-bench.py [--runs 3] [--seconds 3] [--threads 2] \
        [--sizes 1024,4096,16384,65536,262144] [--io auto]
"""
import argparse
import json
import os
import socket
import statistics
import subprocess
import time

from benchserver import free_port

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
HKV = os.path.join(ROOT, "target/release/hkv")
BENCH = os.path.join(ROOT, "target/release/hkv-bench")


def start(server, threads, port, io):
    if server == "memcached":
        cmd = ["memcached", "-u", "root", "-l", "127.0.0.1", "-p", str(port), "-U", "0",
               "-t", str(threads), "-m", "1024", "-I", "1m"]
    else:
        zc = {"hkv-copy": "0", "hkv-zero-copy": "1"}[server]
        cmd = [HKV, "-l", "127.0.0.1", "-p", str(port), "-U", "0", "-t", str(threads),
               "-m", "1024", "-I", "1m", "--io", io, "--zero-copy-min", zc]
    p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    for _ in range(200):
        try:
            socket.create_connection(("127.0.0.1", port)).close()
            return p
        except OSError:
            time.sleep(0.02)
    raise SystemExit(f"{server} did not start")


def run(server, size, args):
    port = free_port()
    p = start(server, args.threads, port, args.io)
    try:
        # About 256 MiB of values, at most 20000 keys.
        keys = max(64, min(20000, (256 << 20) // size))
        cmd = [BENCH, "net", "--target", f"127.0.0.1:{port}", "--workload", "c",
               "--dist", "uniform", "--dataset", "k16", "--value-bytes", str(size),
               "--keys", str(keys), "--conns", "8", "--pipeline", "4",
               "--duration", str(args.seconds), "--warmup", "1", "--runs", "1",
               "--server-pid", str(p.pid), "--json"]
        out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
        r = json.loads(out.strip().splitlines()[-1])
        r = r[0] if isinstance(r, list) else r
        return r["ops_per_sec"], r.get("server_cpu_ns_per_op") or 0.0
    finally:
        p.kill()
        p.wait()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=3.0)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--sizes", default="1024,4096,16384,65536,262144")
    ap.add_argument("--io", default="auto")
    args = ap.parse_args()
    servers = ["hkv-copy", "hkv-zero-copy", "memcached"]
    print("| value | server | GETs/s | GB/s | server CPU us/GET | zero-copy / copy "
          "(GETs/s, CPU) | hkv best / memcached |")
    print("| ---: | --- | ---: | ---: | ---: | ---: | ---: |")
    for size in [int(s) for s in args.sizes.split(",")]:
        got = {s: [] for s in servers}
        for _ in range(args.runs):
            for s in servers:
                got[s].append(run(s, size, args))
        med = {s: (statistics.median(r[0] for r in got[s]),
                   statistics.median(r[1] for r in got[s])) for s in servers}
        spread = {s: (max(r[0] for r in got[s]) - min(r[0] for r in got[s]))
                  / max(med[s][0], 1) for s in servers}
        zc, cp, mc = med["hkv-zero-copy"], med["hkv-copy"], med["memcached"]
        best = max(zc[0], cp[0])
        for s in servers:
            ops, cpu = med[s]
            extra = ""
            if s == "hkv-zero-copy":
                extra = (f"{zc[0] / max(cp[0], 1):.2f}x, {zc[1] / max(cp[1], 1):.2f}x | "
                         f"{best / max(mc[0], 1):.2f}x")
            else:
                extra = " | "
            print(f"| {size} | {s} | {ops:,.0f} (+-{spread[s] * 50:.0f}%) | "
                  f"{ops * size / 1e9:.2f} | {cpu / 1000:.2f} | {extra} |")


if __name__ == "__main__":
    main()
