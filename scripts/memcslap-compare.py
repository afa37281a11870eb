#!/usr/bin/env python3
"""hkv and memcached side by side under libmemcached's memcslap (Debian's libmemcached-tools;
a load generator hkv's authors did not write). Each round starts both servers fresh, runs
memcslap's `get` test against each (it stores --keys keys, then --concurrency threads each
read every key once, one request per round trip), then runs it --fills more times against the
same servers, so their memory (-m) evicts, and reports the keys each returned and the items it
holds. Rounds alternate which server goes first. Prints medians.

    python3 scripts/memcslap-compare.py [--rounds 3] [--keys 10000] [--concurrency 8]
        [--fills 3] [--threads 2] [-m 64] [--hkv PATH]
"""
import argparse
import os
import re
import socket
import statistics
import subprocess

from benchserver import free_port, start_listening

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
HKV = os.path.join(ROOT, "target/release/hkv")


def start(server, port, a):
    if server == "memcached":
        cmd = ["memcached", "-u", "root", "-l", "127.0.0.1", "-U", "0"]
    else:
        cmd = [a.hkv, "-l", "127.0.0.1"]
    cmd += ["-p", str(port), "-t", str(a.threads), "-m", str(a.m)]
    return start_listening(cmd, port, server)


def stat(port, name):
    s = socket.create_connection(("127.0.0.1", port))
    s.sendall(b"stats\r\n")
    buf = b""
    while not buf.endswith(b"END\r\n"):
        buf += s.recv(65536)
    s.close()
    m = re.search(rb"STAT " + name.encode() + rb" (\d+)", buf)
    return int(m.group(1))


def memcslap(port, a):
    out = subprocess.run(
        ["memcslap", "-s", f"127.0.0.1:{port}", "-t", "get", "-c", str(a.concurrency),
         "-e", str(a.keys)], capture_output=True, text=True, timeout=300).stdout
    m = re.search(r"Time to get\s+(\d+) keys by\s+\d+ threads:\s+([\d.]+) seconds", out)
    if not m:
        raise SystemExit(f"memcslap output not understood:\n{out}")
    return int(m.group(1)), float(m.group(2))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--keys", type=int, default=10000)
    ap.add_argument("--concurrency", type=int, default=8)
    ap.add_argument("--fills", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("-m", type=int, default=64)
    ap.add_argument("--hkv", default=HKV, help="the hkv binary (another build, to compare)")
    a = ap.parse_args()
    servers = ["hkv", "memcached"]
    res = {s: {"rate": [], "got": [], "items": [], "evictions": []} for s in servers}
    for r in range(a.rounds):
        for s in servers if r % 2 == 0 else servers[::-1]:
            port = free_port()
            p = start(s, port, a)
            try:
                got, secs = memcslap(port, a)
                res[s]["rate"].append(got / secs)
                want = a.keys * a.concurrency
                fills = [memcslap(port, a)[0] for _ in range(a.fills)]
                res[s]["got"].append(sum(fills) + got)
                res[s]["items"].append(stat(port, "curr_items"))
                res[s]["evictions"].append(stat(port, "evictions"))
                print(f"round {r} {s:9} {got / secs:>9.0f} gets/s, keys returned "
                      f"{got} then {fills} of {want} each, curr_items "
                      f"{res[s]['items'][-1]}, evictions {res[s]['evictions'][-1]}")
            finally:
                p.terminate()
                p.wait()
    want = a.keys * a.concurrency * (1 + a.fills)
    print(f"\nhkv: {a.hkv}; -m {a.m}, -t {a.threads}; memcslap -t get -c {a.concurrency} -e {a.keys}, run "
          f"{1 + a.fills} times per server; medians of {a.rounds} rounds\n")
    print("| server | gets/s (first run) | keys returned of " + f"{want:,}" +
          " | items held at the end | evictions |")
    print("| --- | ---: | ---: | ---: | ---: |")
    for s in servers:
        d = res[s]
        print(f"| {s} | {statistics.median(d['rate']):,.0f} | "
              f"{statistics.median(d['got']):,.0f} | {statistics.median(d['items']):,.0f} | "
              f"{statistics.median(d['evictions']):,.0f} |")
    h, m = (statistics.median(res[s]["rate"]) for s in servers)
    print(f"\nhkv / memcached: {h / m:.2f}x gets/s")


if __name__ == "__main__":
    main()
