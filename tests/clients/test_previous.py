"""KVCG's previous value (getset, getdel, meta G) through pymemcache's raw commands, and
what memcached answers to the same words (they collide with nothing it speaks)."""
import pytest
from pymemcache.client.base import Client
from pymemcache.exceptions import MemcacheUnknownCommandError, MemcacheClientError


def test_getset_getdel_with_pymemcache(hkv):
    c = Client(hkv.addr)
    assert c.raw_command(b"getset k 0 0 3\r\nold", end_tokens=b"END\r\n") == b""
    assert c.raw_command(b"getset k 0 0 3\r\nnew", end_tokens=b"END\r\n") == b"VALUE k 0 3\r\nold\r\n"
    assert c.get("k") == b"new"
    assert c.raw_command(b"getdel k", end_tokens=b"END\r\n") == b"VALUE k 0 3\r\nnew\r\n"
    assert c.get("k") is None
    # The meta form, as mg v answers a value.
    c.set("m", b"abc")
    assert c.raw_command(b"ms m 2 G s\r\nxy", end_tokens=b"\r\n") == b"VA 3 s3"


def test_memcached_refuses_these_words(memcached):
    c = Client(memcached.addr)
    with pytest.raises(MemcacheUnknownCommandError):
        c.raw_command(b"getdel k")
    with pytest.raises(MemcacheClientError):
        c.raw_command(b"md k G")
