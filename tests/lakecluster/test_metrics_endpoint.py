"""The metrics endpoint's own parts: histograms fed in bulk, the file-size distribution, the probes."""

from __future__ import annotations

import json
import urllib.error
import urllib.request

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from lakecluster import metrics
from lakecluster.health import HEALTH
from tests.services.ports import free_port

BUCKETS = (1.0, 2.5, 5.0, 10.0, 60.0)


def _samples(registry: CollectorRegistry) -> dict[tuple[str, str], float]:
    out = {}
    for family in text_string_to_metric_families(generate_latest(registry).decode()):
        for s in family.samples:
            out[(s.name, s.labels.get("le", ""))] = s.value
    return out


@settings(max_examples=50, deadline=None)
@given(st.lists(st.tuples(st.floats(0, 100, allow_nan=False), st.integers(1, 1000)), max_size=30))
def test_weighted_histogram_counts_like_one_observation_per_record(pairs: list[tuple[float, int]]) -> None:
    registry = CollectorRegistry()
    h = metrics.WeightedHistogram("d_seconds", "delay", BUCKETS, registry)
    h.observe_many([v for v, _ in pairs], [n for _, n in pairs])
    got = _samples(registry)
    values = np.repeat([v for v, _ in pairs], [n for _, n in pairs])
    for bound in BUCKETS:
        assert got[("d_seconds_bucket", str(bound))] == int((values <= bound).sum())
    assert got[("d_seconds_bucket", "+Inf")] == len(values) == got[("d_seconds_count", "")]
    assert np.isclose(got[("d_seconds_sum", "")], float(values.sum()))


def test_file_size_distribution_is_replaced_at_each_observation() -> None:
    registry = CollectorRegistry()
    d = metrics.SizeDistribution("s_bytes", "sizes", (1024.0, 4096.0), registry)
    assert _samples(registry) == {}  # nothing before the first observation
    d.set(np.array([10, 1024, 1025, 9000, 9000]))
    d.set(np.array([100, 2000, 5000]))
    got = _samples(registry)
    assert got[("s_bytes_bucket", "1024.0")] == 1
    assert got[("s_bytes_bucket", "4096.0")] == 2
    assert got[("s_bytes_bucket", "+Inf")] == 3
    assert got[("s_bytes_gcount", "")] == 3
    assert got[("s_bytes_gsum", "")] == 7100


def _get(url: str) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(url, timeout=10) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def test_endpoint_serves_metrics_and_the_probes_follow_the_components() -> None:
    port = metrics.serve(free_port(), "127.0.0.1")  # the process's one endpoint (an earlier test may have it)
    base = f"http://127.0.0.1:{port}"
    HEALTH.reset()
    try:
        status, body = _get(f"{base}/metrics")
        assert status == 200 and b'lakecluster_build_info{version="' in body
        assert _get(f"{base}/readyz")[0] == 503  # no component yet: nothing is ready
        HEALTH.register("stream")
        HEALTH.register("compactor")
        HEALTH.ready("stream")
        status, body = _get(f"{base}/readyz")
        assert status == 503 and json.loads(body)["components"]["compactor"]["ready"] is False
        assert _get(f"{base}/healthz")[0] == 200
        HEALTH.ready("compactor")
        assert _get(f"{base}/readyz")[0] == 200
        HEALTH.failed("compactor", "fatal fault: disk gone")
        status, body = _get(f"{base}/healthz")
        assert status == 503 and json.loads(body)["components"]["compactor"]["failed"] == "fatal fault: disk gone"
        assert _get(f"{base}/readyz")[0] == 503
    finally:
        HEALTH.reset()
