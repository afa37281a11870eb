"""Debian's /etc/memcached.conf (a copy of the memcached 1.6.18 package's, in data/) starts
hkv unchanged: its lines become arguments the way Debian's start-memcached script turns them
into memcached's (`-d`, `-m`, `-p`, `-u memcache`, `-l`, `-P`); only the port and the pid
file's directory are moved so the test does not collide with a real memcached."""
import os
import pathlib
import shutil
import tempfile
import pwd
import shlex
import signal
import socket
import subprocess
import time

import pytest
from pymemcache.client.base import Client

from conftest import HKV, free_port

CONF = os.path.join(os.path.dirname(__file__), "data", "debian-memcached.conf")


def debian_args(port, piddir):
    """What start-memcached passes: every line starting with `-`, split into words."""
    args = []
    for line in open(CONF):
        line = line.strip()
        if not line.startswith("-"):
            continue  # comments, and `logfile` (the wrapper redirects output itself)
        words = shlex.split(line)
        if words[0] == "-p":
            words[1] = str(port)
        if words[0] == "-P":
            words[1] = os.path.join(piddir, os.path.basename(words[1]))
        args += words
    return args


def test_debian_memcached_conf_starts_hkv():
    if os.geteuid() != 0:
        pytest.skip("the Debian file says -u memcache, which needs root")
    try:
        user = pwd.getpwnam("memcache")
    except KeyError:
        pytest.skip("no memcache user (Debian package memcached not installed)")
    # Like Debian's /var/run/memcached: owned by memcache, on a path it can walk (the server
    # removes its pid file after dropping to that user).
    base = tempfile.mkdtemp(prefix="hkv-debian-")
    os.chmod(base, 0o755)
    piddir = pathlib.Path(base) / "run"
    piddir.mkdir()
    os.chown(piddir, user.pw_uid, user.pw_gid)
    port = free_port()
    args = debian_args(port, str(piddir))
    assert "-d" in args and "-u" in args and "-P" in args
    # -d: the command returns once the server has detached.
    assert subprocess.run([HKV, *args], timeout=30).returncode == 0
    pidfile = piddir / "memcached.pid"
    deadline = time.time() + 10
    while not pidfile.exists() or not pidfile.read_text().strip():
        assert time.time() < deadline, "no pid file"
        time.sleep(0.05)
    pid = int(pidfile.read_text())
    try:
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                assert time.time() < deadline, "not listening"
                time.sleep(0.05)
        c = Client(("127.0.0.1", port))
        assert c.set("k", b"v", noreply=False)
        assert c.get("k") == b"v"
        assert int(c.stats(b"settings")[b"maxbytes"]) == 64 << 20
        status = open(f"/proc/{pid}/status").read()
        uid = next(l for l in status.splitlines() if l.startswith("Uid:")).split()[1]
        assert int(uid) == user.pw_uid, "-u memcache did not take"
    finally:
        os.kill(pid, signal.SIGTERM)
        deadline = time.time() + 10
        while os.path.exists(f"/proc/{pid}"):
            assert time.time() < deadline, "did not stop on SIGTERM"
            time.sleep(0.05)
    assert not pidfile.exists(), "the pid file is removed on a clean exit"
    shutil.rmtree(base)


def memcache_user():
    if os.geteuid() != 0:
        pytest.skip("-u needs root")
    try:
        return pwd.getpwnam("memcache")
    except KeyError:
        pytest.skip("no memcache user (Debian package memcached not installed)")


def test_regression_u_drops_root_before_the_first_client():
    """The first reply a client can get already comes from the -u user: the drop happens
    between binding and serving, not after the workers are running."""
    user = memcache_user()
    for _ in range(10):
        port = free_port()
        proc = subprocess.Popen([HKV, "-u", "memcache", "-p", str(port), "-l", "127.0.0.1"],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            deadline = time.time() + 10
            while True:
                try:
                    s = socket.create_connection(("127.0.0.1", port), timeout=5)
                    s.sendall(b"version\r\n")
                    if s.recv(100).startswith(b"VERSION"):
                        break
                except OSError:
                    pass
                assert time.time() < deadline, "not serving"
                time.sleep(0.001)
            status = open(f"/proc/{proc.pid}/status").read()
            uid = next(l for l in status.splitlines() if l.startswith("Uid:")).split()[1:]
            assert [int(u) for u in uid] == [user.pw_uid] * 4, "served before dropping root"
            s.close()
        finally:
            proc.terminate()
            assert proc.wait(timeout=10) == 0


def test_regression_sigterm_right_after_the_pid_file_is_a_clean_stop():
    """A SIGTERM that arrives while the server is still starting stops it cleanly: exit 0
    and the pid file removed, as a init script that stops at once expects."""
    user = memcache_user()
    base = tempfile.mkdtemp(prefix="hkv-early-term-")
    os.chmod(base, 0o755)
    os.chown(base, user.pw_uid, user.pw_gid)
    pidfile = pathlib.Path(base) / "hkv.pid"
    for _ in range(10):
        proc = subprocess.Popen([HKV, "-u", "memcache", "-p", "0", "-l", "127.0.0.1",
                                 "-P", str(pidfile)],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.time() + 10
        while not pidfile.exists():
            assert time.time() < deadline, "no pid file"
            time.sleep(0.0005)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=10) == 0
        assert not pidfile.exists(), "the pid file is removed on a clean stop"
    shutil.rmtree(base)
