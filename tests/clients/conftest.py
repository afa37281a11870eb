"""Real servers for the client tests: hkv from this checkout and, for comparisons, memcached.

Both listen on 127.0.0.1 only and are stopped by their PID. hkv is started on port 0 and
reports the port it got; memcached cannot, so it gets a port the kernel just handed out.
"""
import hashlib
import os
import shutil
import re
import socket
import subprocess
import sys
import tarfile
import time
import urllib.request

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
HKV = os.environ.get("HKV_BIN", os.path.join(ROOT, "target", "release", "hkv"))


class Server:
    def __init__(self, proc, port, kill_to_stop=False):
        self.proc = proc
        self.port = port
        self.addr = ("127.0.0.1", port)
        # memcached, the reference peer, takes up to a second to act on SIGTERM (its main
        # loop looks once a clock tick); what it does on the way out is not under test.
        self.kill_to_stop = kill_to_stop

    def stop(self):
        if self.proc.poll() is None:
            if self.kill_to_stop:
                self.proc.kill()
                self.proc.wait()
                return
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def start_hkv(*args):
    if not os.path.exists(HKV):
        raise RuntimeError(f"{HKV} not built: run `cargo build --release -p hkv-server`")
    proc = subprocess.Popen(
        [HKV, "-p", "0", "-l", "127.0.0.1", *args],
        stdout=subprocess.PIPE,
        text=True,
    )
    line = proc.stdout.readline()
    if "listening" not in line:
        proc.wait(timeout=10)
        raise RuntimeError(f"hkv {' '.join(args)} did not start")
    port = int(line.strip().rsplit(":", 1)[1])
    return Server(proc, port)


def sdist_tests(where, project, version):
    """The tests/ directory of a PyPI project's source distribution (where clients ship
    their own tests; wheels omit them), unpacked under `where`; returns the release's root."""
    subprocess.run(
        [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--no-binary", ":all:",
         "-d", str(where), f"{project}=={version}"],
        check=True, timeout=300,
    )
    (sdist,) = where.glob(f"{project}-*.tar.gz")
    with tarfile.open(sdist) as t:
        members = [m for m in t.getmembers() if "/tests/" in m.name and m.isfile()]
        t.extractall(where, members=members, filter="data")
    (root,) = where.glob(f"{project}-*/")
    return root


def debian_orig_files(where, url, sha256, wanted):
    """The files of a Debian orig tarball (from deb.debian.org's pool, checked by SHA-256)
    whose names `wanted` accepts, unpacked under `where` (where client and server projects'
    own test suites are found when PyPI has none)."""
    tarball = where / url.rsplit("/", 1)[1]
    with urllib.request.urlopen(url, timeout=120) as r:
        tarball.write_bytes(r.read())
    assert hashlib.sha256(tarball.read_bytes()).hexdigest() == sha256, url
    with tarfile.open(tarball) as t:
        members = [m for m in t.getmembers() if m.isfile() and wanted(m.name)]
        t.extractall(where, members=members, filter="data")


def run_sdist_tests(root, env):
    """pytest over a release's tests/ (see `sdist_tests`): its counts by outcome, its output."""
    out = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests"],
        cwd=root, env=dict(os.environ, **env), capture_output=True, text=True, timeout=300,
    ).stdout
    summary = out.strip().splitlines()[-1]
    counts = {k: int(n) for n, k in re.findall(r"(\d+) (passed|failed|skipped|error)", summary)}
    return counts, out


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_memcached(*args):
    exe = shutil.which("memcached")
    if exe is None:
        raise RuntimeError("memcached is not installed (Debian package `memcached`)")
    port = free_port()
    # memcached refuses to run as root unless told which user to be.
    user = ["-u", "root"] if os.geteuid() == 0 else []
    proc = subprocess.Popen(
        [exe, "-l", "127.0.0.1", "-p", str(port), "-U", "0", *user, *args],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    # memcached prints nothing when ready; its port accepting a connection is the signal.
    deadline = time.time() + 10
    while time.time() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return Server(proc, port, kill_to_stop=True)
        except OSError:
            if proc.poll() is not None:
                raise RuntimeError("memcached exited at start")
            time.sleep(0.02)
    proc.kill()
    raise RuntimeError("memcached did not start listening")


@pytest.fixture(params=["cpu", "opencl"])
def hkv(request):
    """hkv on each index backend: every client test runs against both."""
    try:
        s = start_hkv("-I", "2m", "-t", "2", "--engine", request.param)
    except RuntimeError:
        if request.param == "opencl" and os.environ.get("HKV_REQUIRE_OPENCL") != "1":
            pytest.skip("no OpenCL device here (set HKV_REQUIRE_OPENCL=1 to make this fail)")
        raise
    yield s
    s.stop()


@pytest.fixture
def memcached():
    s = start_memcached("-I", "2m", "-t", "2")
    yield s
    s.stop()


@pytest.fixture
def hkv_admin():
    """hkv with its admin endpoint (`--admin-listen`); `.admin` is its base URL."""
    proc = subprocess.Popen([HKV, "-p", "0", "-l", "127.0.0.1", "-t", "2",
                             "--admin-listen", "127.0.0.1:0"], stdout=subprocess.PIPE, text=True)
    port = int(proc.stdout.readline().strip().rsplit(":", 1)[1])
    admin = proc.stdout.readline().strip()
    assert admin.startswith("hkv admin on "), admin
    s = Server(proc, port)
    s.admin = "http://" + admin.rsplit(" ", 1)[1]
    yield s
    s.stop()
