"""`--admin-listen`: /metrics in Prometheus' text format, parsed by the official Python
client's parser, under memcached_exporter's names and labels (so its dashboards work), with
figures that follow the load."""
import urllib.error
import urllib.request

import pytest
from prometheus_client.parser import text_string_to_metric_families
from pymemcache.client.base import Client



def scrape(s):
    body = urllib.request.urlopen(s.admin + "/metrics", timeout=5).read().decode()
    samples = {}
    for fam in text_string_to_metric_families(body):
        for smp in fam.samples:
            samples[(smp.name, tuple(sorted(smp.labels.items())))] = smp.value
    return samples


def value(samples, name, **labels):
    return samples[(name, tuple(sorted(labels.items())))]


# What memcached_exporter's Grafana dashboards read.
EXPORTER_NAMES = [
    "memcached_up", "memcached_version", "memcached_uptime_seconds", "memcached_time_seconds",
    "memcached_current_items", "memcached_items_total", "memcached_items_evicted_total",
    "memcached_items_reclaimed_total", "memcached_current_connections",
    "memcached_connections_total", "memcached_current_bytes", "memcached_limit_bytes",
    "memcached_read_bytes_total", "memcached_written_bytes_total", "memcached_max_connections",
    "memcached_process_user_cpu_seconds_total", "memcached_process_system_cpu_seconds_total",
    "memcached_item_too_large_total", "memcached_item_no_memory_total",
]


def test_metrics_have_the_exporters_names_and_follow_the_load(hkv_admin):
    before = scrape(hkv_admin)
    # (The Python parser names counter samples `<family>_total`, whatever the exposition
    # said; memcached_uptime_seconds is a counter without the suffix in the exporter too.)
    names = {n for n, _ in before}
    missing = [n for n in EXPORTER_NAMES if n not in names and n + "_total" not in names]
    assert not missing, missing
    assert value(before, "memcached_up") == 1
    c = Client(hkv_admin.addr)
    for i in range(100):
        c.set(f"k{i}", b"x" * 100, noreply=False)
    for i in range(150):
        c.get(f"k{i}")
    c.delete("k0", noreply=False)
    after = scrape(hkv_admin)
    assert value(after, "memcached_current_items") == 99
    cmd = "memcached_commands_total"
    assert value(after, cmd, command="get", status="hit") - value(before, cmd, command="get", status="hit") == 100
    assert value(after, cmd, command="get", status="miss") - value(before, cmd, command="get", status="miss") == 50
    assert value(after, cmd, command="set", status="hit") - value(before, cmd, command="set", status="hit") == 100
    assert value(after, cmd, command="delete", status="hit") == 1
    assert value(after, "memcached_limit_bytes") == 64 << 20
    assert value(after, "memcached_read_bytes_total") > value(before, "memcached_read_bytes_total")
    # Per-slab series carry the slab label, as the exporter's do.
    slab_items = {lbl: v for (n, lbl), v in after.items() if n == "memcached_slab_current_items"}
    assert sum(slab_items.values()) == 99 and all(dict(l).keys() == {"slab"} for l in slab_items)
    # hkv's own figures.
    assert value(after, "hkv_batches_total") > 0
    assert value(after, "hkv_partitions") == 2


def test_only_get_metrics_is_served(hkv_admin):
    with pytest.raises(urllib.error.HTTPError) as e:
        urllib.request.urlopen(hkv_admin.admin + "/nope", timeout=5)
    assert e.value.code == 404
    req = urllib.request.Request(hkv_admin.admin + "/metrics", data=b"x", method="POST")
    with pytest.raises(urllib.error.HTTPError) as e:
        urllib.request.urlopen(req, timeout=5)
    assert e.value.code == 405
