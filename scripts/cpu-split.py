#!/usr/bin/env python3
"""Two servers side by side under the same pipelined load, their runs interleaved (A B, then
B A, ...), each run's server CPU per operation split into user and system time from /proc.
The development VM's noise moves a single figure by 15%; the ratio of the two servers'
medians, taken round by round, is what this is for (docs/BENCHMARKS.md).

    python3 scripts/cpu-split.py --a "target/release/hkv -t 1 -m 1024" \\
        --b "BASE/hkv -t 1 -m 1024" --protocol binary --rounds 8
    python3 scripts/cpu-split.py --b "memcached -u root -U 0 -t 1 -m 1024" \\
        --protocol binary --protocol-b meta

Each server is started on a free port and preloaded once; the load is hkv-bench net's
default (YCSB-B, K16, Zipf 0.99, 4 connections x 16 deep) unless extra arguments after `--`
say otherwise.
"""
import argparse
import os
import re
import socket
import statistics
import subprocess
import time

from benchserver import free_port

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BENCH = os.path.join(ROOT, "target/release/hkv-bench")
TICK = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid):
    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return int(fields[11]) / TICK, int(fields[12]) / TICK


def start(cmd, port):
    proc = subprocess.Popen(
        cmd.split() + ["-p", str(port)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    for _ in range(100):
        try:
            socket.create_connection(("127.0.0.1", port)).close()
            return proc
        except OSError:
            time.sleep(0.1)
    proc.kill()
    raise SystemExit(f"{cmd} did not start")


def load(port, protocol, seconds, extra, preload=False):
    args = [BENCH, "net", "--target", f"127.0.0.1:{port}", "--protocol", protocol]
    args += ["--duration", str(seconds), "--warmup", "0"] + extra
    if not preload:
        args.append("--no-preload")
    out = subprocess.run(args, capture_output=True, text=True).stdout
    m = re.search(r": (\d+) ops/s", out)
    if not m:
        raise SystemExit(f"no rate in hkv-bench output: {out}")
    return int(m.group(1))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--a", default=os.path.join(ROOT, "target/release/hkv") + " -t 1 -m 1024")
    ap.add_argument("--b", required=True)
    ap.add_argument("--protocol", default="binary")
    ap.add_argument("--protocol-b", help="B's protocol, if not A's")
    ap.add_argument("--rounds", type=int, default=8)
    ap.add_argument("--seconds", type=int, default=3)
    ap.add_argument("extra", nargs="*", help="more hkv-bench net arguments (after --)")
    a = ap.parse_args()
    protocols = {"A": a.protocol, "B": a.protocol_b or a.protocol}
    ports = {"A": free_port(), "B": free_port()}
    procs = {n: start(c, ports[n]) for n, c in (("A", a.a), ("B", a.b))}
    try:
        for n in "AB":
            load(ports[n], protocols[n], 1, a.extra, preload=True)
        runs = {"A": [], "B": []}
        for r in range(a.rounds):
            for n in ("A", "B") if r % 2 == 0 else ("B", "A"):
                u0, s0 = cpu_seconds(procs[n].pid)
                rate = load(ports[n], protocols[n], a.seconds, a.extra)
                u1, s1 = cpu_seconds(procs[n].pid)
                ops = rate * a.seconds
                runs[n].append((rate, (u1 - u0) * 1e9 / ops, (s1 - s0) * 1e9 / ops))
        print("| server | protocol | ops/s | user ns/op | system ns/op | CPU ns/op |")
        print("| --- | --- | ---: | ---: | ---: | ---: |")
        for n, cmd in (("A", a.a), ("B", a.b)):
            rs = runs[n]
            med = lambda i: statistics.median(x[i] for x in rs)
            total = statistics.median(x[1] + x[2] for x in rs)
            name = cmd.split()[0]
            print(f"| {n}: `{name}` | {protocols[n]} | {med(0):,.0f} | {med(1):.0f} | {med(2):.0f} | {total:.0f} |")
        ratio = lambda f: statistics.median(f(x) / f(y) for x, y in zip(runs["A"], runs["B"]))
        print()
        print(
            f"A / B, medians of the per-round ratios over {a.rounds} rounds of {a.seconds} s: "
            f"ops {ratio(lambda x: x[0]):.3f}, user CPU per op {ratio(lambda x: x[1]):.3f}, "
            f"CPU per op {ratio(lambda x: x[1] + x[2]):.3f}"
        )
    finally:
        for p in procs.values():
            p.terminate()
            p.wait()


if __name__ == "__main__":
    main()
