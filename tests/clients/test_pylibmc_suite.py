"""pylibmc's own tests (the Python binding of libmemcached, the C client many other
languages' clients wrap: text and binary protocol, CAS, behaviors, pooling, serialization,
reference counts; shipped in its source distribution, not its wheel) run unchanged against
hkv, as against memcached 1.6 beside it: both must pass the same tests."""
import os
import re
import subprocess
import sys
import tarfile

import pytest

from conftest import start_hkv, start_memcached

pylibmc = pytest.importorskip("pylibmc")


@pytest.fixture(scope="module")
def suite(tmp_path_factory):
    """The tests of the installed pylibmc's own release, from its source distribution."""
    where = tmp_path_factory.mktemp("pylibmc")
    subprocess.run(
        [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--no-binary", ":all:",
         "-d", str(where), f"pylibmc=={pylibmc.__version__}"],
        check=True, timeout=300,
    )
    (sdist,) = where.glob("pylibmc-*.tar.gz")
    with tarfile.open(sdist) as t:
        members = [m for m in t.getmembers() if "/tests/" in m.name and m.isfile()]
        t.extractall(where, members=members, filter="data")
    (root,) = where.glob("pylibmc-*/")
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
    env = dict(os.environ, MEMCACHED_HOST="127.0.0.1", MEMCACHED_PORT=str(server.port))
    out = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests"],
        cwd=root, env=env, capture_output=True, text=True, timeout=300,
    ).stdout
    summary = out.strip().splitlines()[-1]
    counts = {k: int(n) for n, k in re.findall(r"(\d+) (passed|failed|skipped|error)", summary)}
    return counts, out


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
