"""python-binary-memcached, a client that speaks only the binary protocol, against hkv:
every command it offers."""
import time

import bmemcached
import pytest


@pytest.fixture
def client(hkv):
    c = bmemcached.Client([f"127.0.0.1:{hkv.port}"])
    yield c
    c.disconnect_all()


def test_set_get_delete(client):
    assert client.set("a", b"1")
    assert client.get("a") == b"1"
    assert client.get("missing") is None
    assert client.delete("a")
    assert client.get("a") is None
    # This client reports True for deleting a missing key too (it only refuses on EXISTS).
    assert client.delete("a")


def test_typed_values_keep_their_flags(client):
    client.set("s", "text")
    client.set("i", 42)
    client.set("d", {"x": [1, 2]})
    assert client.get("s") == "text"
    assert client.get("i") == 42
    assert client.get("d") == {"x": [1, 2]}


def test_multi_get_and_multi_set(client):
    values = {f"k{i}": f"v{i}".encode() for i in range(50)}
    client.set_multi(values)
    got = client.get_multi(list(values) + ["absent"])
    assert got == values
    client.delete_multi(list(values)[:10])
    assert client.get("k0") is None and client.get("k10") == b"v10"


def test_add_replace(client):
    assert client.add("ar", b"1")
    assert not client.add("ar", b"2")
    assert client.replace("ar", b"3")
    assert not client.replace("nope", b"3")
    assert client.get("ar") == b"3"


def test_cas(client):
    client.set("c", b"1")
    value, cas = client.gets("c")
    assert value == b"1" and cas
    assert client.cas("c", b"2", cas)
    assert not client.cas("c", b"3", cas)
    assert client.get("c") == b"2"


def test_incr_decr(client):
    client.set("n", b"10")
    assert client.incr("n", 5) == 15
    assert client.decr("n", 100) == 0
    client.set("w", b"18446744073709551615")
    assert client.incr("w", 1) == 0


def test_expiry(client):
    client.set("e", b"v", time=1)
    client.set("t", b"v", time=100)
    time.sleep(2.1)
    assert client.get("e") is None
    assert client.get("t") == b"v"


def test_flush_all_and_stats(client):
    client.set("f", b"1")
    client.flush_all()
    assert client.get("f") is None
    stats = next(iter(client.stats().values()))
    for field in ["pid", "curr_items", "get_hits", "get_misses", "limit_maxbytes", "threads"]:
        assert field in stats, field


def test_values_up_to_the_item_size_limit(client):
    # memcached counts its item header (48), the key and NUL, 4 bytes of flags when not 0,
    # the CRLF and CAS (8) against -I 2m: at most 66 bytes under "big".
    big = b"x" * (2 * 1024 * 1024 - 66)
    assert client.set("big", big)
    assert client.get("big") == big
