"""pylibmc's own tests (the Python binding of libmemcached, the C client many other
languages' clients wrap: text and binary protocol, CAS, behaviors, pooling, serialization,
reference counts; shipped in its source distribution, not its wheel) run unchanged against
hkv, as against memcached 1.6 beside it: both must pass the same tests."""
import pytest

from conftest import run_sdist_tests, sdist_tests, start_hkv, start_memcached

pylibmc = pytest.importorskip("pylibmc")


@pytest.fixture(scope="module")
def suite(tmp_path_factory):
    """The tests of the installed pylibmc's own release, from its source distribution."""
    root = sdist_tests(tmp_path_factory.mktemp("pylibmc"), "pylibmc", pylibmc.__version__)
    # The autoconf tests take the port from their base class and from elasticache()'s
    # default address (127.0.0.1:11211), not from MEMCACHED_PORT.
    (root / "tests" / "conftest.py").write_text(
        "import os\nfrom pylibmc import autoconf\nfrom tests import PylibmcTestCase\n"
        "port = os.environ['MEMCACHED_PORT']\n"
        "PylibmcTestCase.memcached_port = port\n"
        "autoconf.elasticache.__defaults__ = ('127.0.0.1:' + port,)"
        " + autoconf.elasticache.__defaults__[1:]\n"
    )
    return root


def run_suite(root, server):
    # MEMCACHED_PORT: pylibmc.test.make_test_client's own way to point the tests elsewhere.
    return run_sdist_tests(root, {"MEMCACHED_HOST": "127.0.0.1",
                                  "MEMCACHED_PORT": str(server.port)})


@pytest.mark.parametrize("engine", ["cpu", "opencl"])
def test_pylibmc_suite_passes_on_hkv_as_on_memcached(suite, engine):
    mc = start_memcached("-t", "2")
    try:
        theirs, _ = run_suite(suite, mc)
    finally:
        mc.stop()
    hkv = start_hkv("-t", "2", "--engine", engine)
    try:
        ours, out = run_suite(suite, hkv)
    finally:
        hkv.stop()
    assert ours.get("failed", 0) == 0 and ours.get("error", 0) == 0, out[-3000:]
    assert ours.get("passed", 0) >= 40 and ours == theirs, (ours, theirs)
