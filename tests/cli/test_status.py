"""``lakecluster status``: the table's health in one screen, every number checked against the log."""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import CommitProperties, DeltaTable, write_deltalake

from lakecluster.cli.status import table_status
from lakecluster.compaction.loop import Compactor
from lakecluster.compaction.planner import plan_files
from lakecluster.config import StorageConfig
from lakecluster.index.spec import IndexSpec
from lakecluster.index.sync import sync
from lakecluster.stream.source import open_source
from lakecluster.table import LakeTable, user_metadata
from lakecluster.table.location import DeltaLocation
from tests.cli.conftest import run_cli, write_ssb_table
from tests.conftest import lakecluster_cmd, subprocess_env
from tests.generated_tables import fill, generator_config
from tests.snapshot_files import snapshot_files

pytestmark = pytest.mark.integration


def test_status_reports_the_table_as_the_log_and_the_services_left_it(spark, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    table = tmp_path / "t"
    config = generator_config(table, rows=12_000, per_batch=3_000, **{"index.sync_after_compaction": "false"})
    fill(spark, config)

    before = table_status(LakeTable(config), open_source(config))
    dt = DeltaTable(str(table))
    actions = pa.table(dt.get_add_actions(flatten=True))
    sizes = actions["size_bytes"].to_pylist()
    assert before["version"] == dt.version()
    assert before["files"] == len(sizes) and before["bytes"] == sum(sizes) and before["rows"] == 12_000
    assert before["small_files"] == sum(s < config.compaction.min_file_bytes for s in sizes)
    assert before["file_bytes"]["max"] == max(sizes)
    location = DeltaLocation(str(table), StorageConfig())
    _, files = snapshot_files(location, config.table.columns, config.table.partition_by)
    expected_plan = plan_files(files, dt.version(), config.compaction)
    assert before["compaction"]["pending_groups"] == len(expected_plan.groups) > 0
    assert before["compaction"]["last_rewrite"] is None and before["vacuum"]["last_run"] is None
    assert before["sketches"]["versions_behind"] == 0
    assert before["index"] == {"delta_version": None, "versions_behind": None}
    assert list(before["streams"]) == [LakeTable(config).stream_id]
    assert before["streams"][LakeTable(config).stream_id]["version"] == dt.version()
    assert "lag" not in before, "the generator has no brokers to lag behind"

    results = Compactor(config, spark=spark).run_once()
    assert results and all(r.result == "committed" for r in results)
    after = table_status(LakeTable(config), open_source(config))
    assert after["version"] == before["version"] + len(results)
    assert after["compaction"]["last_rewrite"]["version"] == results[-1].version
    assert int(after["compaction"]["last_rewrite"]["metrics"]["numAddedFiles"]) == results[-1].files_out
    assert after["files"] < before["files"]
    for column in config.table.clustering_columns:  # the rewrite clustered every column
        assert after["clustering"][column]["point_query_files"] < before["clustering"][column]["point_query_files"]
    assert after["sketches"]["versions_behind"] == len(results)

    sync(IndexSpec.of(LakeTable(config)))
    index = table_status(LakeTable(config), open_source(config))["index"]
    assert index == {"delta_version": after["version"], "versions_behind": 0}


def test_status_command_json_and_text(spark, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    table = tmp_path / "t"
    config = generator_config(table, rows=2_000, per_batch=1_000)
    fill(spark, config)
    args = [f"--set=table.path={table}", '--set=table.partition_by=["d_year"]']

    as_json = subprocess.run(lakecluster_cmd(*args, "--json", "status"), capture_output=True, text=True,
                             env=subprocess_env(), timeout=120)  # fmt: skip
    assert as_json.returncode == 0, as_json.stderr
    data = json.loads(as_json.stdout)
    assert data["rows"] == 2_000 and data["version"] == DeltaTable(str(table)).version()
    # The stream's second micro-batch as its commit recorded it (the sink's own fields).
    (batch,) = [s["last_batch"] for s in data["streams"].values()]
    assert batch["batch_id"] == 1 and batch["rows"] == 1_000 and batch["quarantined"] == 0
    assert batch["offsets"] == {"rows": {"start": 1_000, "end": 2_000}}
    d = batch["durations_ms"]
    assert all(isinstance(d[p], int) and d[p] >= 0 for p in ("read", "parse", "write", "commit"))
    assert d["parse"] > 0 and d["write"] > 0 and 0 < d["job"] < d["batch"] and d["commit"] < d["batch"]
    assert batch["processed_rows_per_second"] == round(1_000_000 / d["batch"], 1)
    assert batch["input_rows_per_second"] is not None  # the batch before it ran in the same process

    as_text = subprocess.run(lakecluster_cmd(*args, "status"), capture_output=True, text=True,
                             env=subprocess_env(), timeout=120)  # fmt: skip
    assert as_text.returncode == 0, as_text.stderr
    assert f"version    {data['version']}" in as_text.stdout and "2,000 rows" in as_text.stdout
    assert "last batch 1 (txn " in as_text.stdout and "offsets    rows: 1,000 -> 2,000" in as_text.stdout

    missing = subprocess.run(lakecluster_cmd(f"--set=table.path={tmp_path / 'nope'}", "status"), capture_output=True,
                             text=True, env=subprocess_env(), timeout=120)  # fmt: skip
    assert missing.returncode == 1 and "Traceback" not in missing.stderr
    assert len(missing.stderr.strip().splitlines()) == 1, missing.stderr
    assert not (tmp_path / "nope").exists()


def test_status_shows_each_streams_last_batch_from_its_commit_metadata(tmp_path: Path) -> None:
    """The progress view reads only the commit a micro-batch made (no Spark: a delta-rs commit
    carrying the fields the sink writes, with Delta's own commit timestamp)."""
    table = write_ssb_table(tmp_path / "lineorder")
    data = DeltaTable(str(table)).to_pyarrow_table().slice(0, 400)
    started_ms = int(time.time() * 1000) - 2_000  # the batch began 2 s before its commit
    fields = {"stream": "s1", "batch": 7, "txn": 107, "source": "kafka", "rows": 400, "quarantined": 3,
              "offsets": {"orders": {"0": 1_400, "1": 1_050}}, "start_offsets": {"orders": {"0": 1_200, "1": 850}},
              "started_ms": started_ms, "since_previous_ms": 4_000, "job_ms": 1_500,
              "phases_ms": {"read": 300, "parse": 900, "write": 600}, "commit_started_ms": started_ms + 1_600}
    write_deltalake(str(table), data, mode="append", partition_by=["d_year"],
                    commit_properties=CommitProperties(custom_metadata={"userMetadata": user_metadata(**fields)}))
    committed_ms = DeltaTable(str(table)).history(1)[0]["timestamp"]

    proc = run_cli("--set", f"table.path={table}", "--json", "status", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    batch = json.loads(proc.stdout)["streams"]["s1"]["last_batch"]
    assert batch["batch_id"] == 7 and batch["txn_version"] == 107 and batch["rows"] == 400
    assert batch["quarantined"] == 3
    assert batch["durations_ms"] == {"read": 300, "parse": 900, "write": 600, "job": 1_500,
                                     "commit": committed_ms - started_ms - 1_600, "batch": committed_ms - started_ms}
    assert batch["offsets"] == {"orders-0": {"start": 1_200, "end": 1_400}, "orders-1": {"start": 850, "end": 1_050}}
    assert batch["input_rows_per_second"] == 100.0  # 400 rows over the 4 s since the previous batch began
    assert batch["processed_rows_per_second"] == round(400_000 / (committed_ms - started_ms), 1)

    text = run_cli("--set", f"table.path={table}", "status", cwd=tmp_path).stdout
    assert "last batch 7 (txn 107): 400 rows, 3 quarantined; input 100 rows/s, processed" in text
    assert "task time read 0.30s, parse 0.90s, write 0.60s" in text
    assert "offsets    orders-0: 1,200 -> 1,400" in text and "offsets    orders-1: 850 -> 1,050" in text
