"""packaging/systemd/hkv.service passes `systemd-analyze verify` (with ExecStart pointed at
the binary under test, since verify checks that the executable exists)."""
import os
import shutil
import subprocess

import pytest

from conftest import HKV

UNIT = os.path.join(os.path.dirname(__file__), "..", "..", "packaging", "systemd", "hkv.service")


def test_unit_verifies_clean(tmp_path):
    if shutil.which("systemd-analyze") is None:
        pytest.skip("systemd-analyze is not installed")
    text = open(UNIT).read()
    assert "ExecStart=/usr/local/bin/hkv $OPTIONS" in text
    unit = tmp_path / "hkv.service"
    unit.write_text(text.replace("/usr/local/bin/hkv", os.path.abspath(HKV)))
    r = subprocess.run(["systemd-analyze", "verify", str(unit)], capture_output=True, text=True)
    problems = [l for l in (r.stdout + r.stderr).splitlines() if "hkv.service" in l]
    assert r.returncode == 0 and not problems, problems
