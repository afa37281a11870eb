"""Bisects the largest value a server at PORT stores, per key length and flags, over the
text protocol or meta `ms` (memcached counts its item header, key, flags and CAS against -I).
usage: largest-value.py PORT [text|meta] [LIMIT=1048576]"""
import socket, sys
port=int(sys.argv[1]); proto=sys.argv[2] if len(sys.argv)>2 else 'text'
LIM=int(sys.argv[3]) if len(sys.argv)>3 else 1<<20
def ok(key, flags, n):
    s=socket.create_connection(('127.0.0.1',port))
    if proto=='text':
        s.sendall(b'set %s %d 0 %d\r\n' % (key, flags, n) + b'a'*n + b'\r\n')
    else:
        s.sendall(b'ms %s %d F%d\r\n' % (key, n, flags) + b'a'*n + b'\r\n')
    r=b''
    while not r.endswith(b'\r\n'): r+=s.recv(100)
    s.close()
    return r.startswith(b'STORED') or r.startswith(b'HD')
for key in (b'k', b'keyhere', b'k'*250):
  for flags in (0,1):
    lo,hi=0,LIM
    while lo<hi:
        m=(lo+hi+1)//2
        if ok(key,flags,m): lo=m
        else: hi=m-1
    print(proto, len(key), flags, lo, LIM-lo)
