"""`lakecluster run` scraped by a real Prometheus: the numbers it serves agree with the Delta log, every
series is labelled with the table, the driver JVM's heap is among them, and its `/readyz`, probed
once a second as a kubelet does, turns ready without waiting for a vacuum."""

from __future__ import annotations

import json
import signal
import subprocess
import time
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import DeltaTable

from tests.conftest import lakecluster_cmd, subprocess_env
from tests.generated_tables import SMALL
from tests.probes import Kubelet, assert_ready_before_a_vacuum_ended_and_from_then_on
from tests.prometheus import Prometheus

pytestmark = pytest.mark.integration

ROWS, PER_BATCH = 6000, 2000
VACUUM_PAUSE_S = 6


def log_actions(table: Path) -> tuple[list[list[dict]], list[list[dict]]]:
    """Actions of each commit, split into stream commits and compaction commits (by their commitInfo)."""
    stream, compaction = [], []
    for entry in sorted((table / "_delta_log").glob("*.json")):
        actions = [json.loads(line) for line in entry.read_text().splitlines()]
        info = next((a["commitInfo"] for a in actions if "commitInfo" in a), {})
        if not any("add" in a or "remove" in a for a in actions):
            continue
        if info.get("operation") == "OPTIMIZE":
            compaction.append(actions)
        else:
            stream.append(actions)
    return stream, compaction


def wait_until_settled(prom: Prometheus, table: Path, timeout_s: float = 600) -> None:
    """All rows in, nothing left to compact, and Prometheus has scraped the final table version."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            version = DeltaTable(str(table)).version()
        except Exception:  # the table does not exist yet
            version = None
        if (prom.value("lakecluster_stream_rows_total") == ROWS
                and prom.value("lakecluster_compaction_pending_groups") == 0
                and version is not None and prom.value("lakecluster_table_version") == version
                and (prom.value('lakecluster_compaction_groups_total{result="committed"}') or 0) > 0):  # fmt: skip
            return
        time.sleep(1)
    seen = prom.query('{job="lakecluster"}')
    raise AssertionError(f"not settled after {timeout_s}s: {seen}")


def test_prometheus_scrapes_run_and_the_counters_match_the_delta_log(prometheus: Prometheus, tmp_path: Path) -> None:
    table = tmp_path / "t"
    overrides = {**SMALL, "table.path": str(table), "metrics.port": str(prometheus.target_port),
                 "metrics.host": "127.0.0.1", "source.generator.max_rows": str(ROWS),
                 "source.generator.max_rows_per_trigger": str(PER_BATCH)}  # fmt: skip
    args = [f"--set={k}={v}" for k, v in overrides.items()]
    # Each vacuum held for a few seconds: readiness must not wait for it.
    env = subprocess_env(LAKECLUSTER_TEST_PAUSE_AT=f"vacuum:{VACUUM_PAUSE_S}")
    proc = subprocess.Popen(lakecluster_cmd(*args, "run"), env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)  # fmt: skip
    kubelet = Kubelet(prometheus.target_port)
    try:
        wait_until_settled(prometheus, table)
        # Ready once the first micro-batch and the first round committed, before the first
        # vacuum ended; and ready at every probe from then on.
        assert_ready_before_a_vacuum_ended_and_from_then_on(kubelet.stop())
        # Two more scrapes so that every counter, not only the ones polled above, is current.
        time.sleep(2.5)
        stream, compaction = log_actions(table)
        dt = DeltaTable(str(table))
        live = pa.table(dt.get_add_actions(flatten=True)).to_pydict()

        def adds(commits: list[list[dict]]) -> list[dict]:
            return [a["add"] for c in commits for a in c if "add" in a]

        removed = [a["remove"] for c in compaction for a in c if "remove" in a]
        # Spark's checkpoint lists every micro-batch it ran, the empty first one included.
        (commits,) = table.glob("_lakecluster/streams/*/checkpoint/commits")
        spark_batches = [p for p in commits.iterdir() if p.name.isdigit()]
        assert prometheus.value("lakecluster_stream_batches_total") == len(spark_batches) >= len(stream)
        assert prometheus.value("lakecluster_stream_files_total") == len(adds(stream))
        assert prometheus.value("sum(lakecluster_stream_quarantined_total)") == 0
        assert prometheus.value("lakecluster_stream_records_read_total") == ROWS
        assert prometheus.value("lakecluster_stream_bytes_written_total") == sum(a["size"] for a in adds(stream))
        assert prometheus.value("lakecluster_stream_batch_seconds_count") == len(spark_batches)
        assert dt.to_pyarrow_table().num_rows == ROWS

        assert prometheus.value('lakecluster_compaction_groups_total{result="committed"}') == len(compaction)
        assert prometheus.value("lakecluster_compaction_group_seconds_count") == len(compaction)
        assert prometheus.value("lakecluster_compaction_files_removed_total") == len(removed)
        assert prometheus.value("lakecluster_compaction_files_added_total") == len(adds(compaction))
        written = sum(a["size"] for a in adds(compaction))
        assert prometheus.value("lakecluster_compaction_bytes_written_total") == written
        assert prometheus.value("lakecluster_compaction_bytes_read_total") == sum(a["size"] for a in removed)
        # A round commits up to max_groups_per_run groups (one per partition here): fewer rounds than commits.
        per_round = int(SMALL["compaction.max_groups_per_run"])
        assert (prometheus.value("lakecluster_compaction_runs_total") or 0) >= max(1, -(-len(compaction) // per_round))

        assert prometheus.value("lakecluster_table_version") == dt.version()
        assert prometheus.value("lakecluster_table_files") == len(live["path"])
        assert prometheus.value("lakecluster_table_bytes") == sum(live["size_bytes"])
        assert prometheus.value("lakecluster_table_rows") == ROWS
        small = sum(1 for size in live["size_bytes"] if size < int(SMALL["compaction.min_file_bytes"]))
        assert prometheus.value("lakecluster_table_small_files") == small
        assert prometheus.value("lakecluster_table_file_size_bytes_gcount") == len(live["path"])
        assert prometheus.value("lakecluster_table_file_size_bytes_gsum") == sum(live["size_bytes"])
        assert prometheus.value('lakecluster_compaction_commit_attempts_total') == len(compaction)
        rewrite_ms = max(a["commitInfo"]["timestamp"] for c in compaction for a in c if "commitInfo" in a)
        assert prometheus.value("lakecluster_table_last_rewrite_timestamp_seconds") == rewrite_ms / 1000
        depth = prometheus.query("lakecluster_point_query_files_estimate")
        assert {dict(k)["column"] for k in depth} == {"s_city", "c_city", "p_brand"}
        assert all(1 <= v <= len(live["path"]) for v in depth.values())
        # One process, one table: every lakecluster series carries its name (table.path's last segment),
        # the driver JVM's heap among them.
        assert prometheus.query('count by (table) ({__name__=~"lakecluster_.+", job="lakecluster"})').keys() == {
            (("table", "t"),)}  # fmt: skip
        heap = prometheus.query('lakecluster_jvm_memory_bytes{area="heap", table="t"}')
        assert {dict(k)["kind"] for k in heap} == {"used", "committed", "max"} and all(v > 0 for v in heap.values())
        # The scrape itself is healthy: Prometheus marks the target up.
        assert prometheus.value('up{job="lakecluster"}') == 1
    finally:
        kubelet.stop()
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err[-3000:]
