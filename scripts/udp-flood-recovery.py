#!/usr/bin/env python3
"""A hostile UDP probe: 200 sockets flood the server for 3 s with 4-key gets of 500 KB
values (each a 2 MB reply), then a fresh UDP `mn` is sent every 50 ms until one is
answered. Prints how long after the flood UDP answered again, and `udp_stale_drops`.

    python3 scripts/udp-flood-recovery.py memcached
    python3 scripts/udp-flood-recovery.py hkv [hkv flags, e.g. --udp-max-wait-ms 0]

(HKV_BIN picks the hkv binary.) Both servers run 2 workers, -m 64, UDP on the TCP port."""
import os
import socket
import struct
import subprocess
import sys
import threading
import time

from benchserver import free_port

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
HKV = os.environ.get("HKV_BIN", os.path.join(ROOT, "target", "release", "hkv"))
which, extra = sys.argv[1], sys.argv[2:]
port = free_port()
common = ["-p", str(port), "-U", str(port), "-t", "2", "-l", "127.0.0.1", "-m", "64"]
cmd = ["memcached", "-u", "nobody"] + common if which == "memcached" else [HKV] + common + extra
server = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
try:
    time.sleep(0.7)
    tcp = socket.create_connection(("127.0.0.1", port))
    value = b"x" * 500_000
    for k in range(4):
        tcp.sendall(b"set big%d 0 0 %d\r\n" % (k, len(value)) + value + b"\r\n")
        assert tcp.recv(100) == b"STORED\r\n"
    flood = struct.pack(">HHHH", 1, 0, 1, 0) + b"get big0 big1 big2 big3\r\n"
    stop = time.time() + 3

    def send_flood():
        socks = [socket.socket(socket.AF_INET, socket.SOCK_DGRAM) for _ in range(100)]
        for s in socks:
            s.setblocking(False)
        while time.time() < stop:
            for s in socks:
                try:
                    s.sendto(flood, ("127.0.0.1", port))
                except OSError:
                    pass

    threads = [threading.Thread(target=send_flood) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    t0 = time.time()
    probe = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    probe.settimeout(0.05)
    answered = None
    i = 0
    while answered is None and time.time() - t0 < 30:
        i += 1
        probe.sendto(struct.pack(">HHHH", i, 0, 1, 0) + b"mn\r\n", ("127.0.0.1", port))
        try:
            while answered is None:
                if probe.recv(2048)[:2] == struct.pack(">H", i):
                    answered = time.time() - t0
        except socket.timeout:
            pass
    stale = ""
    if which != "memcached":
        tcp.sendall(b"stats hkv\r\n")
        reply = b""
        while not reply.endswith(b"END\r\n"):
            reply += tcp.recv(65536)
        stale = [l.decode() for l in reply.split(b"\r\n") if b"udp_stale_drops" in l][0]
    when = f"{answered:.2f} s" if answered is not None else "not within 30 s"
    print(f"{which} {' '.join(extra)}: UDP answered again {when} after the flood {stale}")
finally:
    server.kill()
