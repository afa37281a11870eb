#!/usr/bin/env python3
"""UDP GETs (issue 15): hkv with UDP GSO, hkv without it (`HKV_UDP_GSO=0`) and memcached
1.6, same worker threads, UDP on the TCP port. Two load generators:

- hkv-bench net --udp: closed loop, `--pipeline` datagrams in flight per socket (the load
  that batching on the server side is for), each sent with its own system call, or (the
  last row) 32 per call (one UDP GSO send) and received 32 per `recvmmsg` (`--udp-batch
  32`), as a client that batches its GETs sends them, a reply later than 50 ms counted lost
  and its slot reused (`--udp-lost-ms 50`): the client then costs less than the server;
- memcaslap (libmemcached-tools, not written here) over UDP: it waits for each reply.

100k K16 keys preloaded over TCP, 100% GET (memcaslap: its own 90% GET mix, 64-byte values).
Each server's CPU per operation is read from /proc over each run. The runs are interleaved
across the servers; the table gives medians and the run-to-run range.

    python3 scripts/udp-bench.py [--runs 3] [--seconds 3] [--threads 1] [--only-batched]
        [--before OTHER_HKV]
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
HKV = os.path.join(ROOT, "target/release/hkv")
BENCH = os.path.join(ROOT, "target/release/hkv-bench")
TICK = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK


def start(server, threads, port, before=None):
    env = dict(os.environ)
    if server == "memcached":
        cmd = ["memcached", "-u", "root", "-l", "127.0.0.1", "-p", str(port), "-U", str(port),
               "-t", str(threads), "-m", "1024"]
    else:
        cmd = [before if server == "hkv-before" else HKV, "-l", "127.0.0.1", "-p", str(port), "-U", str(port), "-t", str(threads),
               "-m", "1024"]
        env["HKV_UDP_GSO"] = "0" if server == "hkv-no-gso" else "1"
    p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    for _ in range(200):
        try:
            socket.create_connection(("127.0.0.1", port)).close()
            return p
        except OSError:
            time.sleep(0.02)
    raise SystemExit(f"{server} did not start")


def hkv_bench(port, pid, seconds, pipeline, batch=1):
    out = subprocess.run(
        [BENCH, "net", "--target", f"127.0.0.1:{port}", "--udp", "--workload", "c",
         "--dataset", "k16", "--keys", "100000", "--conns", "8", "--pipeline", str(pipeline),
         "--udp-batch", str(batch), "--udp-lost-ms", "1000" if batch == 1 else "50",
         "--duration", str(seconds), "--warmup", "1", "--runs", "1",
         "--server-pid", str(pid)],
        capture_output=True, text=True, check=True).stdout
    line = out.strip().splitlines()[-1]
    ops = float(re.search(r"([\d.]+) ops/s", line).group(1))
    cpu = float(re.search(r"server (\d+) ns CPU/op", line).group(1))
    errors = int(re.search(r"errors (\d+)", line).group(1))
    return ops, cpu, errors


def memcaslap(port, pid, seconds):
    # memcaslap over UDP needs the UDP port equal to the TCP one (every server gets -U PORT).
    before = cpu_seconds(pid)
    out = subprocess.run(
        ["memcaslap", "-s", f"127.0.0.1:{port}", "-t", f"{int(seconds)}s", "-c", "8",
         "-T", "1", "-X", "64", "-U"],
        capture_output=True, text=True).stdout
    cpu = cpu_seconds(pid) - before
    m = re.findall(r"Run time: [\d.]+s Ops: (\d+) TPS: (\d+)", out)
    if not m:
        raise SystemExit(f"memcaslap output not understood:\n{out}")
    ops, tps = map(int, m[-1])
    return tps, cpu / max(ops, 1) * 1e9, 0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=3.0)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--only-batched", action="store_true",
                    help="only the load with batched client calls (--udp-batch 32)")
    ap.add_argument("--before", metavar="HKV",
                    help="another hkv build (GSO on) run interleaved with the others, to compare")
    args = ap.parse_args()
    servers = ["hkv-gso", "hkv-no-gso", "memcached"]
    if args.before:
        servers.insert(1, "hkv-before")
    loads = [("hkv-bench --udp 8 sockets x 16 in flight", lambda p, pid: hkv_bench(p, pid, args.seconds, 16)),
             ("hkv-bench --udp 8 sockets x 64 in flight", lambda p, pid: hkv_bench(p, pid, args.seconds, 64)),
             ("memcaslap -U 8 conns (1 in flight each)", lambda p, pid: memcaslap(p, pid, args.seconds)),
             ("hkv-bench --udp 8 sockets x 64 in flight, 32 per send (GSO) and recvmmsg",
              lambda p, pid: hkv_bench(p, pid, args.seconds, 64, 32))]
    if args.only_batched:
        loads = loads[-1:]
    print(f"Server threads {args.threads}; median of {args.runs} runs of {args.seconds:g} s.\n")
    print("| load | " + " | ".join(servers) + " | hkv-gso / memcached |")
    print("| --- |" + " ---: |" * (len(servers) + 1))
    for name, load in loads:
        got = {s: [] for s in servers}
        for _ in range(args.runs):
            for s in servers:
                port = free_port()
                p = start(s, args.threads, port, args.before)
                try:
                    # hkv-bench preloads its keys over TCP; memcaslap loads its own.
                    got[s].append(load(port, p.pid))
                finally:
                    p.kill()
                    p.wait()
        cells = []
        med = {}
        for s in servers:
            ops = statistics.median(r[0] for r in got[s])
            cpu = statistics.median(r[1] for r in got[s])
            errs = sum(r[2] for r in got[s])
            med[s] = (ops, cpu)
            lo, hi = min(r[0] for r in got[s]), max(r[0] for r in got[s])
            cells.append(f"{ops:,.0f} ({lo:,.0f}-{hi:,.0f}), {cpu:,.0f} ns"
                         + (f", {errs} lost" if errs else ""))
        g, m = med["hkv-gso"], med["memcached"]
        ratio = f"{g[0] / max(m[0], 1):.2f}x ops, {g[1] / max(m[1], 1):.2f}x CPU"
        if args.before:
            b = med["hkv-before"]
            ratio += f"; against before {g[0] / max(b[0], 1):.2f}x ops, {g[1] / max(b[1], 1):.2f}x CPU"
        print(f"| {name} | " + " | ".join(cells) + f" | {ratio} |")


if __name__ == "__main__":
    main()
