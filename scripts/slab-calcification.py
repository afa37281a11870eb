#!/usr/bin/env python3
"""Slab calcification, the repro of stop 55's finding: on a fresh `-m 64 -t 2` server, one
client stores 600,000 100-byte values, then fresh 10 KB values for SECONDS, then reads back
the newest 2,000 (20 MB, under a third of -m). Without slab automove by age the 10 KB values
keep one page per partition (hkv before stop 55: 94 of 2,000 readable; memcached 1.6.18:
2,000). Usage: slab-calcification.py PORT SECONDS"""
import socket
import sys
import time

port, seconds = int(sys.argv[1]), float(sys.argv[2])
s = socket.create_connection(("127.0.0.1", port))
f = s.makefile("rb")


def sync():
    s.sendall(b"mn\r\n")
    while f.readline() != b"MN\r\n":
        pass


B = 10000
for i in range(0, 600000, B):
    s.sendall(b"".join(b"set a%d 0 0 100 noreply\r\n%s\r\n" % (j, b"a" * 100) for j in range(i, i + B)))
sync()
t, n = time.time(), 0
while time.time() - t < seconds:
    s.sendall(b"set b%d 0 0 10000 noreply\r\n%s\r\n" % (n, b"b" * 10000))
    n += 1
    if n % 500 == 0:
        sync()
sync()
hits = 0
for j in range(n - 2000, n):
    s.sendall(b"get b%d\r\n" % j)
    line = f.readline()
    if line.startswith(b"VALUE"):
        assert f.read(10002)[:10000] == b"b" * 10000
        assert f.readline() == b"END\r\n"
        hits += 1
s.sendall(b"stats\r\n")
st = {}
while (line := f.readline()) != b"END\r\n":
    p = line.split()
    st[p[1].decode()] = p[2].decode()
keep = ["curr_items", "bytes", "evictions", "slabs_moved", "slab_reassign_evictions"]
print(f"10 KB sets {n}; newest 2000 readable: {hits};", {k: st.get(k) for k in keep})
