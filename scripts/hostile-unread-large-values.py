#!/usr/bin/env python3
"""A hostile probe: N clients (4 KiB receive buffers) each send a get of K values of V bytes,
twice, and never read. Prints the server's peak RSS (VmHWM) and, for hkv, its connection
buffers, then whether an ordinary client is still served.
usage: hostile-unread-large-values.py [hkv|memcached] [N=1000] [get|mg]
(K and V from the environment, default 80 and 500000; HKV_BIN picks the hkv binary,
HKV_ARGS adds flags such as `--zero-copy-min 0`.)"""
import os, resource, socket, sys, time
which = sys.argv[1] if len(sys.argv) > 1 else 'hkv'
N = int(sys.argv[2]) if len(sys.argv) > 2 else 1000
MODE = sys.argv[3] if len(sys.argv) > 3 else 'get'
K, V = int(os.environ.get('K', '80')), int(os.environ.get('V', '500000'))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from benchserver import call as call_port, start_peer, status_mb
resource.setrlimit(resource.RLIMIT_NOFILE, (8192, 8192))
srv, PORT = start_peer(which, N + 24)
def status(field):
    return status_mb(srv.pid, field)
def call(req, end):
    return call_port(PORT, req, end)
try:
    admin = socket.create_connection(('127.0.0.1', PORT), timeout=10)
    for i in range(K):
        admin.sendall(b'set big%d 0 0 %d\r\n%s\r\n' % (i, V, b'v' * V)); admin.recv(100)
    keys = [b'big%d' % i for i in range(K)]
    req = b'get ' + b' '.join(keys) + b'\r\n' if MODE == 'get' else b''.join(b'mg %s v\r\n' % k for k in keys)
    hogs = []
    for _ in range(N):
        c = socket.socket(); c.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        c.connect(('127.0.0.1', PORT)); c.setblocking(False)
        try: c.send(req * 2)
        except BlockingIOError: pass
        hogs.append(c)
    time.sleep(6)
    held = ''
    if which == 'hkv':
        st = call(b'stats hkv\r\n', b'END\r\n').decode()
        held = ' conn_buffer_bytes %d MB' % (int(st.split('conn_buffer_bytes ')[1].split()[0]) >> 20)
    t = time.time(); ok = call(b'set fresh 0 0 1\r\nx\r\nget fresh\r\n', b'END\r\n').endswith(b'x\r\nEND\r\n')
    print(f'{which} {MODE} N={N}: RSS {status("VmRSS")} MB, peak {status("VmHWM")} MB{held}; '
          f'an ordinary set+get {"served" if ok else "FAILED"} in {(time.time() - t) * 1e3:.1f} ms')
    for c in hogs: c.close()
finally:
    srv.kill(); srv.wait()
