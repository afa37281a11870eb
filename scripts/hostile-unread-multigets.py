#!/usr/bin/env python3
"""A hostile probe: N clients (4 KiB receive buffers) that send requests and never read the
replies, while an ordinary client keeps asking for one key. Prints how long the server took
to fill their sockets (and the CPU it spent), its CPU once the replies are stalled (% of a
core), its peak RSS, the reads it deferred, and the ordinary
client's GET latency (median and worst, ms).
  multiget: each client sends one `get` of 5,000 keys of 1 KB;
  pipeline: each client sends 3,000 x `get big` (2,000 bytes), over TLS with --tls.
usage: hostile-unread-multigets.py [N=500] [multiget|pipeline] [--tls]
(HKV_BIN picks the hkv binary; -m 64 -t 2.)"""
import os, resource, socket, ssl, statistics, subprocess, sys, tempfile, time
args = [a for a in sys.argv[1:] if not a.startswith('--')]
N = int(args[0]) if args else 500
MODE = args[1] if len(args) > 1 else 'multiget'
TLS = '--tls' in sys.argv
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from benchserver import free_port, start_listening, status_mb
resource.setrlimit(resource.RLIMIT_NOFILE, (8192, 8192))
hkv = os.environ.get('HKV_BIN', 'target/release/hkv')
port = free_port()
cmd = [hkv, '-p', str(port), '-l', '127.0.0.1', '-m', '64', '-t', '2', '-c', str(N + 64)]
ctx = None
if TLS:
    d = tempfile.mkdtemp()
    cert, key = f'{d}/cert.pem', f'{d}/key.pem'
    subprocess.run(['openssl', 'req', '-x509', '-newkey', 'rsa:2048', '-nodes', '-keyout', key,
                    '-out', cert, '-days', '1', '-subj', '/CN=localhost',
                    '-addext', 'subjectAltName=IP:127.0.0.1'], check=True, capture_output=True)
    cmd += ['-Z', '-o', f'ssl_chain_cert={cert},ssl_key={key}']
    ctx = ssl.create_default_context(cafile=cert)
srv = start_listening(cmd, port, 'hkv')


def connect(rcvbuf=None):
    s = socket.socket()
    if rcvbuf:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
    s.connect(('127.0.0.1', port))
    return ctx.wrap_socket(s, server_hostname='127.0.0.1') if ctx else s


def call(s, req, end):
    s.sendall(req)
    out = b''
    while not out.endswith(end):
        out += s.recv(1 << 20)
    return out


def stats(group=b''):
    with connect() as s:
        out = call(s, b'stats ' + group + b'\r\n', b'END\r\n').decode()
    return {l.split()[1]: l.split()[2] for l in out.splitlines() if l.count(' ') == 2}


def cpu_ticks():
    return sum(int(x) for x in open(f'/proc/{srv.pid}/stat').read().rsplit(')', 1)[1].split()[11:13])


try:
    admin = connect()
    if MODE == 'multiget':
        keys = [b'key%d' % i for i in range(5000)]
        call(admin, b''.join(b'set %s 0 0 1000 noreply\r\n%s\r\n' % (k, b'v' * 1000) for k in keys)
             + b'mn\r\n', b'MN\r\n')
        request = b'get ' + b' '.join(keys) + b'\r\n'
    else:
        call(admin, b'set big 0 0 2000\r\n' + b'x' * 2000 + b'\r\n', b'\r\n')
        request = b'get big\r\n' * 3000
    call(admin, b'set probe 0 0 1\r\np\r\n', b'\r\n')
    hogs = []
    for _ in range(N):
        c = connect(4096)
        c.setblocking(False)
        try:
            c.send(request)
        except (BlockingIOError, ssl.SSLWantWriteError):
            pass
        hogs.append(c)
    last = -1
    fill_t0, fill_c0 = time.time(), cpu_ticks()
    for _ in range(300):  # until the replies stop moving: every socket full
        time.sleep(1)
        written = int(stats()['bytes_written'])
        if written - last < 1 << 20:
            break
        last = written
    fill_s = time.time() - fill_t0
    fill_cpu = (cpu_ticks() - fill_c0) / 100
    t0 = cpu_ticks()
    lat = []
    end = time.time() + 5
    while time.time() < end:
        t = time.perf_counter()
        call(admin, b'get probe\r\n', b'END\r\n')
        lat.append((time.perf_counter() - t) * 1000)
        time.sleep(0.01)
    stalled = (cpu_ticks() - t0) / 5  # ticks/s = % of a core
    deferred = stats(b'hkv').get('deferred_reads', '?')
    print(f'{N} clients, {MODE}{" over TLS" if TLS else ""}: replies stalled after {fill_s:.0f} s '
          f'({fill_cpu:.1f} CPU s), CPU while stalled {stalled:.1f}% of a core, '
          f'peak RSS {status_mb(srv.pid, "VmHWM")} MB, deferred reads {deferred}, ordinary GET '
          f'median {statistics.median(lat):.2f} ms, worst {max(lat):.2f} ms')
finally:
    srv.kill()
    srv.wait()
