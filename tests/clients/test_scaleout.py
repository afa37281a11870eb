"""Scale-out with what operators already run: twemproxy (Debian `nutcracker`, ketama,
auto_eject_hosts) in front of three hkv instances, and pymemcache's HashClient hashing
keys on the client. Keys spread over the instances, read back through the proxy; one
instance killed, ejected, and service continues on the other two."""
import os
import shutil
import socket
import subprocess
import time

import pytest
from pymemcache.client.base import Client
from pymemcache.client.hash import HashClient

from conftest import free_port, start_hkv

KEYS = [f"key:{i}" for i in range(300)]


def nutcracker_bin():
    return shutil.which("nutcracker") or ("/usr/sbin/nutcracker" if os.path.exists("/usr/sbin/nutcracker") else None)


def curr_items(server):
    c = Client(server.addr)
    try:
        return int(c.stats()[b"curr_items"])
    finally:
        c.close()


@pytest.fixture
def three():
    servers = [start_hkv("-t", "1") for _ in range(3)]
    yield servers
    for s in servers:
        s.stop()


@pytest.fixture
def proxy(three, tmp_path):
    exe = nutcracker_bin()
    if exe is None:
        pytest.fail("nutcracker (twemproxy) is not installed (Debian package `nutcracker`)")
    port = free_port()
    conf = tmp_path / "nutcracker.yml"
    lines = [
        "hkv:",
        f"  listen: 127.0.0.1:{port}",
        "  hash: fnv1a_64",
        "  distribution: ketama",
        "  auto_eject_hosts: true",
        "  server_retry_timeout: 30000",
        "  server_failure_limit: 1",
        "  timeout: 5000",
        "  servers:",
    ] + [f"   - 127.0.0.1:{s.port}:1 hkv{i}" for i, s in enumerate(three)]
    conf.write_text("\n".join(lines) + "\n")
    proc = subprocess.Popen([exe, "-c", str(conf), "-s", str(free_port()), "-a", "127.0.0.1"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 10
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            break
        except OSError:
            if proc.poll() is not None or time.time() > deadline:
                raise RuntimeError("nutcracker did not start")
            time.sleep(0.05)
    yield ("127.0.0.1", port)
    proc.terminate()
    proc.wait(timeout=10)


def test_twemproxy_spreads_reads_back_and_survives_an_instance(three, proxy):
    c = Client(proxy, connect_timeout=6, timeout=6)
    for k in KEYS:
        assert c.set(k, k.encode() + b"-v1", noreply=False)
    for k in KEYS:
        assert c.get(k) == k.encode() + b"-v1"
    counts = [curr_items(s) for s in three]
    assert sum(counts) == len(KEYS)
    assert all(n > len(KEYS) // 10 for n in counts), f"keys not spread: {counts}"
    # Kill one instance: the proxy ejects it after one failure, and its keys move to the
    # other two (a cache: their values are gone until written again).
    three[0].stop()
    deadline = time.time() + 20
    while True:
        failures = 0
        for k in KEYS:
            try:
                c = c if c.sock is not None else Client(proxy, connect_timeout=6, timeout=6)
                if not c.set(k, k.encode() + b"-v2", noreply=False):
                    failures += 1
            except Exception:
                failures += 1
                c.close()
        if failures == 0:
            break
        assert time.time() < deadline, f"{failures} writes still failing after the ejection"
        time.sleep(0.5)
    for k in KEYS:
        assert c.get(k) == k.encode() + b"-v2"
    assert curr_items(three[1]) + curr_items(three[2]) >= len(KEYS)


def test_client_side_consistent_hashing(three):
    hc = HashClient([s.addr for s in three], connect_timeout=5, timeout=5,
                    retry_attempts=1, dead_timeout=60, ignore_exc=False)
    for k in KEYS:
        assert hc.set(k, b"v" + k.encode(), noreply=False)
    assert hc.get_many(KEYS) == {k: b"v" + k.encode() for k in KEYS}
    counts = [curr_items(s) for s in three]
    assert sum(counts) == len(KEYS) and all(n > 0 for n in counts), counts
    # The same ring on a second client finds every key where the first put it.
    other = HashClient([s.addr for s in three])
    assert all(other.get(k) == b"v" + k.encode() for k in KEYS)
