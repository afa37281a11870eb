"""The live dashboard (`GET /` on the admin endpoint) in headless Chromium (Debian's
`chromium`) against a server under load: the page keeps updating from /metrics, and its
figures move. A screenshot is left at target/dashboard.png for people to look at."""
import os
import re
import shutil
import subprocess
import threading
import time

import pytest
from pymemcache.client.base import Client

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def chromium():
    exe = shutil.which("chromium") or shutil.which("chromium-browser")
    if exe is None:
        pytest.fail("chromium is not installed (Debian package `chromium`)")
    return exe


def headless(url, *extra):
    args = [chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
            "--virtual-time-budget=5000", *extra, url]
    return subprocess.run(args, capture_output=True, text=True, timeout=120)


def test_dashboard_updates_under_load(hkv_admin):
    stop = threading.Event()

    def load():
        c = Client(hkv_admin.addr)
        i = 0
        while not stop.is_set():
            c.set(f"k{i % 5000}", b"x" * 64, noreply=False)
            c.get(f"k{(i * 7) % 10000}")
            i += 1

    threads = [threading.Thread(target=load) for _ in range(2)]
    for t in threads:
        t.start()
    try:
        time.sleep(1)
        dom = headless(hkv_admin.admin + "/", "--dump-dom").stdout
        updates = int(re.search(r'id="updates">(\d+)<', dom).group(1))
        assert updates >= 3, "the page stopped polling /metrics"
        # The peak of the page's samples: two polls may come a few real milliseconds apart
        # (headless Chromium runs on virtual time), with no request between them.
        peak = float(re.search(r'id="ops"[^>]* data-peak="([0-9.e+-]+)"', dom).group(1))
        assert peak > 0, "requests/s did not move under load"
        assert re.search(r'id="hit">\d+\.\d %<', dom), "no hit ratio"
        assert re.search(r'id="lat">\d+ (us|ms)', dom), "no latency percentiles"
        assert dom.count("<span style=\"width") == 5, "the DIDO task bar is not drawn"
        assert re.search(r"<tbody><tr><td>\d+</td>", dom), "no slab classes listed"
        os.makedirs(os.path.join(ROOT, "target"), exist_ok=True)
        shot = os.path.join(ROOT, "target", "dashboard.png")
        headless(hkv_admin.admin + "/", "--window-size=1280,900", f"--screenshot={shot}")
        assert os.path.getsize(shot) > 10_000
    finally:
        stop.set()
        for t in threads:
            t.join()
