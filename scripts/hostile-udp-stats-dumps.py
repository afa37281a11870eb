#!/usr/bin/env python3
"""UDP datagrams asking for `stats detail dump`, after UDP gets made the dump large.

Everything goes over UDP, so no connection is needed (the source could be spoofed): one
`stats detail on`, then 2,100 datagrams of `get` with five keys of 248 bytes each, each key
its own prefix of control bytes (10,000 prefixes, a 7.6 MB dump once escaped), then DATAGRAMS
datagrams of `stats detail dump` (27 bytes each) from 16 source ports. Meanwhile a TCP client
does a `get` every 200 ms. Prints the server's peak and final resident memory and how many of
the TCP client's gets took over a second. Then times three dumps over TCP (the build of the
dump holds the prefix table's lock, which every worker counting a request waits on).

Before the fix hkv built each datagram's dump whole, 64 datagrams a pass per worker: a
`-m 16 -t 2` server went to 1,035 MB, kept it, and held TCP clients for 25 s. Now a dump is
refused over UDP (`SERVER_ERROR out of memory writing stats`).

usage: hostile-udp-stats-dumps.py PID PORT UDPPORT [DATAGRAMS]
  (start the server first, e.g. `hkv -p 43120 -U 43121 -l 127.0.0.1 -m 16 -t 2`, or
   `memcached -p 43122 -U 43123 -l 127.0.0.1 -m 16 -t 2`)
"""
import socket
import struct
import sys
import threading
import time


def rss_mb(pid):
    for line in open(f"/proc/{pid}/status"):
        if line.startswith("VmRSS"):
            return int(line.split()[1]) // 1024
    return 0


def read_until(s, end):
    buf = b""
    while not buf.endswith(end):
        d = s.recv(1 << 20)
        if not d:
            break
        buf += d
    return buf


def main():
    pid, port, uport = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
    datagrams = int(sys.argv[4]) if len(sys.argv) > 4 else 4000
    target = ("127.0.0.1", uport)

    def send(sock, payload, rid=1):
        sock.sendto(struct.pack(">HHHH", rid & 0xFFFF, 0, 1, 0) + payload, target)

    u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    send(u, b"stats detail on\r\n")
    time.sleep(0.1)
    for i in range(0, 10500, 5):
        keys = ((b"%05d" % j) + b"\x01" * 243 + b":x" for j in range(i, i + 5))
        send(u, b"get " + b" ".join(keys) + b"\r\n")
        if i % 500 == 0:
            time.sleep(0.005)
    time.sleep(1)
    base = rss_mb(pid)

    slow, stop, peak = [0], [False], [base]

    def tcp_client():
        s = socket.create_connection(("127.0.0.1", port), timeout=30)
        while not stop[0]:
            t = time.time()
            s.sendall(b"get pingk\r\n")
            read_until(s, b"END\r\n")
            slow[0] += time.time() - t > 1.0
            peak[0] = max(peak[0], rss_mb(pid))
            time.sleep(0.2)

    t = threading.Thread(target=tcp_client, daemon=True)
    t.start()
    socks = [socket.socket(socket.AF_INET, socket.SOCK_DGRAM) for _ in range(16)]
    for i in range(datagrams):
        send(socks[i % 16], b"stats detail dump\r\n", i)
    time.sleep(10)
    stop[0] = True
    t.join(60)
    print(f"{datagrams} datagrams of 27 bytes: RSS before {base} MB, peak {peak[0]} MB, "
          f"after {rss_mb(pid)} MB; TCP gets over 1 s: {slow[0]}")
    s = socket.create_connection(("127.0.0.1", port), timeout=30)
    for _ in range(3):
        t0 = time.time()
        s.sendall(b"stats detail dump\r\n")
        n = len(read_until(s, b"END\r\n"))
        print(f"TCP stats detail dump: {n} bytes in {(time.time() - t0) * 1000:.0f} ms")


if __name__ == "__main__":
    main()
