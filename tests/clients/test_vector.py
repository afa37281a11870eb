"""hkv's vector commands through outside clients: the documented helper
(docs/examples/hkv_vector.py), pymemcache's raw command interface, many threads at once, and
memcached's answer to the same words (ERROR: the names collide with nothing)."""
import os
import random
import struct
import sys
import threading

import pytest
from pymemcache.client.base import Client
from pymemcache.exceptions import MemcacheUnknownCommandError

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "docs", "examples"))
from hkv_vector import Vectors, VectorError  # noqa: E402


def test_the_documented_example(hkv):
    v = Vectors(hkv.addr)
    v.set("temps", "f32", [20.5, 21.0, 19.5])
    assert v.update("temps", "f32", "add", 0.5) is True
    assert v.update("temps", "f32", "max", 21.0, old=True) == [21.0, 21.5, 20.0]
    assert v.reduce("temps", "f32", "max") == "21.5"
    assert v.filter("temps", "f32", "gt", 21.0) == [21.5]
    assert v.update_vector("temps", "f32", "set", [1, 2, 3]) is True
    assert v.get("temps", "f32") == [1.0, 2.0, 3.0]
    assert v.reduce("nope", "u8", "sum") is None
    with pytest.raises(VectorError, match="CLIENT_ERROR vector length differs"):
        v.update_vector("temps", "f32", "set", [1, 2])
    assert v.get("temps", "f32") == [1.0, 2.0, 3.0]


def test_pymemcache_raw_commands(hkv):
    c = Client(hkv.addr)
    c.set("hist", struct.pack("<4I", 0, 0, 0, 0))
    assert c.raw_command("vupdate hist u32 add 1") == b"UPDATED"
    assert c.raw_command("vreduce hist u32 sum") == b"RESULT 4"
    assert c.raw_command(b"vupdatev hist u32 add 16\r\n" + struct.pack("<4I", 1, 2, 3, 4)) == b"UPDATED"
    assert struct.unpack("<4I", c.get("hist")) == (2, 3, 4, 5)
    # The item keeps its flags (pymemcache's serde flag for bytes is 0) and gets a new CAS.
    _, cas1 = c.gets("hist")
    c.raw_command("vupdate hist u32 xor 1 noreply\r\nmn", end_tokens="MN\r\n")
    value, cas2 = c.gets("hist")
    assert struct.unpack("<4I", value) == (3, 2, 5, 4) and cas2 != cas1


def test_every_type_and_op_against_python(hkv):
    """Integers with Python's unbounded arithmetic wrapped by hand: an outside reference."""
    v = Vectors(hkv.addr)
    rng = random.Random(19)
    ints = {"u8": (0, 255), "u16": (0, 65535), "u32": (0, 2**32 - 1), "u64": (0, 2**64 - 1),
            "i8": (-128, 127), "i16": (-2**15, 2**15 - 1), "i32": (-2**31, 2**31 - 1),
            "i64": (-2**63, 2**63 - 1)}
    for elem, (lo, hi) in ints.items():
        bits = (hi - lo + 1).bit_length() - 1

        def wrap(x):
            x &= (1 << bits) - 1
            return x - (1 << bits) if lo < 0 and x > hi else x

        xs = [rng.randint(lo, hi) for _ in range(9)]
        v.set("x", elem, xs)
        for op in ["add", "sub", "min", "max", "and", "or", "xor", "set"]:
            s = rng.randint(lo, hi)
            f = {"add": lambda a: wrap(a + s), "sub": lambda a: wrap(a - s), "min": lambda a: min(a, s),
                 "max": lambda a: max(a, s), "and": lambda a: wrap(a & s), "or": lambda a: wrap(a | s),
                 "xor": lambda a: wrap(a ^ s), "set": lambda a: s}[op]
            assert v.update("x", elem, op, s, old=True) == xs, (elem, op)
            xs = [f(a) for a in xs]
            assert v.get("x", elem) == xs, (elem, op, s)
        assert v.reduce("x", elem, "sum") == str(sum(xs))
        assert v.reduce("x", elem, "min") == str(min(xs))
        assert v.reduce("x", elem, "max") == str(max(xs))
        assert v.reduce("x", elem, "count") == "9"
        acc = 0
        for a in xs:
            acc ^= a
        assert v.reduce("x", elem, "xor") == str(wrap(acc))
        pivot = xs[4]
        assert v.filter("x", elem, "le", pivot) == [a for a in xs if a <= pivot]
        assert v.filter("x", elem, "ne", pivot) == [a for a in xs if a != pivot]


def test_concurrent_clients_lose_no_update(hkv):
    Vectors(hkv.addr).set("ctr", "u64", [0] * 32)
    errors = []

    def client():
        try:
            c = Vectors(hkv.addr)
            for _ in range(500):
                assert c.update("ctr", "u64", "add", 1) is True
        except Exception as e:  # reported below
            errors.append(e)

    threads = [threading.Thread(target=client) for _ in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert Vectors(hkv.addr).get("ctr", "u64") == [8000] * 32


def test_hostile_vector_lines_leave_values_and_connection_intact(hkv):
    v = Vectors(hkv.addr)
    v.set("keep", "u16", [1, 2, 3])
    rng = random.Random(7)
    words = [b"vupdate", b"vreduce", b"vfilter", b"keep", b"u16", b"u17", b"f64", b"i8",
             b"add", b"xor", b"sum", b"min", b"lt", b"old", b"noreply", b"-1", b"65536", b"1e999",
             b"NaN", b"\x00", b"\xff", b"4", b"999999999999", b"+1", b"k" * 251]
    s = Vectors(hkv.addr)
    for _ in range(500):
        line = b" ".join(rng.choice(words) for _ in range(rng.randint(1, 8)))
        s._send(line + b"\r\nmn\r\n")
        # Whatever the line gets (a reply, an error, nothing under noreply), the connection
        # is in step again by the mn right behind it.
        while s._line() != b"MN":
            pass
    got = v.get("keep", "u16")
    assert len(got) == 3
    assert v.update("keep", "u16", "set", 9) is True
    assert v.get("keep", "u16") == [9, 9, 9]


def test_memcached_does_not_know_these_words(memcached):
    c = Client(memcached.addr)
    with pytest.raises(MemcacheUnknownCommandError):
        c.raw_command("vreduce k u8 sum")
