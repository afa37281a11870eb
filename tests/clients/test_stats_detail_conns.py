"""memcached's `stats detail on|off|dump` and `stats conns`, hkv beside memcached 1.6: the same
conversations get the same replies (per-prefix counters; the fields listed per connection)."""
import re
import socket
import time

import pytest

from conftest import start_hkv, start_memcached


@pytest.fixture(scope="module")
def pair():
    hkv = start_hkv("-t", "2")
    mc = start_memcached()
    yield hkv, mc
    hkv.stop()
    mc.stop()


def converse(server, data):
    with socket.create_connection(server.addr, timeout=5) as s:
        s.sendall(data)
        # A reply's first byte may be late on a loaded machine; then 0.4 s of silence ends it.
        s.settimeout(3)
        out = b""
        try:
            while True:
                chunk = s.recv(65536)
                if not chunk:
                    break
                out += chunk
                s.settimeout(0.4)
        except socket.timeout:
            pass
        return out


SCRIPTS = [
    b"stats detail dump\r\n",
    b"stats detail bogus\r\n",
    b"stats detail\r\n",
    b"stats detail on extra\r\n",
    # One prefix (memcached orders several by its hash table, so one keeps the dump exact).
    b"stats detail on\r\nset a:1 0 0 1\r\nx\r\nget a:1\r\nget a:2\r\nget nodelim\r\n"
    b"delete a:1\r\nadd a:3 0 0 1\r\ny\r\nstats detail dump\r\nstats detail off\r\n"
    b"get a:3\r\nstats detail dump\r\n",
    # Found by a differential probe (stop 57): gat and gats count as gets (hkv left them out;
    # gats is not here: its CAS differs between the servers).
    b"stats detail on\r\nset g:1 0 0 1\r\nx\r\ngat 100 g:1\r\ngat 100 g:1 g:2\r\n"
    b"stats detail dump\r\nstats detail off\r\n",
]


@pytest.mark.parametrize("script", SCRIPTS, ids=range(len(SCRIPTS)))
def test_stats_detail_like_memcached(pair, script):
    hkv, mc = pair
    assert converse(hkv, script) == converse(mc, script)


def test_stats_detail_counts_every_prefix(pair):
    hkv, mc = pair
    script = (b"stats detail on\r\nset p:1 0 0 1\r\nx\r\nset q:1 0 0 1\r\nx\r\nget p:1\r\n"
              b"get q:1\r\nget q:2\r\ndelete q:1\r\nstats detail dump\r\nstats detail off\r\n")
    lines = [set(l for l in converse(s, script).split(b"\r\n") if l.startswith(b"PREFIX"))
             for s in (hkv, mc)]
    assert lines[0] == lines[1]
    assert b"PREFIX q get 2 hit 1 set 1 del 1" in lines[0]


def conns_fields(server):
    out = converse(server, b"stats conns\r\n").decode()
    fields = {}
    for fd, name, value in re.findall(r"STAT (\d+):(\w+) (\S+)", out):
        fields.setdefault(fd, {})[name] = value
    return fields


def test_stats_conns_lists_listeners_and_clients_like_memcached(pair):
    for server in pair:
        with socket.create_connection(server.addr) as idle:
            idle.sendall(b"version\r\n")
            idle.recv(100)
            time.sleep(1.1)
            fields = conns_fields(server)
            port = f":{server.port}"
            listening = [f for f in fields.values() if f.get("state") == "conn_listening"]
            assert listening and all(f["addr"].endswith(port) for f in listening)
            clients = [f for f in fields.values() if "listen_addr" in f]
            assert len(clients) >= 2, fields
            me = f"tcp:127.0.0.1:{idle.getsockname()[1]}"
            mine = [f for f in clients if f["addr"] == me]
            assert len(mine) == 1, (me, fields)
            assert mine[0]["listen_addr"] == f"tcp:127.0.0.1{port}"
            assert set(mine[0]) == {"addr", "listen_addr", "state", "secs_since_last_cmd"}
            assert int(mine[0]["secs_since_last_cmd"]) >= 1
