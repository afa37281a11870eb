"""python-memcached's own tests (the pure-Python client behind Django's old
MemcachedCache: get/set/multi, incr/decr, CAS, unicode, compression, key and value size
limits) run against hkv, as against memcached 1.6 beside it: both must pass the same
tests. They are shipped in its source distribution, not its wheel, and point at
127.0.0.1:11211, which is rewritten to the server under test. The release omits the
tests' tiny `utils.py` (`captured_stderr`); it is supplied here.

Its `test_ignore_too_large_value` stores a value of exactly 1 MiB and expects memcached's
`SERVER_ERROR object too large for cache`: memcached counts its item header, key, flags and
CAS against `-I`, and hkv refuses the same values."""
import pytest

from conftest import run_sdist_tests, sdist_tests, start_hkv, start_memcached

memcache = pytest.importorskip("memcache")

UTILS = '''import contextlib, io, sys


@contextlib.contextmanager
def captured_stderr():
    saved, sys.stderr = sys.stderr, io.StringIO()
    try:
        yield sys.stderr
    finally:
        sys.stderr = saved
'''


@pytest.fixture(scope="module")
def suite(tmp_path_factory):
    root = sdist_tests(tmp_path_factory.mktemp("python-memcached"), "python-memcached",
                       memcache.__version__)
    tests = root / "tests"
    (tests / "__init__.py").write_text("")
    (tests / "utils.py").write_text(UTILS)
    for f in tests.glob("test_*.py"):
        text = f.read_text()
        f.write_text(text.replace('"127.0.0.1:11211"',
                                  '"127.0.0.1:" + __import__("os").environ["MEMCACHED_PORT"]'))
    return root


def run_suite(root, server):
    return run_sdist_tests(root, {"MEMCACHED_PORT": str(server.port)})


def test_python_memcached_suite_passes_on_hkv_as_on_memcached(suite):
    mc = start_memcached("-t", "2")
    try:
        theirs, _ = run_suite(suite, mc)
    finally:
        mc.stop()
    hkv = start_hkv("-t", "2")
    try:
        ours, out = run_suite(suite, hkv)
    finally:
        hkv.stop()
    assert ours.get("failed", 0) == 0 and ours.get("error", 0) == 0, out[-3000:]
    assert ours.get("passed", 0) >= 20 and ours == theirs, (ours, theirs)
