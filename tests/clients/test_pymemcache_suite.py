"""pymemcache's own integration tests (shipped inside the package, pymemcache/test/
test_integration.py: every client class, serializers, large values, errors) run unchanged
against hkv, as its authors run them against memcached, and against memcached 1.6 beside it:
both must pass the same tests."""
import os
import re
import subprocess
import sys

import pymemcache
import pytest

from conftest import start_hkv, start_memcached

SUITE = os.path.join(os.path.dirname(pymemcache.__file__), "test", "test_integration.py")


# test_touch stores with a 1-second TTL and touches the item a round trip later: when a clock
# second ticks in between, the item has expired, on memcached as on hkv (set-then-touch pairs
# measured at about 4e-5 such misses each on both). Only that test is run again, once, so a
# real failure, which repeats, still fails.
RACES_THE_CLOCK = ("::test_touch[",)


def run_pytest(server, targets):
    out = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *targets,
         "--server", "127.0.0.1", "--port", str(server.port)],
        capture_output=True, text=True, timeout=300,
    ).stdout
    summary = out.strip().splitlines()[-1]
    counts = {k: int(n) for n, k in re.findall(r"(\d+) (passed|failed|skipped|error)", summary)}
    return counts, out


def run_suite(server):
    counts, out = run_pytest(server, [SUITE])
    failed = re.findall(r"^FAILED (\S+)", out, re.M)
    if failed and all(any(r in f for r in RACES_THE_CLOCK) for f in failed):
        again, again_out = run_pytest(server, failed)
        out += "\n--- the clock-racing tests run again ---\n" + again_out
        if again.get("passed", 0) == len(failed):
            counts["failed"] -= len(failed)
            counts["passed"] = counts.get("passed", 0) + len(failed)
            if counts["failed"] == 0:
                del counts["failed"]
    return counts, out


@pytest.mark.skipif(not os.path.exists(SUITE), reason="this pymemcache ships without its tests")
def test_pymemcache_integration_suite_passes_on_hkv_as_on_memcached():
    mc = start_memcached("-t", "2")
    try:
        theirs, _ = run_suite(mc)
    finally:
        mc.stop()
    hkv = start_hkv("-t", "2")
    try:
        ours, out = run_suite(hkv)
    finally:
        hkv.stop()
    assert ours.get("failed", 0) == 0 and ours.get("error", 0) == 0, out[-3000:]
    assert ours.get("passed", 0) >= 100 and ours == theirs, (ours, theirs)
