"""meta-memcache (PyPI), a client that speaks only the meta protocol, against hkv and
memcached 1.6: every call must give the same result on both.

Its high-level API uses mg/ms/md/ma with v, f, c, t, k, q, b (binary keys), N/R leases,
I (stale on delete), T (touch), E and C (CAS), M modes and N/J counters.
"""
import os
import time

import pytest
from conftest import start_hkv, start_memcached
from meta_memcache import (
    CacheClient,
    Key,
    LeasePolicy,
    RecachePolicy,
    ServerAddress,
    SetMode,
    StalePolicy,
    connection_pool_factory_builder,
)


@pytest.fixture(params=["hkv-cpu", "hkv-opencl", "memcached"])
def client(request):
    if request.param == "memcached":
        server = start_memcached("-t", "2")
    else:
        engine = request.param.split("-")[1]
        try:
            server = start_hkv("-t", "2", "--engine", engine)
        except RuntimeError:
            if engine == "opencl" and os.environ.get("HKV_REQUIRE_OPENCL") != "1":
                pytest.skip("no OpenCL device here")
            raise
    host, port = server.addr
    yield CacheClient.cache_client_from_servers(
        servers=[ServerAddress(host=host, port=port)],
        connection_pool_factory_fn=connection_pool_factory_builder(recv_timeout=5),
    )
    server.stop()


def test_set_get_delete(client):
    assert client.set("mk:a", {"x": [1, 2, 3]}, ttl=60)
    assert client.get("mk:a") == {"x": [1, 2, 3]}
    assert client.set("mk:s", b"bytes", ttl=60)
    assert client.get("mk:s") == b"bytes"
    assert client.delete("mk:a")
    assert client.get("mk:a") is None


def test_binary_and_long_keys(client):
    # Keys with spaces or non-ASCII characters go out base64-encoded with the b flag.
    k = Key("a key with spaces, and ключ")
    assert client.set(k, "v1", ttl=60)
    assert client.get(k) == "v1"
    long = Key("x" * 400)  # hashed by the client, sent in base64
    assert client.set(long, "v2", ttl=60)
    assert client.get(long) == "v2"


def test_set_modes_and_cas(client):
    assert client.set("mk:m", "a", ttl=60, set_mode=SetMode.ADD)
    assert not client.set("mk:m", "b", ttl=60, set_mode=SetMode.ADD)
    assert client.set("mk:m", "c", ttl=60, set_mode=SetMode.REPLACE)
    assert not client.set("mk:nope", "c", ttl=60, set_mode=SetMode.REPLACE)
    value, cas = client.get_cas("mk:m")
    assert value == "c" and cas
    assert client.set("mk:m", "d", ttl=60, cas_token=cas)
    assert not client.set("mk:m", "e", ttl=60, cas_token=cas)
    assert client.get("mk:m") == "d"


def test_counters(client):
    assert client.delta_initialize("mk:n", delta=5, initial_value=10, initial_ttl=60)
    assert client.delta_and_get("mk:n", delta=3) == 13
    assert client.delta_and_get("mk:n", delta=-20) == 0
    assert client.delta("mk:absent", delta=1) is False
    assert client.delta_initialize_and_get("mk:n2", delta=1, initial_value=7, initial_ttl=60) == 7


def test_touch_and_ttl(client):
    assert client.set("mk:t", "v", ttl=60)
    assert client.touch("mk:t", ttl=1)
    time.sleep(2.1)
    assert client.get("mk:t") is None


def test_stale_on_delete_and_recache(client):
    stale = StalePolicy(mark_stale_on_deletion_ttl=30)
    assert client.set("mk:st", "old", ttl=60)
    assert client.delete("mk:st", stale_policy=stale)
    # The first reader after invalidation wins the recache and sees a miss; the others
    # keep getting the stale value meanwhile.
    assert client.get("mk:st") is None
    assert client.get("mk:st") == "old"
    assert client.set("mk:st", "new", ttl=60)
    assert client.get("mk:st") == "new"
    recache = RecachePolicy(ttl=100)
    assert client.set("mk:rc", "v", ttl=50)
    assert client.get("mk:rc", recache_policy=recache) is None
    assert client.get("mk:rc", recache_policy=recache) == "v"


def test_lease_on_miss(client):
    lease = LeasePolicy(ttl=30, miss_retries=1, miss_retry_wait=0.01, wait_backoff_factor=1, miss_max_retry_wait=0.01)
    # The first client gets the lease (a miss it must fill); the next one finds the empty
    # stub and, after its retries, a miss too.
    assert client.get_or_lease("mk:lease", lease_policy=lease) is None
    assert client.get_or_lease("mk:lease", lease_policy=lease) is None
    assert client.set("mk:lease", "filled", ttl=60)
    assert client.get_or_lease("mk:lease", lease_policy=lease) == "filled"


def test_multi_get(client):
    for i in range(20):
        assert client.set(f"mk:mg{i}", i, ttl=60)
    got = client.multi_get([f"mk:mg{i}" for i in range(25)])
    assert got == {**{Key(f"mk:mg{i}"): i for i in range(20)}, **{Key(f"mk:mg{i}"): None for i in range(20, 25)}}
