#!/usr/bin/env python3
"""A hostile probe: N clients (4 KiB receive buffers) each send one of hkv's writes that answer
a copied value (`vupdate ... old`, `vfilter`; getset and meta `G` are planned alike) 50 times,
against four values of 900 KB, and never read. Prints the server's peak RSS (VmHWM), its connection buffers and
the CPU it spent while they waited, then whether an ordinary client is still served.
usage: hostile-unread-copied-values.py [N=600] [vupdate|vfilter]
(HKV_BIN picks the hkv binary, HKV_ARGS adds flags; -m 64 -t 2, --conn-buffer-mb 64.)"""
import os, resource, socket, sys, time
N = int(sys.argv[1]) if len(sys.argv) > 1 else 600
MODE = sys.argv[2] if len(sys.argv) > 2 else 'vupdate'
REQUESTS = {
    'vupdate': b'vupdate big%d u8 xor 0 old\r\n',
    'vfilter': b'vfilter big%d u8 ne 0\r\n',
}
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from benchserver import call as call_port, start_peer, status_mb
resource.setrlimit(resource.RLIMIT_NOFILE, (8192, 8192))
srv, PORT = start_peer('hkv', N + 24)
def status(field):
    return status_mb(srv.pid, field)
def cpu_ticks():
    return sum(int(x) for x in open(f'/proc/{srv.pid}/stat').read().rsplit(')', 1)[1].split()[11:13])
def call(req, end):
    return call_port(PORT, req, end)
try:
    admin = socket.create_connection(('127.0.0.1', PORT), timeout=10)
    for i in range(4):
        admin.sendall(b'set big%d 0 0 900000\r\n%s\r\n' % (i, b'\x01' * 900000)); admin.recv(100)
    before = status('VmRSS')
    hogs = []
    for i in range(N):
        c = socket.socket(); c.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        c.connect(('127.0.0.1', PORT)); c.setblocking(False)
        try: c.send((REQUESTS[MODE] % (i % 4)) * 50)
        except BlockingIOError: pass
        hogs.append(c)
    time.sleep(4)
    t0 = cpu_ticks(); time.sleep(4); waiting = (cpu_ticks() - t0) / 4  # ticks/s = % of a core
    st = call(b'stats hkv\r\n', b'END\r\n').decode()
    held = int(st.split('conn_buffer_bytes ')[1].split()[0]) >> 20
    t = time.time(); ok = call(b'set fresh 0 0 1\r\nx\r\nget fresh\r\n', b'END\r\n').endswith(b'x\r\nEND\r\n')
    print(f'{MODE} N={N}: RSS {before} -> {status("VmRSS")} MB, peak {status("VmHWM")} MB, '
          f'conn_buffer_bytes {held} MB, CPU while waiting {waiting:.0f}% of a core; '
          f'an ordinary set+get {"served" if ok else "FAILED"} in {(time.time() - t) * 1e3:.1f} ms')
    for c in hogs: c.close()
finally:
    srv.kill(); srv.wait()
