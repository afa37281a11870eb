#!/usr/bin/env python3
"""A value-size sweep under memory pressure (stop 55's hostile probe): NW client processes
write value sizes of 100 B, 10 KB, 500 KB, then 100 B again (+-20%), PHASE_S seconds each:
40% SETs of fresh keys, 10% overwrites, 50% GETs of each client's last 4 MB of keys. Every
value embeds its key and version and is checked in full; each phase's GET hit rate, the
server's RSS and `stats` are printed, and sampled keys of every phase are read back at the end.
Usage: size-sweep-soak.py PORT SERVER_PID PHASE_S NW TAG   (RSS samples: /tmp/rss_TAG.log)"""
import socket, sys, time, random, hashlib, json, os, multiprocessing as mp, collections
PORT=int(sys.argv[1]); PID=int(sys.argv[2]); PHASE_S=float(sys.argv[3]); NW=int(sys.argv[4]); TAG=sys.argv[5]
SIZES=[100,10_000,500_000,100]
WIN_BYTES=4<<20
class C:
    def __init__(s):
        s.s=socket.create_connection(('127.0.0.1',PORT)); s.s.setsockopt(socket.IPPROTO_TCP,socket.TCP_NODELAY,1); s.f=s.s.makefile('rb',buffering=1<<20)
    def set(s,k,v):
        s.s.sendall(b'set %s 0 0 %d\r\n'%(k,len(v))+v+b'\r\n'); return s.f.readline().strip()
    def get(s,k):
        s.s.sendall(b'get %s\r\n'%k); l=s.f.readline()
        if l==b'END\r\n': return None
        p=l.split()
        if p[0]!=b'VALUE': raise Exception('bad %r'%l)
        if p[1]!=k: return ('WRONGKEY',p[1])
        n=int(p[3]); d=s.f.read(n+2)[:n]; e=s.f.readline()
        assert e==b'END\r\n',e
        return d
    def cmd(s,c):
        s.s.sendall(c+b'\r\n'); out=b''
        while True:
            l=s.f.readline(); out+=l
            if l in (b'END\r\n',b'OK\r\n') or l.endswith(b'ERROR\r\n'): return out.decode()
def val(k,ver,n):
    h=b'%s|%d|'%(k,ver); d=hashlib.sha256(h).digest()
    return (h+d*(n//32+2))[:max(n,len(h))]
def worker(wid,t0,q):
    random.seed(wid); c=C(); ver={}; recent=collections.deque(); allk=[]; failed=set()
    ph=-1; st=None
    while time.time()<t0: time.sleep(0.01)
    while True:
        e=time.time()-t0; p=int(e//PHASE_S)
        if p!=ph:
            if st: q.put((wid,ph,st,allk[-3000:] if ph==len(SIZES)-1 or True else [], {k.decode():ver.get(k,0) for k in allk[-3000:]}))
            if p>=len(SIZES): break
            ph=p; st=collections.Counter(); recent.clear(); allk=[]; n=SIZES[p]; W=max(8,WIN_BYTES//n); i=0
        sz=int(n*random.uniform(0.8,1.2))
        r=random.random()
        if r<0.4 or not recent:
            k=b'w%d:p%d:%d'%(wid,ph,i); i+=1; v=ver[k]=0
            res=c.set(k,val(k,0,sz)); st['set']+=1
            if res==b'STORED': st['stored']+=1; recent.append(k); allk.append(k)
            else: st['set_err:'+res.decode()[:40]]+=1
            if st['set']<=20: st['first20_stored']+= (res==b'STORED')
            if len(recent)>W: recent.popleft()
        elif r<0.5:
            k=random.choice(recent); v=ver.get(k,0)+1; ver[k]=v
            res=c.set(k,val(k,v,sz)); st['oset']+=1
            if res==b'STORED': st['ostored']+=1; failed.discard(k)
            else: st['oset_err:'+res.decode()[:40]]+=1; ver[k]=v-1; failed.add(k)
        else:
            k=random.choice(recent); d=c.get(k); st['get']+=1
            if d is None: st['miss']+=1
            elif isinstance(d,tuple): st['WRONGKEY']+=1
            else:
                st['hit']+=1
                if k in failed: st['hit_after_failed_oset']+=1
                if not d.startswith(b'%s|%d|'%(k,ver.get(k,0))) or d!=val(k,ver.get(k,0),len(d)): st['CORRUPT']+=1; print('CORRUPT',k,d[:60],flush=True)
    # final verify: re-get stored sample keys of all phases
    q.put(('done',wid))
def rss(pid):
    for l in open('/proc/%d/status'%pid):
        if l.startswith('VmRSS'): return int(l.split()[1])//1024
def stats(c):
    out=c.cmd(b'stats'); d={}
    for l in out.splitlines():
        p=l.split()
        if len(p)==3: d[p[1]]=p[2]
    return d
if __name__=='__main__':
    q=mp.Queue(); t0=time.time()+1
    ps=[mp.Process(target=worker,args=(w,t0,q)) for w in range(NW)]
    [p.start() for p in ps]
    c=C(); peak=0; log=open('/tmp/rss_%s.log'%TAG,'w'); ph=0; res=[]; done=0; per=collections.defaultdict(collections.Counter); samples=collections.defaultdict(dict)
    while done<NW:
        try:
            m=q.get(timeout=2)
            if m[0]=='done': done+=1
            else:
                wid,p,st,keys,vers=m; per[p].update(st); samples[p].update(vers)
        except Exception: pass
        r=rss(PID); peak=max(peak,r); e=time.time()-t0
        log.write('%.0f %d\n'%(e,r)); log.flush()
        if e>=(ph+1)*PHASE_S+1.5 and ph<len(SIZES):
            s=stats(c)
            print(json.dumps(dict(tag=TAG,phase=ph,size=SIZES[ph],t=round(e),rss_mb=r,peak_mb=peak,**{k:s.get(k) for k in ['evictions','curr_items','bytes','limit_maxbytes','total_items','store_no_memory','store_too_large']})),flush=True)
            ph+=1
    for p in range(len(SIZES)):
        st=per[p]; hr=st['hit']/max(1,st['get'])
        print(TAG,'phase',p,SIZES[p],'hit_rate=%.3f'%hr,dict(st),flush=True)
    # end verification of sampled keys of each phase
    for p in range(len(SIZES)):
        h=m_=bad=wk=0
        for ks,v in samples[p].items():
            k=ks.encode(); d=c.get(k)
            if d is None: m_+=1
            elif isinstance(d,tuple): wk+=1
            else:
                h+=1
                if d!=val(k,v,len(d)): bad+=1; print('FINAL CORRUPT',k,d[:60])
        print(TAG,'final-verify phase',p,'keys',len(samples[p]),'hit',h,'miss',m_,'corrupt',bad,'wrongkey',wk)
    s=stats(c); print(TAG,'END rss',rss(PID),'peak',peak,{k:s.get(k) for k in ['evictions','curr_items','bytes','limit_maxbytes','total_items']})
