"""Cache::Memcached::Fast's own tests (the XS Perl client, Debian's
libcache-memcached-fast-perl; the test files from the release Debian ships, checked by their
SHA-256) run against hkv, as against memcached 1.6 beside it: the same files must pass.

Its t/Memd.pm parses every server's `version` reply with Perl's `version` module, which
refuses anything but digits and dots: hkv's `1.6.21-hkv0.1.0` made 14 of the 21 files die
before their first test. The files about the release itself (its Changes file, POD, perltidy,
the symbols of Debian's build) test no server and are not run."""
import os
import shutil
import subprocess

import pytest

from conftest import debian_orig_files, start_hkv, start_memcached

VERSION = "0.28"
ORIG = ("http://deb.debian.org/debian/pool/main/libc/libcache-memcached-fast-perl/"
        f"libcache-memcached-fast-perl_{VERSION}.orig.tar.gz")
SHA256 = "7c424c253b65ff62cf1577bb418802192a18805ea31fafc0a7ae589e446c89d2"
NOT_SERVER_TESTS = {"changes.t", "perl-namespace.t", "pod.t", "pod-coverage.t", "tidy.t"}


@pytest.fixture(scope="module")
def suite(tmp_path_factory):
    if shutil.which("prove") is None:
        pytest.skip("prove (Debian's perl) is not installed")
    have = subprocess.run(["perl", "-MCache::Memcached::Fast", "-MTest2::V0", "-e", "1"],
                          capture_output=True)
    if have.returncode != 0:
        pytest.skip("Debian's libcache-memcached-fast-perl and libtest2-suite-perl are needed")
    root = tmp_path_factory.mktemp("perl-memcached-fast")
    debian_orig_files(root, ORIG, SHA256, lambda n: "/t/" in n)
    return root / f"Cache-Memcached-Fast-{VERSION}"


def run_suite(root, server):
    """prove over the server tests, with the two spellings of 127.0.0.1:11211 in t/Memd.pm
    and flush-all.t (two names, so Ketama hashes them apart) pointed at `server`. Returns the
    files that failed, prove's exit status and its output."""
    # The files `use lib 't'`: each server gets its own copy of t/ to run in.
    run = root.parent / f"run-{server.port}"
    shutil.rmtree(run, ignore_errors=True)
    shutil.copytree(root / "t", run / "t")
    for f in (run / "t").iterdir():
        f.write_text(f.read_text().replace(":11211", f":{server.port}"))
    files = sorted(f.name for f in (run / "t").glob("*.t") if f.name not in NOT_SERVER_TESTS)
    out = subprocess.run(
        ["prove", *[f"t/{f}" for f in files]],
        cwd=run, capture_output=True, text=True, timeout=600,
        # AUTHOR_TESTING: flush-all.t runs only then.
        env=dict(os.environ, AUTHOR_TESTING="1"),
    )
    text = out.stdout + out.stderr
    failed = [f for f in files if f"t/{f} " in text and "(Wstat" in text.split(f"t/{f} ", 1)[1][:200]]
    assert len(files) >= 15, files
    return failed, out.returncode, text


def test_cache_memcached_fast_suite_passes_on_hkv_as_on_memcached(suite):
    mc = start_memcached("-t", "2")
    try:
        theirs, rc, out = run_suite(suite, mc)
    finally:
        mc.stop()
    assert rc == 0 and not theirs, f"fails on memcached: {theirs}\n{out[-3000:]}"
    hkv = start_hkv("-t", "2")
    try:
        ours, rc, out = run_suite(suite, hkv)
    finally:
        hkv.stop()
    assert rc == 0 and not ours, f"{ours}\n{out[-3000:]}"
    assert "Result: PASS" in out, out[-3000:]
