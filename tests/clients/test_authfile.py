"""memcached's -Y (text protocol authentication) and -X (no dumps): hkv and memcached 1.6
given the same bytes answer the same, conversation by conversation."""
import socket
import struct

import pytest

from conftest import start_hkv, start_memcached


@pytest.fixture(scope="module")
def authfile(tmp_path_factory):
    p = tmp_path_factory.mktemp("auth") / "authfile"
    p.write_text("alice:secret\nbob:pw with spaces\n")
    return str(p)


@pytest.fixture(scope="module")
def pair(authfile):
    """hkv and memcached with the same -Y file (authentication is per connection)."""
    hkv = start_hkv("-Y", authfile, "-t", "2")
    mc = start_memcached("-Y", authfile)
    yield hkv, mc
    hkv.stop()
    mc.stop()


def converse(server, data, close_ok=False):
    with socket.create_connection(server.addr, timeout=5) as s:
        s.sendall(data)
        # A reply's first byte may be late on a loaded machine; then 0.5 s of silence ends it.
        s.settimeout(3)
        out = b""
        try:
            while True:
                chunk = s.recv(65536)
                if not chunk:
                    out += b"<closed>"
                    break
                out += chunk
                s.settimeout(0.5)
        except socket.timeout:
            pass
        return out


# One refusal per conversation: memcached 1.6.18 drops replies that queue up behind an
# authentication error (hkv answers each command; crates/server/tests/authfile.rs).
SCRIPTS = [
    b"get a\r\n",
    b"version\r\n",
    b"mn\r\n",
    b"bogus\r\n",
    b"delete a\r\n",
    b"set x 0 0 11\r\nalice wrong\r\n",
    b"set x 0 0 5\r\nalice\r\n",
    b"set x 0 0 3 \r\nabc\r\n",
    b"add x 0 0 12\r\nalice secret\r\n",
    b"set x 0 0 12\r\nalice secret\r\nget x\r\nset a 0 0 1\r\n1\r\nget a\r\nmn\r\n",
    b"set x 0 0 12 noreply\r\nalice secret\r\nget a\r\n",
    b"set x 0 0 13\r\nalice secret \r\nget a\r\n",
    b"set x 0 0 18\r\nbob pw with spaces\r\n",
    b"set x 0 0 12\r\nalice secret\r\nbogus\r\n",
    b"set x 0 0 12\r\nalice secret\r\nquit\r\n",
]


@pytest.mark.parametrize("script", SCRIPTS, ids=range(len(SCRIPTS)))
def test_authfile_like_memcached(pair, script):
    hkv, mc = pair
    assert converse(hkv, script) == converse(mc, script)


def test_binary_gets_no_service_without_authentication(authfile):
    hkv = start_hkv("-Y", authfile)
    try:
        version = struct.pack(">BBHBBHIIQ", 0x80, 0x0b, 0, 0, 0, 0, 0, 0, 0)
        # memcached -Y leaves a binary client unanswered; hkv hangs up on it.
        assert converse(hkv, version) == b"<closed>"
    finally:
        hkv.stop()


def test_no_dumping_like_memcached():
    script = (b"set a 0 0 1\r\n1\r\nstats cachedump 1 1\r\nlru_crawler metadump all\r\n"
              b"lru_crawler metadump 1\r\nstats cachedump x\r\n")
    hkv = start_hkv("-X")
    mc = start_memcached("-X")
    try:
        assert converse(hkv, script) == converse(mc, script)
        assert b"STAT dump_enabled no\r\n" in converse(hkv, b"stats settings\r\n")
    finally:
        hkv.stop()
        mc.stop()
