#!/usr/bin/env python3
"""Honest large SETs into a full cache: fills the server (-m 64 -t 2) with 7,000 items of
10 KB, then 8 clients each SET 40 values of 500 KB, sent in 64 KiB writes, each read back
at once. Prints the wall time, the server's CPU (from /proc), replies other than STORED,
read-your-write misses (values evicted by the other clients' stores before their GET),
corrupt values and `evictions`.
usage: large-sets-into-a-full-cache.py [hkv|memcached]
(HKV_BIN picks the hkv binary, HKV_ARGS adds flags.)"""
import os
import socket
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from benchserver import fill_items, start_peer

which = sys.argv[1] if len(sys.argv) > 1 else 'hkv'
CLIENTS, EACH, SIZE = 8, 40, 500_000
srv, port = start_peer(which, 1024)


def cpu():
    f = open(f'/proc/{srv.pid}/stat').read().rsplit(')', 1)[1].split()
    return (int(f[11]) + int(f[12])) / os.sysconf('SC_CLK_TCK')


refused, missed, corrupt = [], [], []


def client(n):
    s = socket.create_connection(('127.0.0.1', port))
    f = s.makefile('rb')
    for r in range(EACH):
        v = bytes([97 + (n + r) % 26]) * SIZE
        msg = b'set big%d_%d 0 0 %d\r\n' % (n, r, SIZE) + v + b'\r\n'
        for i in range(0, len(msg), 65536):
            s.sendall(msg[i:i + 65536])
        line = f.readline()
        if line != b'STORED\r\n':
            refused.append(line)
            continue
        s.sendall(b'get big%d_%d\r\n' % (n, r))
        head = f.readline()
        if not head.startswith(b'VALUE'):
            missed.append(head)
            continue
        got = f.read(SIZE + 2)
        f.readline()
        if got[:SIZE] != v:
            corrupt.append(r)


try:
    s, f = fill_items(port, 7000, prefix=b'fill')
    c0, t0 = cpu(), time.time()
    threads = [threading.Thread(target=client, args=(n,)) for n in range(CLIENTS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    c1, t1 = cpu(), time.time()
    s.sendall(b'stats\r\n')
    st = {}
    while (line := f.readline()) != b'END\r\n':
        st[line.split()[1].decode()] = line.split()[2].decode()
    print('%s: wall %.2f s, server CPU %.2f s; of %d SETs: %d refused %s, %d read-your-write '
          'misses, %d corrupt; evictions %s' % (
              which, t1 - t0, c1 - c0, CLIENTS * EACH, len(refused), set(refused) or '',
              len(missed), len(corrupt), st['evictions']))
finally:
    srv.terminate()
    srv.wait()
