"""``lakecluster status``: the table's health in one screen, every number checked against the log."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import DeltaTable

from lakecluster.cli.status import table_status
from lakecluster.compaction.loop import Compactor
from lakecluster.compaction.planner import plan_files, snapshot_files
from lakecluster.index.spec import IndexSpec
from lakecluster.index.sync import sync
from lakecluster.stream.source import open_source
from lakecluster.table import LakeTable
from tests.conftest import lakecluster_cmd, subprocess_env
from tests.generated_tables import fill, generator_config

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
    expected_plan = plan_files(snapshot_files(dt, config.table.partition_by)[0], dt.version(), config.compaction)
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

    as_text = subprocess.run(lakecluster_cmd(*args, "status"), capture_output=True, text=True,
                             env=subprocess_env(), timeout=120)  # fmt: skip
    assert as_text.returncode == 0, as_text.stderr
    assert f"version    {data['version']}" in as_text.stdout and "2,000 rows" in as_text.stdout

    missing = subprocess.run(lakecluster_cmd(f"--set=table.path={tmp_path / 'nope'}", "status"), capture_output=True,
                             text=True, env=subprocess_env(), timeout=120)  # fmt: skip
    assert missing.returncode == 1 and "Traceback" not in missing.stderr
    assert len(missing.stderr.strip().splitlines()) == 1, missing.stderr
    assert not (tmp_path / "nope").exists()
