#!/usr/bin/env python3
"""Large values (issue 14, chained items): hkv and memcached 1.6 side by side.

1. Items held: `-m 64 -I 32m`, 3000 small values (50 B - 4 KB), then one 30 MiB value;
   how many small ones each server still holds, and whether the large one reads back.
2. Time to SET and to GET one value of 1, 4, 16 and 48 MiB over one connection
   (`-m 256 -I 64m -t 2`), median of --runs, and the ratio hkv / memcached.
3. Memory while 20 clients are each half way through sending a 16 MiB value
   (`-m 1024 -I 32m -t 2`): the server's resident memory before and while they wait, and
   what it holds beyond the 160 MiB of value bytes received (hkv receives a large body
   straight into item memory, as memcached does, instead of buffering it whole).

    python3 scripts/large-values.py [--runs 5] [--hkv target/release/hkv]
"""
import argparse
import os
import shutil
import socket
import statistics
import subprocess
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start(kind, exe, args):
    port = free_port()
    if kind == "hkv":
        cmd = [exe, "-p", str(port), "-l", "127.0.0.1", "-U", "0", *args]
    else:
        user = ["-u", "root"] if os.geteuid() == 0 else []
        cmd = [shutil.which("memcached"), "-p", str(port), "-l", "127.0.0.1", "-U", "0",
               *user, *args]
    p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    for _ in range(500):
        try:
            socket.create_connection(("127.0.0.1", port)).close()
            return p, port
        except OSError:
            time.sleep(0.02)
    raise SystemExit(f"{kind} did not start")


def recv_until(s, end):
    buf = bytearray()
    while not buf.endswith(end):
        d = s.recv(1 << 20)
        if not d:
            break
        buf += d
    return bytes(buf)


def set_value(s, key, value):
    s.sendall(b"set %s 0 0 %d\r\n" % (key, len(value)) + value + b"\r\n")
    return recv_until(s, b"\r\n")


def get_value(s, key):
    s.sendall(b"get %s\r\n" % key)
    reply = recv_until(s, b"END\r\n")
    if not reply.startswith(b"VALUE"):
        return None
    head, rest = reply.split(b"\r\n", 1)
    n = int(head.split()[3])
    return rest[:n]


def items_held(kind, exe):
    p, port = start(kind, exe, ["-m", "64", "-I", "32m", "-t", "2"])
    try:
        s = socket.create_connection(("127.0.0.1", port))
        for i in range(3000):
            set_value(s, b"k%d" % i, os.urandom(50 + (i * 131) % 4000))
        big = os.urandom(30 << 20)
        stored = set_value(s, b"big", big).strip().decode()
        back = get_value(s, b"big") == big
        held = sum(1 for i in range(3000) if get_value(s, b"k%d" % i) is not None)
        return held, stored, back
    finally:
        p.terminate()
        p.wait()


def timings(kind, exe, runs):
    p, port = start(kind, exe, ["-m", "256", "-I", "64m", "-t", "2"])
    out = {}
    try:
        s = socket.create_connection(("127.0.0.1", port))
        for mb in (1, 4, 16, 48):
            value = os.urandom(mb << 20)
            sets, gets = [], []
            for _ in range(runs):
                t = time.perf_counter()
                assert set_value(s, b"v", value) == b"STORED\r\n"
                t1 = time.perf_counter()
                assert get_value(s, b"v") == value
                t2 = time.perf_counter()
                sets.append(t1 - t)
                gets.append(t2 - t1)
            out[mb] = (statistics.median(sets), statistics.median(gets))
        return out
    finally:
        p.terminate()
        p.wait()


def rss_kib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def slow_clients(kind, exe, clients=20, mb=16):
    p, port = start(kind, exe, ["-m", "1024", "-I", "32m", "-t", "2"])
    try:
        time.sleep(0.2)
        before = rss_kib(p.pid)
        half = os.urandom((mb << 20) // 2)
        socks = []
        for i in range(clients):
            s = socket.create_connection(("127.0.0.1", port))
            s.sendall(b"set slow%d 0 0 %d\r\n" % (i, mb << 20) + half)
            socks.append(s)
        time.sleep(1.0)
        during = rss_kib(p.pid)
        for s in socks:
            s.sendall(half + b"\r\n")
        stored = sum(recv_until(s, b"\r\n") == b"STORED\r\n" for s in socks)
        return before, during, stored
    finally:
        p.terminate()
        p.wait()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--hkv", default=os.path.join(ROOT, "target/release/hkv"))
    a = ap.parse_args()
    print("| server | small items held of 3000 | 30 MiB SET | read back whole |")
    print("| --- | ---: | --- | --- |")
    for kind, exe in (("hkv", a.hkv), ("memcached", None)):
        held, stored, back = items_held(kind, exe)
        print(f"| {kind} | {held} | {stored} | {back} |")
    print()
    t = {k: timings(k, e, a.runs) for k, e in (("hkv", a.hkv), ("memcached", None))}
    print(f"Median of {a.runs} round trips, one connection, ms:\n")
    print("| value | hkv SET | memcached SET | ratio | hkv GET | memcached GET | ratio |")
    print("| ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for mb in t["hkv"]:
        hs, hg = t["hkv"][mb]
        ms, mg = t["memcached"][mb]
        print(f"| {mb} MiB | {hs * 1e3:.1f} | {ms * 1e3:.1f} | {hs / ms:.2f}x | "
              f"{hg * 1e3:.1f} | {mg * 1e3:.1f} | {hg / mg:.2f}x |")
    print()
    print("20 clients half way through a 16 MiB value each (160 MiB received), MiB:\n")
    print("| server | RSS before | RSS while they wait | beyond the bytes received | stored |")
    print("| --- | ---: | ---: | ---: | ---: |")
    for kind, exe in (("hkv", a.hkv), ("memcached", None)):
        before, during, stored = slow_clients(kind, exe)
        beyond = (during - before) / 1024 - 160
        print(f"| {kind} | {before / 1024:.0f} | {during / 1024:.0f} | {beyond:.0f} | "
              f"{stored} of 20 |")


if __name__ == "__main__":
    main()
