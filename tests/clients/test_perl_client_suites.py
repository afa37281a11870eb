"""Three more Perl clients' own test suites, run against memcached 1.6.18 and then hkv: each
must pass on both. The suites come from Debian 12's orig tarballs (checked by SHA-256), the
clients are Debian's packages:

- Cache::Memcached::libmemcached 0.04001 (libmemcached underneath), text and binary protocol;
- Cache::Memcached 1.30, the original pure-Perl client;
- AnyEvent::Memcached 0.08, an event-driven client with its own key hashing.

A helper also ran Memcached::libmemcached 1.001801 (318 tests, text and binary) and
CHI::Driver::Memcached 0.16: the same results on memcached and hkv, but each fails tests on
memcached too (a version check against Debian's libmemcached; CHI's key listing), so they
are not here."""
import os
import shutil
import subprocess

import pytest

from conftest import debian_orig_files, free_port, start_hkv, start_memcached

POOL = "http://deb.debian.org/debian/pool/main/"
SUITES = {
    "cml": (POOL + "libc/libcache-memcached-libmemcached-perl/"
            "libcache-memcached-libmemcached-perl_0.04001.orig.tar.gz",
            "e5dffe00ee0018dcd12708cbe214f7ea679ba2fad86f16da9dbce11f0215e5d2",
            "Cache-Memcached-libmemcached-0.04001", "Cache::Memcached::libmemcached"),
    "cm": (POOL + "libc/libcache-memcached-perl/libcache-memcached-perl_1.30.orig.tar.gz",
           "31b3c51ec0eaaf03002e2cc8e3d7d5cbe61919cfdada61c008eb9853acac42a9",
           "Cache-Memcached-1.30", "Cache::Memcached"),
    "aem": (POOL + "liba/libanyevent-memcached-perl/libanyevent-memcached-perl_0.08.orig.tar.gz",
            "04da12bd31211538af20237a7abd8d474413d314b099c3400c13da64762e6236",
            "AnyEvent-Memcached-0.08", "AnyEvent::Memcached"),
}


@pytest.fixture(scope="module")
def tarballs(tmp_path_factory):
    if shutil.which("prove") is None:
        pytest.skip("prove (Debian's perl) is not installed")
    root = tmp_path_factory.mktemp("perl-clients")
    for name, (url, sha, top, module) in SUITES.items():
        for m in (module, "lib::abs", "Test::NoWarnings"):
            # Looked for, not loaded: Test::NoWarnings reports a test of its own at exit.
            path = m.replace("::", "/") + ".pm"
            have = subprocess.run(["perl", "-e", f'exit !grep {{ -e "$_/{path}" }} @INC'])
            if have.returncode != 0:
                pytest.skip(f"Debian's package of {m} is needed (scripts/test.sh installs it)")
        debian_orig_files(root, url, sha, lambda n: "/t/" in n)
    return root


def prove(tarballs, suite, server, binary=False):
    """prove over a copy of the suite's t/ pointed at `server`; its exit status and output."""
    url, sha, top, module = SUITES[suite]
    run = tarballs / f"{top}-{server.port}"
    shutil.rmtree(run, ignore_errors=True)
    shutil.copytree(tarballs / top / "t", run / "t")
    # `use lib::abs "../lib"` needs the directory; empty, so Debian's installed module runs.
    (run / "lib").mkdir()
    addr = f"127.0.0.1:{server.port}"
    env = dict(os.environ, PERL_LIBMEMCACHED_TEST_SERVERS=addr, MEMCACHED_SERVER=addr,
               MEMCACHEDB_SERVER=addr)
    if binary:
        env["LIBMEMCACHED_BINARY_PROTOCOL"] = "1"
    args = ["prove", "-I", "t/lib", "t/"]
    if suite == "cm":
        # Its tests name 127.0.0.1:11211 (and 127.1:11211, the same server by another name)
        # and bind 11311 for a fake server; 05_reconnect_timeout.t needs an unroutable
        # address to time out, which this sandbox answers at once (on memcached too).
        for f in (run / "t").glob("*.t"):
            text = f.read_text().replace(":11211", f":{server.port}")
            f.write_text(text.replace("11311", str(free_port())))
        (run / "t" / "05_reconnect_timeout.t").unlink()
        args = ["prove", "t/"]
    out = subprocess.run(args, cwd=run, env=env, capture_output=True, text=True, timeout=600)
    return out.returncode, out.stdout + out.stderr


@pytest.mark.parametrize("suite,binary", [("cml", False), ("cml", True), ("cm", False),
                                          ("aem", False)])
def test_perl_client_suite_passes_on_hkv_as_on_memcached(tarballs, suite, binary):
    mc = start_memcached("-t", "2")
    try:
        rc, out = prove(tarballs, suite, mc, binary)
    finally:
        mc.stop()
    assert rc == 0 and "Result: PASS" in out, f"fails on memcached:\n{out[-3000:]}"
    for io in ("auto", "epoll"):
        hkv = start_hkv("-t", "2", "--io", io)
        try:
            rc, out = prove(tarballs, suite, hkv, binary)
        finally:
            hkv.stop()
        assert rc == 0 and "Result: PASS" in out, f"fails on hkv --io {io}:\n{out[-3000:]}"
