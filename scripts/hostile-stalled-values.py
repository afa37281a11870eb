#!/usr/bin/env python3
"""A hostile probe: N clients each send `set k 0 0 1000000` and all but 600 bytes of the
value, then stall. Prints the server's RSS (and hkv's connection buffers) as they wait.
usage: hostile-stalled-values.py [hkv|memcached] [N=1000] [seconds=20] [value|get]
(`get`: each client sends a 900 KB multiget line without its newline instead.)
(HKV_BIN picks the hkv binary; raise `ulimit -n` for N past ~1000.)"""
import os, socket, subprocess, sys, time
which = sys.argv[1] if len(sys.argv) > 1 else 'hkv'
N = int(sys.argv[2]) if len(sys.argv) > 2 else 1000
SECS = int(sys.argv[3]) if len(sys.argv) > 3 else 20
GET_LINES = len(sys.argv) > 4 and sys.argv[4] == 'get'
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from benchserver import free_port
PORT = free_port()
if which == 'hkv':
    cmd = [os.environ.get('HKV_BIN', 'target/release/hkv'), '-p', str(PORT), '-l', '127.0.0.1', '-m', '64', '-t', '2', '-c', '1024']
else:
    cmd = ['/usr/bin/memcached', '-p', str(PORT), '-l', '127.0.0.1', '-U', '0', '-m', '64', '-t', '2', '-c', '1024', '-u', 'nobody']
srv = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
def mem():
    t = open(f'/proc/{srv.pid}/status').read()
    g = lambda k: int(t.split(k + ':')[1].split()[0]) // 1024
    return f'VmRSS={g("VmRSS")}MB VmHWM={g("VmHWM")}MB'
def hkv_stats():
    if which != 'hkv': return ''
    s = socket.create_connection(('127.0.0.1', PORT), timeout=5); s.sendall(b'stats hkv\r\n'); r = b''
    while not r.endswith(b'END\r\n'): r += s.recv(65536)
    s.close()
    return ' '.join(l[5:].decode() for l in r.split(b'\r\n') if l.startswith((b'STAT conn_buffer_bytes', b'STAT staged_bytes')))
try:
    for _ in range(50):
        try: socket.create_connection(('127.0.0.1', PORT), timeout=0.2).close(); break
        except OSError: time.sleep(0.1)
    print(which, 'start', mem())
    conns = []; data = b' k' * 450000 if GET_LINES else b'x' * 999400
    for i in range(N):
        s = socket.socket(); s.connect(('127.0.0.1', PORT)); s.setblocking(False)
        try:
            s.send(b'get' if GET_LINES else b'set half%d 0 0 1000000\r\n' % i)
            s.send(data)                                 # ... all but the end, then stall
        except BlockingIOError: pass
        conns.append(s)
    t0 = time.time()
    while time.time() - t0 < SECS:
        time.sleep(2); print(f' t={time.time()-t0:4.1f}s', mem(), hkv_stats())
    # an ordinary client is still served
    c = socket.create_connection(('127.0.0.1', PORT), timeout=5); t = time.time()
    c.sendall(b'set probe 0 0 1\r\nx\r\nget probe\r\n'); r = b''
    while not r.endswith(b'END\r\n'): r += c.recv(4096)
    print(' ordinary client set+get took %.4fs' % (time.time() - t))
    for s in conns: s.close()
    time.sleep(2); print(' 2 s after the clients closed:', mem(), hkv_stats())
finally:
    srv.kill(); srv.wait()
