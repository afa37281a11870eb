#!/usr/bin/env python3
"""Random text and meta command scripts sent to memcached 1.6 and to hkv: the replies must
match (CAS values normalised as in tests/clients/test_differential.py).

    cargo build --release -p hkv-server
    python3 scripts/differential-fuzz.py --scripts 2000 [--seed N] [--hkv-args "--io epoll"]
    python3 scripts/differential-fuzz.py --binary ...     # binary protocol packets
    python3 scripts/differential-fuzz.py --udp [--binary] # the same over UDP; half the datagram
                                                          # pairs go as one UDP GSO send

Each script is a few commands over a handful of keys (some malformed on purpose: bad
numbers, missing or extra tokens, long keys, wrong data lengths, noreply), sent on a fresh
connection to each server, followed by `quit`. A script whose replies differ is shrunk
(commands dropped while the difference stays) and printed with both replies; the exit
status is the number of differing scripts found (at most --stop-after). Commands whose
answers depend on time, on the servers' own choices (stats, slab sizes, versions) or on
memcached bugs hkv does not copy are left out. A seed gives the same scripts only with the
generator of the same commit.
"""
import argparse
import os
import random
import re
import shutil
import socket
import struct
import subprocess
import sys
import time
import zlib

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
HKV = os.environ.get("HKV_BIN", os.path.join(ROOT, "target", "release", "hkv"))


def start_hkv(extra):
    udp = ["--udp-listen", "127.0.0.1:0"] if UDP else []
    proc = subprocess.Popen(
        [HKV, "-p", "0", "-l", "127.0.0.1", "-I", "2m", "-t", "2", *udp, *extra],
        stdout=subprocess.PIPE,
        text=True,
    )
    line = proc.stdout.readline()
    if "listening" not in line:
        raise SystemExit(f"hkv did not start: {line!r}")
    if UDP:
        line = proc.stdout.readline()
        if "udp on" not in line:
            raise SystemExit(f"hkv did not start UDP: {line!r}")
    return proc, int(line.strip().rsplit(":", 1)[1])


def start_memcached():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    exe = shutil.which("memcached")
    if not exe:
        raise SystemExit("memcached is not installed (Debian package `memcached`)")
    proc = subprocess.Popen(
        # Over UDP one thread: memcached's threads all read the one socket, so a client's
        # datagrams could be answered out of order.
        [exe, "-p", str(port), "-U", str(port) if UDP else "0", "-l", "127.0.0.1", "-I", "2m", "-t",
         "1" if UDP else "2", "-u", "root"]
    )
    for _ in range(100):
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return proc, port
        except OSError:
            time.sleep(0.05)
    raise SystemExit("memcached did not start")


def converse(port, data, quit=b"quit\r\n"):
    with socket.create_connection(("127.0.0.1", port), timeout=2) as s:
        s.sendall(data + quit)
        out = b""
        while True:
            try:
                chunk = s.recv(65536)
            except ConnectionResetError:
                break
            if not chunk:
                break
            out += chunk
        return out


VALUE_LINE = re.compile(rb"(VALUE \S+ \d+ |VA )(\d+)([^\r\n]*\r\n)")


def unpad(reply):
    """memcached pads a counter that an incr or decr shortened with spaces (in place, when
    nobody else holds the item); hkv stores the shorter number. protocol.txt allows both, so
    a value of digits and trailing spaces is compared without the spaces."""
    out, at = b"", 0
    for m in VALUE_LINE.finditer(reply):
        if m.start() < at:
            continue
        n = int(m.group(2))
        data = reply[m.end():m.end() + n]
        if re.fullmatch(rb"\d+ +", data):
            data = data.rstrip(b" ")
        out += reply[at:m.start()] + m.group(1) + b"%d" % len(data) + m.group(3) + data
        at = m.end() + n
    return out + reply[at:]


def normalise(reply):
    reply = unpad(reply)
    reply = re.sub(rb"(VALUE \S+ \d+ \d+) \d+", rb"\1 CAS", reply)
    reply = re.sub(rb" c\d+", b" cCAS", reply)
    # A TTL already past: memcached 1.6.18 prints it wrapped to 32 bits, hkv as t0.
    reply = re.sub(rb" t42949\d{5}", b" t0", reply)
    return reply


NUMBERS = [b"0", b"1", b"5", b"100", b"-1", b"x", b"18446744073709551615", b"18446744073709551616",
           b"4294967295", b"4294967296", b"007", b"+3", b"", b"1.5"]


def number(rng):
    return rng.choice(NUMBERS)


def length(rng, n):
    # 2^32 included: memcached 1.6.18 keeps a data length's low 32 bits (0 bytes), as hkv does.
    if rng.random() < 0.85:
        return str(n).encode()
    return rng.choice(NUMBERS)


def value_cmd(rng, verb, key):
    n = rng.choice([0, 1, 2, 3, 8])
    data = bytes(rng.choice(b"0123456789ab") for _ in range(n))
    # Past 2^32 too: memcached 1.6.18 keeps their low 32 bits, as hkv does.
    flags = rng.choice([b"0", b"0", b"7", b"4294967295", b"4294967297", b"-1", b"x"])
    parts = [verb, key, flags, b"0", length(rng, n)]
    if verb == b"cas":
        parts.append(rng.choice([b"1", b"0", b"99999999", b"x"]))
    if rng.random() < 0.15:
        parts.append(b"noreply")
    if rng.random() < 0.05:
        parts.append(b"extra")
    return b" ".join(parts) + b"\r\n" + data + b"\r\n"


# Opaques either side of memcached's 31-character limit.
OPAQUES = [b"O" + b"o" * 30, b"O" + b"o" * 31, b"O" + b"o" * 32]


def meta_flags(rng, pool):
    pool = pool + OPAQUES if rng.random() < 0.1 else pool
    # `b` on these keys (not base64): where the decoding error stands among the others.
    pool = pool + [b"b"] if rng.random() < 0.1 else pool
    # Now and then around memcached's limit on a line's tokens (ms takes a flag fewer).
    n = rng.randint(15, 19) if rng.random() < 0.05 else rng.randint(0, 4)
    return b"".join(b" " + rng.choice(pool) for _ in range(n))


def command(rng, keys):
    key = rng.choice(keys)
    r = rng.random()
    if r < 0.25:
        return value_cmd(rng, rng.choice([b"set", b"add", b"replace", b"append", b"prepend", b"cas"]), key)
    if r < 0.40:
        verb = rng.choice([b"get", b"gets"])
        return verb + b" " + b" ".join(rng.sample(keys, rng.randint(1, 3))) + b"\r\n"
    if r < 0.48:
        verb = rng.choice([b"incr", b"decr"])
        tail = b" noreply" if rng.random() < 0.1 else b""
        return verb + b" " + key + b" " + number(rng) + tail + b"\r\n"
    if r < 0.53:
        return b"delete " + key + rng.choice([b"", b"", b" noreply", b" 0", b" x"]) + b"\r\n"
    if r < 0.58:
        return b"touch " + key + b" " + rng.choice([b"0", b"100", b"x"]) + b"\r\n"
    if r < 0.62:
        return rng.choice([b"gat", b"gats"]) + b" " + rng.choice([b"0", b"100", b"x"]) + b" " + key + b"\r\n"
    if r < 0.72:
        # (Not E: newer than memcached 1.6.18, which refuses it.)
        flags = meta_flags(rng, [b"v", b"f", b"s", b"k", b"q", b"Oab", b"c", b"h", b"l", b"u", b"t",
                                 b"N30", b"R30", b"T30", b"T0", b"N0", b"R0", b"Nx", b"T-1"])
        return b"mg " + key + flags + b"\r\n"
    if r < 0.80:
        n = rng.choice([0, 1, 3])
        # (Not N: memcached 1.6.18 ignores ms MA N, protocol.txt's autovivify on append that
        # hkv implements. Not s: memcached 1.6.18 ignores it; protocol.txt and newer memcached answer the
        # stored size, as hkv does.)
        flags = meta_flags(rng, [b"F3", b"q", b"MA", b"MP", b"MR", b"ME", b"MS", b"I", b"k", b"Oxy", b"c", b"C1", b"T0",
                                 b"T30", b"MX", b"F-1", b"C0", b"f", b"t", b"v"])
        return b"ms " + key + b" " + length(rng, n) + flags + b"\r\n" + b"z" * n + b"\r\n"
    if r < 0.85:
        # (Not x: newer than memcached 1.6.18, which refuses it.)
        flags = meta_flags(rng, [b"q", b"k", b"Oab", b"C1", b"I", b"T0", b"T30", b"C0"])
        return b"md " + key + flags + b"\r\n"
    if r < 0.90:
        # (Not T: memcached 1.6.18 loses ma's T when the counter's length changes.)
        flags = meta_flags(rng, [b"v", b"N0", b"J7", b"D3", b"MI", b"MD", b"q", b"k", b"t", b"c", b"Ox", b"D-1", b"Dx",
                                 b"N30", b"C1", b"C0", b"J0", b"MX", b"D18446744073709551615"])
        return b"ma " + key + flags + b"\r\n"
    if r < 0.92:
        return b"mn\r\n"
    if r < 0.94:
        return rng.choice([b"flush_all\r\n", b"flush_all 0\r\n", b"flush_all noreply\r\n"])
    # Malformed lines. (Not a get of a too-long key: memcached 1.6.18 then drops the replies
    # queued before it, a bug hkv does not copy.)
    return rng.choice(
        [b"\r\n", b"get\r\n", b"set " + key + b"\r\n", b"incr\r\n", b"bogus " + key + b"\r\n",
         b"set " + b"k" * 251 + b" 0 0 1\r\nx\r\n", b"mg\r\n", b"ms " + key + b"\r\n", b"GET " + key + b"\r\n",
         b"set " + key + b" 0 0 1\r\nxy\r\n", b"delete " + key + b" 0 noreply\r\n"]
    )


# Keys are written with this placeholder prefix, replaced by a fresh one of the same length
# on every send, so that shrinking (which sends a script many times) starts from no items.
PLACEHOLDER = b"@@@@@@@@@@"


def counter_value(rng, key):
    v = rng.choice([b"12", b"0", b"18446744073709551615", b" 12", b"12 ", b"12abc", b"-5", b"+5",
                    b"00000000000000000000000001", b""])
    return b"set " + key + b" 0 0 %d\r\n" % len(v) + v + b"\r\n"


def odd_line(rng, key):
    # Framing and key edge cases. (No value of whitespace alone: memcached's incr reads past
    # such a value into whatever follows it in memory, answering a number or not.)
    return rng.choice(
        [b"get " + key + b"\n", b"set " + key + b" 0 0 1\nx\n", b"set " + key + b" 0 0 1\r\nx\n",
         b"set " + key + b"\t0 0 1\r\nx\r\n", b"get " + key + b"\x01\r\n",
         b"set " + key + b"\x7f 0 0 1\r\nx\r\n", b"set " + b"k" * 250 + b" 0 0 1\r\nx\r\n",
         b"mg " + b"k" * 251 + b" v\r\n", b"set " + key + b" 0 0 4\r\na\r\nb\r\n",
         b"get " + key + b" " + key + b" " + key + b"\r\n", b"Set " + key + b" 0 0 1\r\nx\r\n",
         b"ms " + key + b" 2 b\r\nhi\r\n", b"mg " + key + b" b v\r\n", b"mg Zm9v b v k\r\n",
         b"set " + key + b" 0 0 1 noreply\r\nx\r\nget " + key + b"\r\n"]
    )


def script(rng):
    keys = [PLACEHOLDER + k for k in (b"a", b"b", b"n")]
    cmds = []
    for _ in range(rng.randint(1, 8)):
        r = rng.random()
        if r < 0.1:
            cmds.append(counter_value(rng, rng.choice(keys)))
        elif r < 0.2:
            cmds.append(odd_line(rng, rng.choice(keys)))
        else:
            cmds.append(command(rng, keys))
    return cmds


BINARY = False
UDP = False


def answer(port, data):
    try:
        if BINARY:
            # QUIT: answered after everything before it, then the connection closes.
            return bin_packets(converse(port, data, bin_req(0x07, opaque=999)))
        return normalise(converse(port, data))
    except TimeoutError:
        return b"<no answer within 2 s>"


# ---- binary protocol (--binary) --------------------------------------------------------

SET_OPS = [0x01, 0x02, 0x03, 0x11, 0x12, 0x13]
ARITH_OPS = [0x05, 0x06, 0x15, 0x16]
GET_OPS = [0x00, 0x09, 0x0C, 0x0D]
GAT_OPS = [0x1D, 0x1E, 0x23, 0x24]
KEY_OPS = [0x04, 0x14, 0x0E, 0x0F, 0x19, 0x1A]


def bin_req(opcode, key=b"", extras=b"", value=b"", opaque=0, cas=0, magic=0x80):
    body = extras + key + value
    return struct.pack(">BBHBBHIIQ", magic, opcode, len(key), len(extras), 0, 0, len(body), opaque, cas) + body


def bin_command(rng, keys, opaque):
    key = rng.choice(keys)
    cas = rng.choice([0, 0, 0, 1, 0xFFFFFFFFFF])
    r = rng.random()
    if r < 0.3:
        op = rng.choice(SET_OPS)
        extras = struct.pack(">II", rng.choice([0, 5, 0xFFFFFFFF]), 0)
        if rng.random() < 0.05:
            extras = extras[: rng.choice([0, 4])]
        value = rng.choice([b"", b"1", b"12", b"abc", b"18446744073709551615", b" 7"])
        return bin_req(op, key, extras, value, opaque, cas)
    if r < 0.5:
        op = rng.choice(GET_OPS)
        extras = b"" if rng.random() < 0.95 else b"\0\0\0\0"
        return bin_req(op, key, extras, b"", opaque)
    if r < 0.65:
        op = rng.choice(ARITH_OPS)
        expiry = rng.choice([0, 0, 0xFFFFFFFF])
        extras = struct.pack(">QQI", rng.choice([0, 1, 7, 2**64 - 1]), rng.choice([0, 10]), expiry)
        if rng.random() < 0.05:
            extras = extras[:8]
        return bin_req(op, key, extras, b"", opaque, cas)
    if r < 0.75:
        op = rng.choice(KEY_OPS)
        value = b"" if op in (0x04, 0x14) else rng.choice([b"x", b"12"])
        return bin_req(op, key, b"", value, opaque, cas)
    if r < 0.83:
        op = rng.choice(GAT_OPS + [0x1C])
        return bin_req(op, key, struct.pack(">I", rng.choice([0, 100])), b"", opaque)
    if r < 0.88:
        return bin_req(0x0A, opaque=opaque)
    if r < 0.91:
        return bin_req(rng.choice([0x08, 0x18]), extras=rng.choice([b"", struct.pack(">I", 0)]), opaque=opaque)
    # Malformed: unknown opcode, a key where none belongs, a missing key, a value on a get.
    return rng.choice([
        # (An unknown opcode with a body: memcached 1.6.18 then stops answering.)
        bin_req(rng.choice([0x30, 0x55, 0xFE]), opaque=opaque),
        bin_req(0x0A, key, b"", b"", opaque),
        bin_req(0x00, b"", b"", b"", opaque),
        bin_req(0x00, key, b"", b"val", opaque),
        bin_req(0x01, b"", struct.pack(">II", 0, 0), b"v", opaque),
        bin_req(0x04, key, b"\0\0\0\0", b"", opaque),
        # Keys either side of 250 bytes.
        bin_req(0x00, b"k" * 250, b"", b"", opaque),
        bin_req(0x0C, b"k" * 251, b"", b"", opaque),
        bin_req(0x01, b"k" * 251, struct.pack(">II", 0, 0), b"v", opaque),
    ])


def bin_script(rng):
    keys = [PLACEHOLDER + k for k in (b"a", b"b", b"n")]
    return [bin_command(rng, keys, i + 1) for i in range(rng.randint(1, 8))]


def bin_packets(data):
    """The response stream as packets, CAS values as zero or not, the version text out."""
    out = []
    while len(data) >= 24:
        magic, opcode, keylen, extlen, _, status, bodylen, opaque, cas = struct.unpack(">BBHBBHIIQ", data[:24])
        body = data[24:24 + bodylen]
        if opcode == 0x0B:
            body = b"VERSION"
        if re.fullmatch(rb".*\d +", body, re.S):
            body = body.rstrip(b" ")  # a counter memcached padded (see unpad)
        out.append((magic, opcode, keylen, extlen, status, opaque, cas != 0, body))
        data = data[24 + bodylen:]
    return repr((out, data)).encode()


# ---- UDP (--udp) -----------------------------------------------------------------------


def udp_converse(port, cmds, together, strict):
    """Sends the commands over UDP with memcached's 8-byte frame header: all in one datagram
    (`together`) or one datagram each, each followed by an `mn` whose answer marks the end
    of the ones before. Returns the replies' payloads in order, request by request.

    memcached 1.6.18 sends every reply of a request (every key of a multi-key get, even) as
    a datagram of its own, each numbered 0 of 1; hkv sends a request's replies as one
    message, cut into datagrams numbered 0..n-1 of n, as protocol.txt describes. So the
    payloads are compared in sequence order (stable, for memcached's), and hkv's numbering
    (`strict`) is checked on its own."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.settimeout(2)
        s.connect(("127.0.0.1", port))
        out = b""
        groups = [b"".join(cmds)] if together else cmds
        for n, data in enumerate(groups):
            rid = 2 * n + 1
            first = struct.pack(">HHHH", rid, 0, 1, 0) + data
            marker = struct.pack(">HHHH", rid + 1, 0, 1, 0) + b"mn\r\n"
            if len(first) >= len(marker) and zlib.crc32(data) % 2 == 1:
                # Both datagrams in one UDP GSO send, as a client that batches sends them:
                # hkv (UDP GRO) receives them as one buffer and must cut it where the
                # kernel cut it for memcached.
                s.sendmsg([first, marker],
                           [(socket.SOL_UDP, UDP_SEGMENT, struct.pack("=H", len(first)))])
            else:
                s.send(first)
                s.send(marker)
            got = []
            while True:
                try:
                    d = s.recv(65536)
                except TimeoutError:
                    got = None
                    break
                r, seq, total, _ = struct.unpack(">HHHH", d[:8])
                if r == rid + 1:
                    break
                if r != rid:
                    out += b"<request id %d, expected %d>" % (r, rid)
                got.append((seq, total, d[8:]))
            if got is None:
                out += b"<no answer within 2 s>|"
                continue
            got.sort(key=lambda g: g[0])
            if strict and got and [(q, t) for q, t, _ in got] != [(i, len(got)) for i in range(len(got))]:
                out += b"<datagrams %r>" % [(q, t) for q, t, _ in got]
            payload = b"".join(p for _, _, p in got)
            out += (bin_packets(payload) if BINARY else payload) + b"|"
        return out


UDP_SEGMENT = 103  # linux/udp.h: the GSO segment size of a send


def whole_data_block(cmd):
    """Whether a storage command carries exactly the data block its line declares. Over UDP
    memcached 1.6.18 answers a datagram whose block is cut off with nothing, and keeps
    waiting for the rest in its next datagrams, from any client: such scripts are left out
    of --udp (hkv answers what ran, then CLIENT_ERROR bad data chunk; docs/protocol.md)."""
    line, sep, rest = cmd.partition(b"\r\n")
    tokens = line.split()
    if not sep or b"\n" in line or not tokens:
        return not tokens or tokens[0] not in STORAGE_VERBS
    if tokens[0] not in STORAGE_VERBS:
        return True
    at = 2 if tokens[0] == b"ms" else 4
    try:
        n = int(tokens[at])
    except (IndexError, ValueError):
        return False
    return 0 <= n < 2**31 and len(rest) == n + 2 and rest.endswith(b"\r\n")


STORAGE_VERBS = {b"set", b"add", b"replace", b"append", b"prepend", b"cas", b"ms"}


def differs(cmds, hkv_port, mc_port):
    if UDP:
        fresh = b"%010d" % random.randrange(10**10)
        # (Binary: one packet per datagram. memcached 1.6.18 drops the rest of a datagram
        # once it has answered a binary packet; hkv answers every packet in it.)
        together = (not BINARY and len(cmds) > 1 and sum(map(len, cmds)) < 1400
                    and zlib.crc32(b"".join(cmds)) % 2 == 0)
        cmds = [c.replace(PLACEHOLDER, fresh) for c in cmds]
        norm = (lambda r: r) if BINARY else normalise
        a = norm(udp_converse(hkv_port, cmds, together, True))
        b = norm(udp_converse(mc_port, cmds, together, False))
        # A datagram whose last command is cut off: memcached answers nothing at all, hkv
        # what ran and then CLIENT_ERROR bad data chunk (docs/protocol.md).
        ga, gb = a.split(b"|"), b.split(b"|")
        if len(ga) == len(gb):
            ga = [gb[i] if gb[i] == b"<no answer within 2 s>" and g.endswith(b"CLIENT_ERROR bad data chunk\r\n")
                  else g for i, g in enumerate(ga)]
            a = b"|".join(ga)
        return (a, b) if a != b else None
    data = b"".join(cmds).replace(PLACEHOLDER, b"%010d" % random.randrange(10**10))
    a, b = answer(hkv_port, data), answer(mc_port, data)
    return (a, b) if a != b else None


def shrink(cmds, hkv_port, mc_port):
    i = 0
    while i < len(cmds):
        trial = cmds[:i] + cmds[i + 1:]
        if trial and differs(trial, hkv_port, mc_port):
            cmds = trial
        else:
            i += 1
    return cmds


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--scripts", type=int, default=2000)
    ap.add_argument("--seed", type=int, default=int(time.time()))
    ap.add_argument("--stop-after", type=int, default=5)
    ap.add_argument("--hkv-args", default="")
    ap.add_argument("--binary", action="store_true", help="binary protocol packets instead")
    ap.add_argument("--udp", action="store_true", help="over UDP instead of TCP (text, or with --binary binary)")
    args = ap.parse_args()
    global BINARY, UDP
    BINARY = args.binary
    UDP = args.udp
    rng = random.Random(args.seed)
    hkv, hkv_port = start_hkv(args.hkv_args.split())
    mc, mc_port = start_memcached()
    found = 0
    try:
        for n in range(args.scripts):
            cmds = bin_script(rng) if BINARY else script(rng)
            if UDP and not BINARY:
                cmds = [c for c in cmds if whole_data_block(c)] or [b"mn\r\n"]
            first = differs(cmds, hkv_port, mc_port)
            if not first:
                continue
            shrunk = shrink(cmds, hkv_port, mc_port)
            again = differs(shrunk, hkv_port, mc_port)
            # A difference that does not come back (a timing one) is shown as first seen.
            (a, b), cmds, how = (again, shrunk, "differs") if again else (first, cmds, "differed once")
            found += 1
            print(f"--- script {n} (seed {args.seed}) {how}:\n{b''.join(cmds)!r}")
            print(f"    hkv:       {a!r}\n    memcached: {b!r}")
            if found >= args.stop_after:
                break
        print(f"{n + 1} scripts, {found} differing (seed {args.seed})")
    finally:
        for p in (hkv, mc):
            p.terminate()
            p.wait()
    sys.exit(min(found, 100))


if __name__ == "__main__":
    main()
