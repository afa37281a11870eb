#!/usr/bin/env python3
"""Clients holding very long multi-key `get` lines whose replies they never read.

50 connections each send one `get` line of 200,000 x ` big` (an 800 KB line; `big` is a
1000-byte value) and never read, so connection buffers go over --conn-buffer-mb and the
connections are throttled. Prints the server's CPU seconds per 10 s (from /proc) and a
victim client's `get big` latency.

Before the fix a worker re-parsed each held line on every throttle retry: 8-10 CPU-s per
10 s on epoll, 17 on io_uring (2 workers); after it 0.3-0.9. memcached 1.6.18 spends 12 CPU-s
in the first 10 s, then none (and grows to 1.3 GB RSS at -m 64).

usage: hostile-throttled-long-gets.py PID PORT [CONNECTIONS] [ROUNDS]
  (start the server first, e.g. `hkv -p 43100 -l 127.0.0.1 -m 64 -t 2 --io epoll`)
"""
import socket
import sys
import time


def cpu_seconds(pid):
    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / 100.0


def rss_mb(pid):
    for line in open(f"/proc/{pid}/status"):
        if line.startswith("VmRSS"):
            return int(line.split()[1]) // 1024
    return 0


def main():
    pid, port = int(sys.argv[1]), int(sys.argv[2])
    conns = int(sys.argv[3]) if len(sys.argv) > 3 else 50
    rounds = int(sys.argv[4]) if len(sys.argv) > 4 else 4
    s = socket.create_connection(("127.0.0.1", port))
    s.sendall(b"set big 0 0 1000\r\n" + b"x" * 1000 + b"\r\n")
    s.recv(100)
    line = b"get" + b" big" * 200_000 + b"\r\n"
    held = []
    for _ in range(conns):
        c = socket.create_connection(("127.0.0.1", port))
        c.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        c.sendall(line)
        held.append(c)
    for r in range(rounds):
        before = cpu_seconds(pid)
        time.sleep(10)
        lat = []
        for _ in range(20):
            t = time.time()
            v = socket.create_connection(("127.0.0.1", port))
            v.sendall(b"get big\r\n")
            got = b""
            while not got.endswith(b"END\r\n"):
                got += v.recv(4096)
            lat.append((time.time() - t) * 1000)
            v.close()
        lat.sort()
        print(f"t={10 * (r + 1)}s cpu/10s={cpu_seconds(pid) - before:.1f} rss={rss_mb(pid)}MB "
              f"victim get ms med={lat[10]:.1f} max={lat[-1]:.1f}", flush=True)


if __name__ == "__main__":
    main()
