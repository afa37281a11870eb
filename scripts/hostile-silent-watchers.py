"""A hostile probe: four `watch` clients that never read, 60,000 gets to fill their
streams, then the server's CPU over 5 idle seconds and its RSS.
usage: hostile-silent-watchers.py SERVER_BINARY (hkv or memcached)"""
import os, socket, subprocess, sys, time
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from benchserver import free_port
exe = sys.argv[1]; port = free_port()
cmd = [exe, '-p', str(port), '-l', '127.0.0.1', '-t', '2'] + (['-u', 'root'] if 'memcached' in exe else [])
p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
time.sleep(0.7)
def cpu():
    f = open(f'/proc/{p.pid}/stat').read().rsplit(')', 1)[1].split()
    return (int(f[11]) + int(f[12])) / os.sysconf('SC_CLK_TCK')
ws = []
for _ in range(4):
    w = socket.create_connection(('127.0.0.1', port)); w.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    w.sendall(b'watch fetchers mutations\r\n'); ws.append(w)
time.sleep(0.2)
c = socket.create_connection(('127.0.0.1', port))
keys = b' '.join(b'k%d' % i for i in range(200))
for _ in range(300):
    c.sendall(b'get ' + keys + b'\r\n'); g = b''
    while not g.endswith(b'END\r\n'): g += c.recv(1000)
time.sleep(0.5); a = cpu(); time.sleep(5); b = cpu()
rss = int(open(f'/proc/{p.pid}/status').read().split('VmRSS:')[1].split()[0]) // 1024
print(f'{exe}: {b - a:.2f} CPU s in 5 idle s, RSS {rss} MB')
p.kill()
