"""What the benchmark scripts share: a free port on 127.0.0.1, and a server started on it
and waited for until it accepts connections (stopped by the caller, by its PID)."""
import socket
import subprocess
import time


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def start_listening(cmd, port, name, tries=200, pause=0.02):
    """Starts `cmd` and returns its process once `port` accepts a connection."""
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    for _ in range(tries):
        try:
            socket.create_connection(("127.0.0.1", port)).close()
            return proc
        except OSError:
            time.sleep(pause)
    proc.kill()
    raise SystemExit(f"{name} did not start")


def start_peer(which, conns):
    """The hostile probes' server on a free port: hkv (HKV_BIN, with HKV_ARGS added) or
    memcached, with `-m 64 -t 2 -c CONNS`. Returns (process, port)."""
    import os
    port = free_port()
    flags = ['-p', str(port), '-l', '127.0.0.1', '-U', '0', '-m', '64', '-t', '2', '-c', str(conns)]
    if which == 'hkv':
        cmd = [os.environ.get('HKV_BIN', 'target/release/hkv'), *flags,
               *os.environ.get('HKV_ARGS', '').split()]
    else:
        cmd = ['/usr/bin/memcached', *flags, '-u', 'nobody']
    return start_listening(cmd, port, which), port


def fill_items(port, n, size=10_000, prefix=b'fill'):
    """Stores `n` items of `size` bytes (`<prefix><i>`), one at a time; returns the
    connection and its reader, for the caller's own commands."""
    import socket
    s = socket.create_connection(('127.0.0.1', port))
    f = s.makefile('rb')
    for i in range(n):
        s.sendall(b'set %s%d 0 0 %d\r\n%s\r\n' % (prefix, i, size, b'f' * size))
        f.readline()
    return s, f


def status_mb(pid, field):
    """A size field of /proc/PID/status (VmRSS, VmHWM) in MB."""
    with open(f'/proc/{pid}/status') as f:
        return int(f.read().split(field + ':')[1].split()[0]) // 1024


def call(port, req, end):
    """Sends `req` on a new connection and reads until the reply ends with `end`."""
    import socket
    s = socket.create_connection(('127.0.0.1', port), timeout=10)
    s.sendall(req)
    r = b''
    while not r.endswith(end):
        d = s.recv(1 << 20)
        if not d:
            break
        r += d
    s.close()
    return r
