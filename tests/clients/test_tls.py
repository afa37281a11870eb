"""memcached's -Z (TLS), side by side with memcached 1.6 given the same certificate: a real
client (pymemcache with an ssl.SSLContext) gets the same results from both, raw
conversations over TLS answer byte for byte the same, and a plaintext client on the TLS
port is served by neither."""
import shutil
import socket
import ssl
import subprocess

import pytest
from pymemcache.client.base import Client

from conftest import start_hkv, start_memcached


@pytest.fixture(scope="module")
def cert(tmp_path_factory):
    if shutil.which("openssl") is None:
        raise RuntimeError("openssl is not installed (Debian package `openssl`)")
    d = tmp_path_factory.mktemp("tls")
    cert, key = str(d / "cert.pem"), str(d / "key.pem")
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", key,
         "-out", cert, "-days", "2", "-subj", "/CN=localhost",
         "-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1"],
        check=True, capture_output=True)
    return cert, key


@pytest.fixture(scope="module")
def pair(cert):
    opt = f"ssl_chain_cert={cert[0]},ssl_key={cert[1]}"
    hkv = start_hkv("-Z", "-o", opt, "-t", "2")
    mc = start_memcached("-Z", "-o", opt)
    yield hkv, mc
    hkv.stop()
    mc.stop()


def context(cert):
    ctx = ssl.create_default_context(cafile=cert[0])
    return ctx


def workload(client):
    """What an application does; returns everything it saw."""
    seen = []
    big = b"b" * 300_000
    seen.append(client.set("k", b"v", expire=0, noreply=False))
    seen.append(client.get("k"))
    seen.append(client.set("big", big, noreply=False))
    seen.append(client.get("big") == big)
    seen.append(client.set("n", b"10", noreply=False))
    seen.append(client.incr("n", 5))
    seen.append(client.decr("n", 20))
    seen.append(client.add("k", b"other", noreply=False))
    # memcached may pad a number that got shorter with spaces (protocol.txt allows it).
    seen.append({k: v.rstrip() for k, v in client.get_many(["k", "n", "missing"]).items()})
    seen.append(client.gets("k")[0])
    seen.append(client.delete("k", noreply=False))
    seen.append(client.get("k"))
    return seen


def test_pymemcache_over_tls_sees_what_it_sees_on_memcached(pair, cert):
    hkv, mc = pair
    results = []
    for server in (hkv, mc):
        c = Client(server.addr, tls_context=context(cert), connect_timeout=5, timeout=5)
        results.append(workload(c))
        c.close()
    assert results[0] == results[1]
    assert results[0][1] == b"v" and results[0][3] is True


def converse_tls(server, cert, data):
    with socket.create_connection(server.addr, timeout=5) as raw:
        with context(cert).wrap_socket(raw, server_hostname="localhost") as s:
            s.sendall(data)
            # A reply's first byte may be late on a loaded machine; then 0.5 s of silence ends it.
            s.settimeout(3)
            out = b""
            try:
                while True:
                    chunk = s.recv(65536)
                    if not chunk:
                        break
                    out += chunk
                    s.settimeout(0.5)
            except (socket.timeout, ssl.SSLError):
                pass
            return out


SCRIPTS = [
    b"set a 0 0 1\r\n1\r\nget a\r\nincr a 9\r\nget a\r\n",
    b"refresh_certs\r\n",
    b"bogus\r\nset x 0 0 2\r\nabc\r\nversionx\r\n",
    b"mn\r\nms m 2 T0\r\nhi\r\nmg m v s\r\n",
]


@pytest.mark.parametrize("script", SCRIPTS, ids=range(len(SCRIPTS)))
def test_tls_conversations_like_memcached(pair, cert, script):
    hkv, mc = pair
    assert converse_tls(hkv, cert, script) == converse_tls(mc, cert, script)


def test_plaintext_on_the_tls_port_is_served_by_neither(pair, cert):
    for server in pair:
        c = Client(server.addr, connect_timeout=5, timeout=2)
        with pytest.raises(Exception):
            c.set("plain", b"x", noreply=False)
        c.close()
    # Nothing the plaintext client sent was stored.
    for server in pair:
        c = Client(server.addr, tls_context=context(cert), connect_timeout=5, timeout=5)
        assert c.get("plain") is None
        c.close()


def test_refresh_certs_without_tls_like_memcached():
    hkv = start_hkv()
    mc = start_memcached()
    try:
        got = []
        for server in (hkv, mc):
            with socket.create_connection(server.addr, timeout=5) as s:
                s.sendall(b"refresh_certs\r\n")
                got.append(s.recv(1000))
        assert got[0] == got[1] == b"Error TLS not enabled\r\n"
    finally:
        hkv.stop()
        mc.stop()


def test_regression_a_pkcs8_key_under_an_rsa_label_loads_as_in_memcached(cert, tmp_path):
    # gomemcache's own TLS test writes such a key; OpenSSL (memcached) loads it by its
    # bytes, and rustls refused it by its label.
    body = open(cert[1]).read()
    assert "BEGIN PRIVATE KEY" in body, "openssl wrote PKCS#8"
    key = tmp_path / "mislabeled.pem"
    key.write_text(body.replace("PRIVATE KEY-----", "RSA PRIVATE KEY-----"))
    opt = f"ssl_chain_cert={cert[0]},ssl_key={key}"
    for start in (start_hkv, start_memcached):
        s = start("-Z", "-o", opt)
        try:
            c = Client(s.addr, tls_context=context(cert), connect_timeout=5, timeout=5)
            assert c.set("k", b"v", noreply=False)
            assert c.get("k") == b"v"
            c.close()
        finally:
            s.stop()


def tls_stats(server, cert, group=b""):
    out = converse_tls(server, cert, b"stats " + group + b"\r\n")
    return {l.split()[1]: l.split()[2] for l in out.decode().splitlines()
            if l.startswith("STAT ") and len(l.split()) == 3}


def test_regression_tls_clients_that_never_read_are_not_polled(cert):
    """A hostile probe: 900 TLS clients pipelining GETs and never reading kept the workers
    at 45% of a core with nothing moving: every throttled connection was retried every 5 ms
    with a write its full socket refused. A connection whose replies wait on its socket is
    now brought back by the socket's writability, not by the timer."""
    import time
    opt = f"ssl_chain_cert={cert[0]},ssl_key={cert[1]}"
    hkv = start_hkv("-Z", "-o", opt, "-t", "2", "-c", "1024")
    socks = []
    try:
        converse_tls(hkv, cert, b"set big 0 0 2000\r\n" + b"x" * 2000 + b"\r\n")
        for _ in range(600):
            raw = socket.create_connection(hkv.addr, timeout=5)
            raw.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            s = context(cert).wrap_socket(raw, server_hostname="localhost")
            s.setblocking(False)
            try:
                s.send(b"get big\r\n" * 3000)
            except (BlockingIOError, ssl.SSLWantWriteError):
                pass
            socks.append(s)
        # Until the replies stop moving: every socket full.
        last = -1
        for _ in range(40):
            time.sleep(0.5)
            written = int(tls_stats(hkv, cert)["bytes_written"])
            # Each look writes its own reply: a few KiB.
            if written - last < 64 << 10:
                break
            last = written
        before = int(tls_stats(hkv, cert, b"hkv")["conn_buffer_throttled"])
        time.sleep(2)
        grew = int(tls_stats(hkv, cert, b"hkv")["conn_buffer_throttled"]) - before
        # 600 connections retried every 5 ms for 2 s would be 240,000.
        assert grew < 3000, f"{grew} retries of stalled connections in 2 s"
    finally:
        for s in socks:
            s.close()
        hkv.stop()
