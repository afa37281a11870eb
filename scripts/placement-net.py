#!/usr/bin/env python3
"""Placement over the network (issue 17, docs/placement.md): hkv on the OpenCL engine with
each forced placement and with `--placement auto`, driven by hkv-bench net (read-only and
50%-write, pipelined) and by memcaslap from libmemcached-tools (an independent load
generator, 90% GET). Prints a Markdown table of medians and auto's ratio to the best forced
placement of each load.

    python3 scripts/placement-net.py [--runs 3] [--seconds 3] [--threads 1]
"""
import argparse
import importlib.util
import os
import socket
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
spec = importlib.util.spec_from_file_location(
    "network_bench", os.path.join(ROOT, "scripts/network-bench.py"))
nb = importlib.util.module_from_spec(spec)
spec.loader.exec_module(nb)

PLACEMENTS = ["cpu", "search=device,insert=cpu,delete=cpu",
              "search=cpu,insert=device,delete=device", "device", "auto"]

LOADS = [
    ("read-only, binary 8x16 (hkv-bench)", lambda p, pid, s: nb.bench_net(
        p, pid, s, ["--protocol", "binary", "--conns", "8", "--pipeline", "16",
                    "--workload", "c"])),
    ("50% SET, binary 8x16 (hkv-bench)", lambda p, pid, s: nb.bench_net(
        p, pid, s, ["--protocol", "binary", "--conns", "8", "--pipeline", "16",
                    "--workload", "a"])),
    ("32 conns, 90% GET (memcaslap)", lambda p, pid, s: nb.bench_memcaslap(p, pid, s, 32)),
]


def start(placement, threads, port):
    cmd = [nb.HKV, "-l", "127.0.0.1", "-p", str(port), "-U", "0", "-t", str(threads),
           "-m", "1024", "-c", "4096", "--engine", "opencl", "--placement", placement]
    p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    for _ in range(500):
        try:
            socket.create_connection(("127.0.0.1", port)).close()
            return p
        except OSError:
            time.sleep(0.02)
    raise SystemExit(f"hkv --placement {placement} did not start")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=3,
                    help="rounds: every placement's server is started once per round, the "
                         "placements in a rotating order, so the host's drift hits all alike")
    ap.add_argument("--seconds", type=int, default=3)
    ap.add_argument("--threads", type=int, default=1)
    # (Joined with ';' only: a placement's own commas are part of it. Until 2026-11-27 the
    # default split "search=device,insert=cpu,delete=cpu" into three placements.)
    ap.add_argument("--placements", default=";".join(PLACEMENTS),
                    help="semicolon-separated list (default: all forced ones and auto)")
    ap.add_argument("--loads", default="", help="substring of the load names to run")
    a = ap.parse_args()
    placements = a.placements.split(";")
    loads = [(n, f) for n, f in LOADS if a.loads in n]
    runs = {(pl, name): [] for pl in placements for name, _ in loads}
    for r in range(a.runs):
        k = r % len(placements)
        for pl in placements[k:] + placements[:k]:
            port = nb.free_port()
            p = start(pl, a.threads, port)
            try:
                subprocess.run([nb.BENCH, "net", "--target", f"127.0.0.1:{port}", "--keys",
                                "100000", "--dataset", "k16", "--duration", "1", "--warmup",
                                "0", "--runs", "1", "--json"], capture_output=True, check=True)
                for name, f in loads:
                    ops = f(port, p.pid, a.seconds)[0]
                    runs[(pl, name)].append(ops)
                    print(f"round {r + 1} {pl:40} {name:40} {ops:>10.0f} ops/s", file=sys.stderr)
            finally:
                p.terminate()
                p.wait()
    res = {key: (statistics.median(v), min(v), max(v)) for key, v in runs.items()}
    print(f"hkv --engine opencl (PoCL) -t {a.threads}; median of {a.runs} rounds of "
          f"{a.seconds} s, the placements' servers in a rotating order each round; ops/s "
          f"(run-to-run range).\n")
    print("| load | " + " | ".join(placements) + " | auto / best forced |")
    print("| --- |" + " ---: |" * (len(placements) + 1))
    for name, _ in loads:
        cells = [f"{res[(pl, name)][0]:,.0f} ({res[(pl, name)][1]:,.0f}-{res[(pl, name)][2]:,.0f})"
                 for pl in placements]
        forced = [res[(pl, name)][0] for pl in placements if pl != "auto"]
        ratio = (f"{res[('auto', name)][0] / max(forced):.2f}x"
                 if "auto" in placements and forced else "-")
        print(f"| {name} | " + " | ".join(cells) + f" | {ratio} |")


if __name__ == "__main__":
    main()
