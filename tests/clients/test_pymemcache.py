"""pymemcache, a widely used Python client, against hkv: every command it offers."""
import socket
import time

import pytest
from pymemcache.client.base import Client
from pymemcache.exceptions import MemcacheClientError, MemcacheServerError


@pytest.fixture
def client(hkv):
    c = Client(hkv.addr, connect_timeout=5, timeout=10)
    yield c
    c.close()


def raw(server, data, until=b"\r\n"):
    with socket.create_connection(server.addr, timeout=10) as s:
        s.sendall(data)
        out = b""
        while not out.endswith(until):
            chunk = s.recv(65536)
            if not chunk:
                break
            out += chunk
        return out


def test_set_get_delete(client):
    assert client.set("a", b"1", noreply=False)
    assert client.get("a") == b"1"
    assert client.get("missing") is None
    assert client.delete("a", noreply=False)
    assert client.get("a") is None
    assert not client.delete("a", noreply=False)


def test_flags_round_trip(client):
    client.set("f", b"x", noreply=False)
    result, flags = client.raw_command(b"get f", b"END")[0:2], None
    assert b"VALUE f 0 1" in client.raw_command(b"get f", b"END")
    client.set_many({"g": b"y"}, noreply=False)
    assert client.get("g") == b"y"


def test_multi_get(client):
    values = {f"k{i}": f"value-{i}".encode() for i in range(100)}
    assert client.set_many(values, noreply=False) == []
    got = client.get_many(list(values) + ["absent1", "absent2"])
    assert got == values


def test_noreply_then_read_your_writes(client):
    # pymemcache's default is noreply=True: the very next get must still see the write.
    for i in range(200):
        client.set(f"nr{i}", str(i).encode())
        assert client.get(f"nr{i}") == str(i).encode()


def test_add_replace_append_prepend(client):
    assert client.add("ar", b"mid", noreply=False)
    assert not client.add("ar", b"other", noreply=False)
    assert client.append("ar", b">", noreply=False)
    assert client.prepend("ar", b"<", noreply=False)
    assert client.get("ar") == b"<mid>"
    assert client.replace("ar", b"new", noreply=False)
    assert not client.replace("nope", b"x", noreply=False)
    assert client.get("ar") == b"new"


def test_cas_conflicts(client):
    client.set("c", b"1", noreply=False)
    value, token = client.gets("c")
    assert value == b"1"
    assert client.cas("c", b"2", token, noreply=False) is True
    # The same token again: the item changed since, so this must be refused.
    assert client.cas("c", b"3", token, noreply=False) is False
    assert client.get("c") == b"2"
    assert client.cas("never", b"x", token, noreply=False) is None
    values = client.gets_many(["c"])
    assert values["c"][0] == b"2"


def test_incr_decr_and_wrap_around(client):
    client.set("n", b"18446744073709551614", noreply=False)
    assert client.incr("n", 1) == 18446744073709551615
    assert client.incr("n", 2) == 1  # wraps at 2^64
    assert client.decr("n", 5) == 0  # stops at 0
    assert client.incr("missing", 1) is None
    client.set("t", b"text", noreply=False)
    with pytest.raises(MemcacheClientError):
        client.incr("t", 1)


def test_touch_and_expiry(client):
    client.set("e", b"v", expire=1, noreply=False)
    client.set("keep", b"v", expire=1, noreply=False)
    assert client.touch("keep", expire=100, noreply=False)
    assert not client.touch("absent", expire=100, noreply=False)
    time.sleep(2.1)
    assert client.get("e") is None
    assert client.get("keep") == b"v"


def test_values_up_to_the_item_size_limit(client):
    # memcached counts its item header (48), the key and NUL, the CRLF and CAS (8) against
    # -I 2m: 62 bytes under "big" with flags 0.
    big = b"x" * (2 * 1024 * 1024 - 62)
    assert client.set("big", big, noreply=False)
    assert client.get("big") == big
    with pytest.raises(MemcacheServerError):
        client.set("big", big + b"y", noreply=False)
    assert client.get("big") is None  # memcached drops the old value too


def test_flush_all(client):
    client.set_many({"x1": b"1", "x2": b"2"}, noreply=False)
    assert client.flush_all(noreply=False)
    assert client.get_many(["x1", "x2"]) == {}


def test_version_and_stats_fields_monitoring_scrapes(client):
    assert client.version().startswith(b"1.6")
    client.set("s", b"1", noreply=False)
    client.get("s")
    client.get("nope")
    stats = client.stats()
    for field in [b"pid", b"uptime", b"time", b"curr_connections", b"total_connections",
                  b"cmd_get", b"cmd_set", b"get_hits", b"get_misses", b"curr_items",
                  b"bytes", b"evictions", b"limit_maxbytes", b"threads", b"bytes_read",
                  b"bytes_written"]:
        assert field in stats, field
    assert stats[b"get_hits"] >= 1 and stats[b"get_misses"] >= 1
    assert stats[b"threads"] == 2
    settings = client.stats("settings")
    assert settings[b"item_size_max"] == 2 * 1024 * 1024
    slabs = client.stats("slabs")
    assert b"active_slabs" in slabs
    items = client.stats("items")
    assert any(k.startswith(b"items:") for k in items)


def test_gat_and_meta_over_the_wire(hkv):
    assert raw(hkv, b"set g 3 0 2\r\nhi\r\n") == b"STORED\r\n"
    assert raw(hkv, b"gat 100 g\r\n", b"END\r\n") == b"VALUE g 3 2\r\nhi\r\nEND\r\n"
    assert raw(hkv, b"mg g v f t\r\n", b"hi\r\n").startswith(b"VA 2 f3 t")
    assert raw(hkv, b"mn\r\n") == b"MN\r\n"


def test_many_clients_see_their_own_writes(hkv):
    clients = [Client(hkv.addr, connect_timeout=5, timeout=10) for _ in range(20)]
    for round_ in range(20):
        for i, c in enumerate(clients):
            c.set(f"own{i}", f"{round_}".encode())
        for i, c in enumerate(clients):
            assert c.get(f"own{i}") == f"{round_}".encode()
    for c in clients:
        c.close()
