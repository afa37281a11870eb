"""libmemcached's load generator, memcslap (Debian's libmemcached-tools), against hkv at
memcached's default memory and thread count (`-m 64 -t 4`): its `get` test stores 10,000
values of up to ~5.6 KB (about 28 MB) and eight threads read every one back. With 1 MiB slab
pages in each of four 16 MiB partitions, the ~18 slab classes took pages from one another
and memcslap got back 36% of the keys it had just stored (docs/BENCHMARKS.md, "Slab pages at
small `-m`"); memcached returns them all."""
import re
import shutil
import subprocess

import pytest

from conftest import start_hkv


def test_memcslap_reads_back_every_key_it_stored():
    exe = shutil.which("memcslap")
    if exe is None:
        pytest.skip("memcslap is not installed (Debian package libmemcached-tools)")
    server = start_hkv("-m", "64", "-t", "4")
    try:
        out = subprocess.run(
            [exe, "-s", f"127.0.0.1:{server.port}", "-t", "get", "-c", "8", "-e", "10000"],
            capture_output=True, text=True, timeout=120,
        ).stdout
    finally:
        server.stop()
    m = re.search(r"Time to get\s+(\d+) keys by\s+8 threads", out)
    assert m, f"memcslap output not understood:\n{out}"
    assert int(m.group(1)) == 80000, out
