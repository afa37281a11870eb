"""memjs (npm), the Node client that speaks only the binary protocol and SASL, against hkv
with and without -S. The package is installed by `npm install` from the registry."""
import os
import shutil
import subprocess

import pytest
from conftest import start_hkv

HERE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "memjs")


@pytest.fixture(scope="module")
def memjs():
    if shutil.which("node") is None or shutil.which("npm") is None:
        raise RuntimeError("node and npm are needed (Debian packages nodejs, npm)")
    if not os.path.isdir(os.path.join(HERE, "node_modules", "memjs")):
        subprocess.run(["npm", "install", "--no-audit", "--no-fund", "--silent"], cwd=HERE, check=True, timeout=300)
    return HERE


def run_check(memjs, addr, user=None, password=None):
    env = {**os.environ, "HKV_ADDR": f"{addr[0]}:{addr[1]}"}
    if user:
        env.update(HKV_USER=user, HKV_PASSWORD=password)
    return subprocess.run(["node", "check.js"], cwd=memjs, env=env, capture_output=True, text=True, timeout=60)


def test_memjs_without_sasl(memjs, hkv):
    r = run_check(memjs, hkv.addr)
    assert r.returncode == 0, r.stderr + r.stdout


def test_memjs_with_sasl(memjs, tmp_path):
    pwdb = tmp_path / "pwdb"
    pwdb.write_text("nodeuser:nodepass\n")
    s = start_hkv("-S", "--sasl-pwdb", str(pwdb))
    try:
        r = run_check(memjs, s.addr, "nodeuser", "nodepass")
        assert r.returncode == 0, r.stderr + r.stdout
        bad = run_check(memjs, s.addr, "nodeuser", "wrong")
        assert bad.returncode != 0
    finally:
        s.stop()
