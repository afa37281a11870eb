#!/usr/bin/env python3
"""A hostile probe: N clients (one thread each, 4 KiB receive buffers) pipeline a request
(`mn`: 4-byte replies) by the thousand and never read. Prints the server's RSS (and hkv's
connection buffers) after 3, 6 and 10 s, the CPU it used from 3 s to 10 s, and its RSS after every client has gone.
usage: hostile-unread-tiny-replies.py [hkv|memcached] [N=1000] [MB per client=5] [REQUEST=mn]
REQUEST is a text command (`stats`, `stats conns`, `version`, ...) or `bin:getkq250`, binary
GETKQ of a stored 250-byte key with a 100-byte value.
(HKV_BIN picks the hkv binary, HKV_ARGS adds flags such as `--io epoll`; IDLE=n opens n idle
connections first, which `stats conns` lists; raise `ulimit -n` for N past ~1000.)"""
import os, resource, socket, sys, threading, time
which = sys.argv[1] if len(sys.argv) > 1 else 'hkv'
N = int(sys.argv[2]) if len(sys.argv) > 2 else 1000
MB = int(sys.argv[3]) if len(sys.argv) > 3 else 5
REQUEST = sys.argv[4] if len(sys.argv) > 4 else 'mn'
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from benchserver import start_peer
resource.setrlimit(resource.RLIMIT_NOFILE, (8192, 8192))
srv, PORT = start_peer(which, 4096)
def rss():
    return int(open(f'/proc/{srv.pid}/status').read().split('VmRSS:')[1].split()[0]) // 1024
def cpu():
    f = open(f'/proc/{srv.pid}/stat').read().rsplit(')', 1)[1].split()
    return (int(f[11]) + int(f[12])) / os.sysconf('SC_CLK_TCK')
def buffers():
    if which != 'hkv': return ''
    s = socket.create_connection(('127.0.0.1', PORT), timeout=5); s.sendall(b'stats hkv\r\n'); r = b''
    while not r.endswith(b'END\r\n'): r += s.recv(65536)
    s.close()
    return ' '.join(l[5:].decode() for l in r.split(b'\r\n') if l.startswith(b'STAT conn_buffer_'))
KEY = b'H' * 250
if REQUEST == 'bin:getkq250':
    # magic, GETKQ, key length, no extras, no CAS: the key alone as the body.
    import struct
    one = struct.pack('>BBHBBHIIQ', 0x80, 0x0d, len(KEY), 0, 0, 0, len(KEY), 0, 0) + KEY
    c = socket.create_connection(('127.0.0.1', PORT), timeout=5)
    c.sendall(b'set ' + KEY + b' 0 0 100\r\n' + b'v' * 100 + b'\r\n')
    assert c.recv(100) == b'STORED\r\n'
    c.close()
else:
    one = REQUEST.encode() + b'\r\n'
unit = one * 1000
def push(c):
    sent = 0
    try:
        while sent < MB << 20:
            c.sendall(unit); sent += len(unit)
    except OSError:
        pass
try:
    idle = [socket.create_connection(('127.0.0.1', PORT)) for _ in range(int(os.environ.get('IDLE', '0')))]
    socks = []
    for _ in range(N):
        c = socket.create_connection(('127.0.0.1', PORT))
        c.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        socks.append(c)
        threading.Thread(target=push, args=(c,), daemon=True).start()
    start = time.time()
    for at in (3, 6, 10):
        time.sleep(max(0, start + at - time.time()))
        if at == 3: cpu3 = cpu()
        print(f'{which} {REQUEST} t={at}s RSS {rss()} MB {buffers()}', flush=True)
    print(f'{which} CPU from 3 s to 10 s: {cpu() - cpu3:.2f} s')
    for c in socks:
        try: c.shutdown(socket.SHUT_RDWR)
        except OSError: pass
        c.close()
    time.sleep(2)
    print(f'{which} 2 s after the clients closed: RSS {rss()} MB')
finally:
    srv.kill()
