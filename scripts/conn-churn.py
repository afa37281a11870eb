#!/usr/bin/env python3
"""Connection storms: clients that connect, send one request, read the reply and close, as
clients without persistent connections do. Runs hkv (each worker accepting on its own socket,
and the acceptor thread handing connections over, on both loops) and memcached side by
side, and prints connections per second and the server's CPU per connection (from /proc, user + system), median of --runs rounds.

    python3 scripts/conn-churn.py [--hkv target/release/hkv] [--hkv-before OTHER] [--procs 2]

The clients are Python processes on the same machine: on a small machine they, not the
server, set the rate, which is why CPU per connection is the figure to compare.
"""
import argparse
import importlib.util
import multiprocessing
import os
import socket
import statistics
import subprocess
import time

# free_port and cpu_seconds are network-bench.py's.
_spec = importlib.util.spec_from_file_location(
    "network_bench", os.path.join(os.path.dirname(os.path.abspath(__file__)), "network-bench.py"))
network_bench = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(network_bench)
free_port = network_bench.free_port
cpu_seconds = network_bench.cpu_seconds


def storm(port, seconds, out):
    n = 0
    end = time.time() + seconds
    while time.time() < end:
        s = socket.create_connection(("127.0.0.1", port))
        s.sendall(b"get churn\r\n")
        buf = b""
        while not buf.endswith(b"END\r\n"):
            chunk = s.recv(4096)
            if not chunk:
                raise RuntimeError("server closed the connection")
            buf += chunk
        s.close()
        n += 1
    out.put(n)


def wait_port(port):
    for _ in range(200):
        try:
            socket.create_connection(("127.0.0.1", port)).close()
            return
        except OSError:
            time.sleep(0.025)
    raise RuntimeError(f"nothing listens on {port}")


def measure(cmd, port, procs, seconds):
    server = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_port(port)
        q = multiprocessing.Queue()
        t0, c0 = time.time(), cpu_seconds(server.pid)
        ps = [multiprocessing.Process(target=storm, args=(port, seconds, q)) for _ in range(procs)]
        for p in ps:
            p.start()
        total = sum(q.get() for _ in ps)
        for p in ps:
            p.join()
        dt, dc = time.time() - t0, cpu_seconds(server.pid) - c0
        return total / dt, dc / total * 1e6
    finally:
        server.terminate()
        server.wait()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--hkv", default="target/release/hkv")
    ap.add_argument("--procs", type=int, default=2)
    ap.add_argument("--seconds", type=float, default=5)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--hkv-before", help="another hkv build to compare (its default loop)")
    ap.add_argument("--ab", action="store_true",
                    help="only --hkv and --hkv-before, both on their default loop, their order "
                         "alternating from round to round; prints every round")
    a = ap.parse_args()
    if a.ab:
        ab(a)
        return
    servers = {
        "hkv --io uring": lambda p: [a.hkv, "-p", str(p), "-l", "127.0.0.1", "-t", str(a.threads), "--io", "uring"],
        "hkv --io epoll": lambda p: [a.hkv, "-p", str(p), "-l", "127.0.0.1", "-t", str(a.threads), "--io", "epoll"],
        "hkv --io uring --accept acceptor": lambda p: [a.hkv, "-p", str(p), "-l", "127.0.0.1", "-t", str(a.threads), "--io", "uring", "--accept", "acceptor"],
        "hkv --io epoll --accept acceptor": lambda p: [a.hkv, "-p", str(p), "-l", "127.0.0.1", "-t", str(a.threads), "--io", "epoll", "--accept", "acceptor"],
        "memcached": lambda p: ["memcached", "-u", "root", "-p", str(p), "-l", "127.0.0.1", "-t", str(a.threads), "-U", "0"],
    }
    if a.hkv_before:
        servers["hkv before"] = lambda p: [a.hkv_before, "-p", str(p), "-l", "127.0.0.1", "-t", str(a.threads)]
    results = {name: [] for name in servers}
    for _ in range(a.runs):
        for name, cmd in servers.items():
            port = free_port()
            results[name].append(measure(cmd(port), port, a.procs, a.seconds))
    print(f"| server | connections/s | server CPU per connection (us) |  ({a.procs} client processes, {a.runs} runs, medians)")
    print("| --- | ---: | ---: |")
    for name, rs in results.items():
        rate = statistics.median(r[0] for r in rs)
        cpu = statistics.median(r[1] for r in rs)
        print(f"| {name} | {rate:,.0f} | {cpu:.1f} |")


def ab(a):
    if not a.hkv_before:
        raise SystemExit("--ab needs --hkv-before")
    builds = {"--hkv": a.hkv, "--hkv-before": a.hkv_before}
    results = {name: [] for name in builds}
    for r in range(a.runs):
        for name in (list(builds) if r % 2 == 0 else list(reversed(builds))):
            port = free_port()
            cmd = [builds[name], "-p", str(port), "-l", "127.0.0.1", "-t", str(a.threads)]
            results[name].append(measure(cmd, port, a.procs, a.seconds))
    print(f"| build | connections/s | server CPU per connection (us) | every round (us) |  ({a.procs} client processes, {a.runs} runs, medians)")
    print("| --- | ---: | ---: | --- |")
    for name, rs in results.items():
        rate = statistics.median(r[0] for r in rs)
        cpu = statistics.median(r[1] for r in rs)
        rounds = ", ".join(f"{r[1]:.1f}" for r in rs)
        print(f"| {name} {builds[name]} | {rate:,.0f} | {cpu:.1f} | {rounds} |")


if __name__ == "__main__":
    main()
