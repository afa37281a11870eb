"""The Java clients, spymemcached and xmemcached (Maven Central), each over the text and the
binary protocol: one application workload (tests/clients/java/src/main/java/Check.java)
against memcached 1.6 and against hkv must see exactly the same results."""
import os
import shutil
import subprocess

import pytest

HERE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "java")


@pytest.fixture(scope="module")
def classpath():
    if shutil.which("java") is None or shutil.which("mvn") is None:
        raise RuntimeError("java and mvn are needed (Debian packages default-jdk-headless, maven)")
    subprocess.run(["mvn", "-q", "-B", "compile", "dependency:copy-dependencies"], cwd=HERE,
                   check=True, timeout=600)
    return os.path.join(HERE, "target", "classes") + ":" + os.path.join(HERE, "target", "dependency", "*")


def run(classpath, client, protocol, server):
    r = subprocess.run(["java", "-cp", classpath, "Check", client, protocol,
                        f"{server.addr[0]}:{server.addr[1]}"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-3000:]
    return [l for l in r.stdout.splitlines() if " INFO " not in l]


@pytest.mark.parametrize("client", ["spy", "xmem"])
@pytest.mark.parametrize("protocol", ["text", "binary"])
def test_java_client_sees_what_it_sees_on_memcached(classpath, client, protocol, hkv, memcached):
    want = run(classpath, client, protocol, memcached)
    got = run(classpath, client, protocol, hkv)
    assert want[-1] == "done"
    assert got == want
