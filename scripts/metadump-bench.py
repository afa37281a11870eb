#!/usr/bin/env python3
"""Time of `lru_crawler metadump all` over N items (default 1M, 13-byte keys, 10-byte
values), hkv and memcached side by side in the same run, each -t 2 -m 1024, five dumps
each; prints the median and how many lines each dump listed (memcached's crawler may miss
items its LRU maintainer moves meanwhile).

    python3 scripts/metadump-bench.py [N]
"""
import os, socket, subprocess, sys, time, statistics

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
N = int(sys.argv[1]) if len(sys.argv) > 1 else 1_000_000
RUNS = 5
def start(cmd):
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    return p
def fill(port):
    s = socket.create_connection(("127.0.0.1", port))
    for base in range(0, N, 100_000):
        s.sendall(b"".join(b"set key:%09d 0 0 10 noreply\r\n0123456789\r\n" % i for i in range(base, min(N, base + 100_000))))
    s.sendall(b"mn\r\n"); d = b""
    while not d.endswith(b"MN\r\n"): d += s.recv(65536)
    return s
def dump(s):
    t = time.perf_counter(); s.sendall(b"lru_crawler metadump all\r\n"); n = 0; tail = b""
    while True:
        x = s.recv(1 << 20)
        n += x.count(b"\n")
        tail = (tail + x)[-8:]
        if tail.endswith(b"END\r\n"): break
    return time.perf_counter() - t, n - 1
res = {}
for name, cmd, port in [
    ("memcached", ["memcached", "-u", "root", "-p", "22199", "-U", "0", "-l", "127.0.0.1", "-m", "1024", "-t", "2"], 22199),
    ("hkv", [os.path.join(ROOT, "target/release/hkv"), "-p", "22198", "-l", "127.0.0.1", "-m", "1024", "-t", "2"], 22198),
]:
    p = start(cmd); time.sleep(0.5)
    s = fill(port)
    times = []; counts = []
    for _ in range(RUNS):
        dt, n = dump(s); times.append(dt); counts.append(n)
    p.kill(); p.wait()
    res[name] = statistics.median(times)
    print(f"{name}: {N} items, median of {RUNS} dumps {res[name]:.3f} s ({N/res[name]/1e6:.2f} M lines/s); runs {[round(t,3) for t in times]}; lines listed {counts}", flush=True)
print(f"hkv/memcached dump time: {res['hkv']/res['memcached']:.2f}x")
