#!/usr/bin/env python3
"""DIDO task breakdown per request from `stats hkv` deltas (docs/BENCHMARKS.md): hkv -t 1 on
port 21950, hkv-bench net 4x16 for YCSB-C then YCSB-A. Run from the repository root after
`cargo build --release`."""
import socket,subprocess,time,sys
port=21950
p=subprocess.Popen(["./target/release/hkv","-p",str(port),"-t","1","-m","1024"],stdout=subprocess.DEVNULL,stderr=subprocess.DEVNULL)
time.sleep(0.4)
def stats():
    s=socket.create_connection(("127.0.0.1",port)); s.sendall(b"stats hkv\r\nstats\r\n"); d=b""
    while d.count(b"END\r\n")<2: d+=s.recv(65536)
    out={}
    for l in d.decode().split("\r\n"):
        if l.startswith("STAT "):
            _,k,v=l.split(" ",2); out[k]=v
    return out
subprocess.run(["./target/release/hkv-bench","net","--target",f"127.0.0.1:{port}","--keys","100000","--duration","1","--warmup","0","--runs","1"],capture_output=True)
print("| workload | requests | RV | PP | engine | of which IN | KC | RD | MM | WR | SD |")
print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
for w in ["c","a"]:
    a=stats()
    subprocess.run(["./target/release/hkv-bench","net","--target",f"127.0.0.1:{port}","--keys","100000","--conns","4","--pipeline","16","--duration","3","--warmup","0","--runs","1","--no-preload","--workload",w],capture_output=True)
    b=stats()
    n=(int(b["cmd_get"])-int(a["cmd_get"]))+(int(b["cmd_set"])-int(a["cmd_set"]))
    f=lambda k:(int(b[k])-int(a[k]))/n
    print(f"| YCSB-{w.upper()} text 4x16 | {n} | "+" | ".join(f"{f('task_'+t+'_ns'):.0f}" for t in ["rv","pp","engine","in","kc","rd","mm","wr","sd"])+" |")
p.terminate()
