"""SASL PLAIN over the binary protocol: hkv -S against memcached -S (Debian's memcached with
Cyrus SASL and a sasldb), byte for byte, and python-binary-memcached logging in."""
import os
import shutil
import socket
import struct
import subprocess
import time

import bmemcached
import pytest
from conftest import HKV, free_port, start_hkv
from test_differential import bin_packets, bin_req

USER, PASSWORD = "alice", "s3cret:with colon"


def wait_listening(proc, port):
    deadline = time.time() + 10
    while time.time() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            if proc.poll() is not None:
                raise RuntimeError("server exited at start")
            time.sleep(0.02)
    raise RuntimeError("server did not start")


@pytest.fixture
def memcached_sasl(tmp_path):
    if shutil.which("saslpasswd2") is None:
        raise RuntimeError("saslpasswd2 is not installed (Debian package sasl2-bin)")
    db = tmp_path / "sasldb2"
    subprocess.run(["saslpasswd2", "-a", "memcached", "-c", "-p", "-f", str(db), USER],
                   input=PASSWORD.encode(), check=True)
    (tmp_path / "memcached.conf").write_text(f"mech_list: plain\nsasldb_path: {db}\n")
    port = free_port()
    user = ["-u", "root"] if os.geteuid() == 0 else []
    proc = subprocess.Popen(["memcached", "-S", "-l", "127.0.0.1", "-p", str(port), "-U", "0", *user],
                            env={**os.environ, "SASL_CONF_PATH": str(tmp_path)},
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wait_listening(proc, port)
    yield ("127.0.0.1", port)
    proc.terminate()
    proc.wait(timeout=10)


@pytest.fixture
def hkv_sasl(tmp_path):
    pwdb = tmp_path / "pwdb"
    pwdb.write_text(f"{USER}:{PASSWORD}\n")
    s = start_hkv("-S", "--sasl-pwdb", str(pwdb), "-U", "0")
    yield s
    s.stop()


def converse(addr, data):
    with socket.create_connection(addr, timeout=5) as s:
        s.sendall(data)
        # A reply's first byte may be late on a loaded machine; then 0.5 s of silence ends it.
        s.settimeout(3)
        out = b""
        try:
            while True:
                chunk = s.recv(65536)
                if not chunk:
                    return out, True
                out += chunk
                s.settimeout(0.5)
        except socket.timeout:
            return out, False


PLAIN_OK = b"\0" + USER.encode() + b"\0" + PASSWORD.encode()
SET_EXTRAS = struct.pack(">II", 0, 0)

SCRIPTS = [
    # Before authenticating: VERSION and LIST_MECHS answer, anything else is refused and
    # the connection closed.
    bin_req(0x0B, opaque=1) + bin_req(0x20, opaque=2) + bin_req(0x00, b"k", opaque=3),
    bin_req(0x10, opaque=1),
    bin_req(0x0A, opaque=1),
    # A wrong password, another mechanism, a STEP: refused, the connection stays.
    bin_req(0x21, b"PLAIN", value=b"\0alice\0wrong", opaque=1) + bin_req(0x21, b"CRAM-MD5", value=b"x", opaque=2)
    + bin_req(0x22, b"PLAIN", value=PLAIN_OK, opaque=3) + bin_req(0x21, b"PLAIN", value=b"garbage", opaque=4)
    + bin_req(0x0B, opaque=5),
    # No mechanism: Invalid arguments, then closed.
    bin_req(0x21, b"", value=PLAIN_OK, opaque=1),
    # Logged in (also with an authzid): everything works.
    bin_req(0x21, b"PLAIN", value=PLAIN_OK, opaque=1) + bin_req(0x00, b"k", opaque=2)
    + bin_req(0x01, b"k", SET_EXTRAS, b"v", 3) + bin_req(0x00, b"k", opaque=4) + bin_req(0x0A, opaque=5),
    bin_req(0x21, b"PLAIN", value=USER.encode() + PLAIN_OK, opaque=1) + bin_req(0x0A, opaque=2),
    # Found by a hostile probe. Acting for another user (an authzid that is not the user):
    # refused, the connection stays.
    bin_req(0x21, b"PLAIN", value=b"bob" + PLAIN_OK, opaque=1) + bin_req(0x0A, opaque=2),
    # Before authenticating, an unknown opcode and a known one of the wrong shape are refused
    # as any other command is (hkv answered `Unknown command` and kept the connection).
    bin_req(0x50, opaque=1) + bin_req(0x0B, opaque=2),
    bin_req(0x00, b"k", b"xxxx", opaque=1) + bin_req(0x0B, opaque=2),
]


@pytest.mark.parametrize("script", SCRIPTS, ids=range(len(SCRIPTS)))
def test_same_sasl_replies_as_memcached(hkv_sasl, memcached_sasl, script):
    ours, ours_closed = converse(hkv_sasl.addr, script)
    theirs, theirs_closed = converse(memcached_sasl, script)
    assert bin_packets(ours) == bin_packets(theirs)
    assert ours_closed == theirs_closed


def test_text_meta_and_udp_are_refused_with_sasl(hkv_sasl):
    for req in [b"get k\r\n", b"mg k v\r\n", b"version\r\n"]:
        out, closed = converse(hkv_sasl.addr, req)
        assert (out, closed) == (b"", True)


def test_udp_is_refused_with_sasl(tmp_path):
    pwdb = tmp_path / "pwdb"
    pwdb.write_text(f"{USER}:{PASSWORD}\n")
    port = free_port()
    s = start_hkv("-S", "--sasl-pwdb", str(pwdb), "-U", str(port))
    try:
        u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        u.settimeout(1)
        for payload in [b"get k\r\n", bin_req(0x00, b"k", opaque=1)]:
            u.sendto(struct.pack(">HHHH", 1, 0, 1, 0) + payload, ("127.0.0.1", port))
            with pytest.raises(socket.timeout):
                u.recv(2000)
    finally:
        s.stop()


def test_python_binary_memcached_logs_in(hkv_sasl):
    c = bmemcached.Client([f"127.0.0.1:{hkv_sasl.port}"], USER, PASSWORD)
    assert c.set("a", b"1")
    assert c.get("a") == b"1"
    c.disconnect_all()
    bad = bmemcached.Client([f"127.0.0.1:{hkv_sasl.port}"], USER, "wrong")
    with pytest.raises(Exception):
        bad.set("a", b"2")
    good = bmemcached.Client([f"127.0.0.1:{hkv_sasl.port}"], USER, PASSWORD)
    assert good.get("a") == b"1"


def test_stats_count_sasl(hkv_sasl):
    c = bmemcached.Client([f"127.0.0.1:{hkv_sasl.port}"], USER, PASSWORD)
    c.set("a", b"1")
    stats = list(c.stats().values())[0]
    assert int(stats[b"auth_cmds"] if b"auth_cmds" in stats else stats["auth_cmds"]) >= 1


def test_regression_an_unauthenticated_too_large_set_deletes_nothing(hkv_sasl):
    """A review found it: a binary SET refused as too large unlinks its key's old value (as
    memcached does), and that unlink ran before the SASL gate, so a client that never
    authenticated could delete any key with one oversized SET header."""
    c = bmemcached.Client([f"127.0.0.1:{hkv_sasl.port}"], USER, PASSWORD)
    assert c.set("victim", b"kept")
    # Only the header and key of a 2 MiB SET: refused before its body arrives.
    header = struct.pack(">BBHBBHIIQ", 0x80, 0x01, 6, 8, 0, 0, 8 + 6 + (2 << 20), 1, 0)
    converse(hkv_sasl.addr, header + SET_EXTRAS + b"victim")
    assert c.get("victim") == b"kept"
    c.disconnect_all()
