#!/usr/bin/env python3
"""Two hostile loads on connection buffers, against a server this script starts.

burst:  N clients store a 1 MB value each at once, then send `version` on the same
        connection; counts the answers within 10 s, sockets left in CLOSE_WAIT after they
        close, and the server's buffers.
noread: N clients pipeline `get` of a 10 KB value for 5 s and never read; reports the
        server's RSS, `conn_buffer_bytes` (hkv), and its CPU while they wait.

    python3 scripts/buffer-probes.py --server target/release/hkv --probe burst --clients 200
    python3 scripts/buffer-probes.py --server memcached --probe noread --clients 400

docs/reliability.md and docs/BENCHMARKS.md quote what it printed.
"""
import argparse
import select
import socket
import subprocess
import time

PORT = 22399


def start(server, extra):
    if "memcached" in server:
        args = [server, "-u", "root", "-p", str(PORT), "-l", "127.0.0.1", "-t", "2", "-m", "64"]
    else:
        args = [server, "-p", str(PORT), "-l", "127.0.0.1", "-t", "2", "-m", "64"]
    p = subprocess.Popen(args + extra, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    for _ in range(100):
        try:
            socket.create_connection(("127.0.0.1", PORT)).close()
            return p
        except OSError:
            time.sleep(0.05)
    raise SystemExit("server did not start")


def call(req, end=b"END\r\n"):
    s = socket.create_connection(("127.0.0.1", PORT))
    s.sendall(req)
    buf = b""
    while not buf.endswith(end) and not buf.endswith(b"ERROR\r\n"):
        d = s.recv(65536)
        if not d:
            break
        buf += d
    s.close()
    return buf


def stat(name):
    for group in (b"stats\r\n", b"stats hkv\r\n"):
        for line in call(group).split(b"\r\n"):
            parts = line.split()
            if len(parts) == 3 and parts[1] == name.encode():
                return int(parts[2])
    return None


def rss_kb(pid):
    for line in open(f"/proc/{pid}/status"):
        if line.startswith("VmRSS"):
            return int(line.split()[1])


def cpu_ticks(pid):
    f = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return int(f[11]) + int(f[12])


def close_wait():
    out = subprocess.run(["ss", "-tan", "state", "close-wait", f"sport = :{PORT}"],
                         capture_output=True, text=True).stdout
    return max(0, len(out.strip().splitlines()) - 1)


def burst(n):
    conns = []
    for i in range(n):
        s = socket.create_connection(("127.0.0.1", PORT))
        s.setblocking(False)
        conns.append([s, b"set burst%d 0 0 1000000\r\n" % i + b"x" * 1000000 + b"\r\n", b""])
    deadline = time.time() + 30
    while time.time() < deadline and not all(c[2].endswith(b"\r\n") for c in conns):
        socks = [c[0] for c in conns]
        r, w, _ = select.select(socks, [c[0] for c in conns if c[1]], [], 0.5)
        for c in conns:
            if c[0] in w:
                try:
                    c[1] = c[1][c[0].send(c[1][:262144]):]
                except BlockingIOError:
                    pass
            if c[0] in r:
                try:
                    c[2] += c[0].recv(1000)
                except BlockingIOError:
                    pass
    stored = sum(c[2] == b"STORED\r\n" for c in conns)
    for c in conns:
        c[0].setblocking(True)
        c[0].sendall(b"version\r\n")
        c[2] = b""
    deadline = time.time() + 10
    while time.time() < deadline and not all(c[2].endswith(b"\r\n") for c in conns):
        r, _, _ = select.select([c[0] for c in conns], [], [], 0.5)
        for c in conns:
            if c[0] in r:
                c[2] += c[0].recv(1000)
    answered = sum(c[2].startswith(b"VERSION") for c in conns)
    for c in conns:
        c[0].close()
    time.sleep(2)
    print(f"burst: {stored} of {n} stored, {answered} of {n} answered `version` within 10 s; "
          f"after they closed: {close_wait()} sockets in CLOSE_WAIT, curr_connections "
          f"{stat('curr_connections')}, conn_buffer_bytes {stat('conn_buffer_bytes')}")


def noread(n, pid):
    call(b"set noread 0 0 10000\r\n" + b"v" * 10000 + b"\r\n", b"\r\n")
    socks = []
    for _ in range(n):
        s = socket.create_connection(("127.0.0.1", PORT))
        s.setblocking(False)
        socks.append(s)
    gets = b"get noread\r\n" * 1000
    t0 = time.time()
    while time.time() - t0 < 5:
        for s in socks:
            try:
                s.send(gets)
            except BlockingIOError:
                pass
        time.sleep(0.01)
    before = cpu_ticks(pid)
    time.sleep(2)
    ticks = cpu_ticks(pid) - before
    print(f"noread: {n} clients: RSS {rss_kb(pid) // 1024} MiB, conn_buffer_bytes "
          f"{stat('conn_buffer_bytes')}, CPU while they wait {ticks} ticks in 2 s")
    for s in socks:
        s.close()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--server", default="target/release/hkv")
    ap.add_argument("--probe", choices=["burst", "noread"], required=True)
    ap.add_argument("--clients", type=int, default=200)
    ap.add_argument("--server-args", default="", help="extra flags, e.g. '--io epoll'")
    a = ap.parse_args()
    p = start(a.server, a.server_args.split())
    try:
        if a.probe == "burst":
            burst(a.clients)
        else:
            noread(a.clients, p.pid)
    finally:
        p.kill()
        p.wait()


if __name__ == "__main__":
    main()
