#!/usr/bin/env python3
"""A hostile probe: fills the server (-m 64 -t 2) with 4,000 items of 10 KB, then N clients
each send the line of a SET of SIZE bytes and SENT bytes of its value (default 70 KB), and stop. Prints, after
2 s, the honest items left and `evictions` (and hkv's connection buffers), and what the
stalled clients were told.
usage: hostile-stalled-large-sets.py [hkv|memcached] [N=100] [SIZE=1000000] [SENT=70000]
(HKV_BIN picks the hkv binary, HKV_ARGS adds flags.)"""
import os
import resource
import socket
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from benchserver import fill_items, start_peer

resource.setrlimit(resource.RLIMIT_NOFILE, (8192, 8192))
which = sys.argv[1] if len(sys.argv) > 1 else 'hkv'
N = int(sys.argv[2]) if len(sys.argv) > 2 else 100
SIZE = int(sys.argv[3]) if len(sys.argv) > 3 else 1_000_000
SENT = int(sys.argv[4]) if len(sys.argv) > 4 else 70_000
srv, port = start_peer(which, 4096)


def stats(group=b''):
    s = socket.create_connection(('127.0.0.1', port), timeout=5)
    s.sendall(b'stats ' + group + b'\r\n')
    r = b''
    while not r.endswith(b'END\r\n'):
        r += s.recv(65536)
    s.close()
    return {l.split()[1].decode(): l.split()[2].decode()
            for l in r.split(b'\r\n') if l.startswith(b'STAT ')}


try:
    s, f = fill_items(port, 4000, prefix=b'h')
    stalled = []
    for i in range(N):
        c = socket.create_connection(('127.0.0.1', port))
        c.sendall(b'set att%d 0 0 %d\r\n' % (i, SIZE) + b'a' * SENT)
        c.setblocking(False)
        stalled.append(c)
    time.sleep(2)
    told = set()
    for c in stalled:
        try:
            told.add(c.recv(100))
        except BlockingIOError:
            told.add(b'')
    st = stats()
    extra = ''
    if which == 'hkv':
        extra = ' conn_buffer_bytes %s' % stats(b'hkv')['conn_buffer_bytes']
    print('%s: honest items %s of 4000, evictions %s%s; stalled clients told %s'
          % (which, st['curr_items'], st['evictions'], extra, told))
    for c in stalled:
        c.close()
finally:
    srv.terminate()
    srv.wait()
