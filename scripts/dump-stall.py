#!/usr/bin/env python3
"""GETs of other clients while one client loops a dump command (`stats cachedump`,
`lru_crawler metadump`): each server preloaded with --keys K16 items, then hkv-bench net
(4 connections x 1, one client thread each) measures for 5 s with and without the loop.
Servers run interleaved, --rounds times; -t 2, -m 2048, TCP only.

    python3 scripts/dump-stall.py --server target/release/hkv --server BASE/hkv --memcached
    python3 scripts/dump-stall.py --server target/release/hkv --dump "lru_crawler metadump all"
"""
import argparse, os, re, socket, subprocess, threading, time

from benchserver import free_port

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BENCH = os.path.join(ROOT, "target/release/hkv-bench")


def ask(s, line):
    """Sends one command and reads its whole reply: `END` closes a dump, a crawl's reply is
    one line."""
    s.sendall(line)
    one_line = not line.startswith((b"stats", b"lru_crawler metadump"))
    buf = b""
    while not (buf.endswith(b"END\r\n") or (one_line and buf.endswith(b"\r\n"))):
        d = s.recv(1 << 20)
        if not d:
            break
        buf += d
    return buf


def one(argv, label, dump, args):
    p = free_port()
    srv = subprocess.Popen(argv + ["-p", str(p), "-m", "2048", "-t", "2", "-U", "0"],
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        for _ in range(100):
            try:
                socket.create_connection(("127.0.0.1", p)).close()
                break
            except OSError:
                time.sleep(0.1)
        target = ["--target", f"127.0.0.1:{p}", "--keys", str(args.keys)]
        subprocess.run([BENCH, "net", *target, "--duration", "1", "--warmup", "0"],
                       stdout=subprocess.DEVNULL, check=True)
        s = socket.create_connection(("127.0.0.1", p))
        s.settimeout(10)
        items = ask(s, b"stats items\r\n").decode()
        counts = [(int(m.group(2)), int(m.group(1)))
                  for m in re.finditer(r"STAT items:(\d+):number (\d+)", items)]
        cls = max(counts)[1]
        line = (args.dump or f"stats cachedump {cls} 100").encode() + b"\r\n"
        stop, took = threading.Event(), []

        def loop():
            while not stop.is_set():
                t = time.perf_counter()
                try:
                    ask(s, line)
                except socket.timeout:
                    print(f"{label}: no reply to {line!r} in 10 s", flush=True)
                    return
                took.append(time.perf_counter() - t)

        th = threading.Thread(target=loop)
        if dump:
            th.start()
        out = subprocess.run([BENCH, "net", *target, "--no-preload", "--conns", "4", "--threads",
                              "4", "--pipeline", "1", "--duration", "5", "--warmup", "1"],
                             capture_output=True, text=True, check=True).stdout
        stop.set()
        if dump:
            th.join()
        run = [l for l in out.splitlines() if l.startswith("run")][-1].split(":", 1)[1].strip()
        d = (f"dumps {len(took)} median {sorted(took)[len(took) // 2] * 1e3:.1f} ms"
             if took else "no dumps")
        if dump and args.dump and took:
            d += f" | last reply {ask(s, line)[:40]!r}"
        print(f"{label:12} dump={int(dump)} | {run} | {d}", flush=True)
    finally:
        srv.terminate()
        srv.wait()


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--server", action="append", default=[], help="an hkv binary (repeatable)")
    ap.add_argument("--memcached", action="store_true", help="memcached from PATH too")
    ap.add_argument("--keys", type=int, default=1_000_000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--dump", help="the looped command (default: stats cachedump <fullest class> 100)")
    args = ap.parse_args()
    servers = [([b], b) for b in args.server]
    if args.memcached:
        servers.append((["memcached", "-u", "root"], "memcached"))
    for _ in range(args.rounds):
        for argv, label in servers:
            for dump in (False, True):
                one(argv, label[-12:], dump, args)


if __name__ == "__main__":
    main()
