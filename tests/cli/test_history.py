"""``lakecluster history``: per version what changed, which service wrote it and how long it took,
from the log alone (no Spark), checked against the table's own files as delta-rs reads them."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pyarrow as pa
from deltalake import CommitProperties, DeltaTable, write_deltalake

from lakecluster.table.metadata import user_metadata
from tests.cli.conftest import run_cli, tree, write_ssb_table


def _files(table: Path) -> dict[str, int]:
    adds = pa.table(DeltaTable(str(table)).get_add_actions(flatten=True)).to_pylist()
    return {a["path"]: a["size_bytes"] for a in adds}


def test_history_shows_each_versions_changes_service_and_duration(tmp_path: Path) -> None:
    table = write_ssb_table(tmp_path / "lineorder")
    rows = DeltaTable(str(table)).to_pyarrow_table()
    started_ms = int(time.time() * 1000) - 2_000
    stream = user_metadata(stream="s1", batch=7, txn=107, rows=400, started_ms=started_ms)
    write_deltalake(str(table), rows.slice(0, 400), mode="append", partition_by=["d_year"],
                    commit_properties=CommitProperties(custom_metadata={"userMetadata": stream}))  # fmt: skip
    before = _files(table)
    everything = DeltaTable(str(table)).to_pyarrow_table()
    rewrite = user_metadata(operation="compaction", generation="1", run="r1", seconds="3.5")
    write_deltalake(str(table), everything, mode="overwrite", partition_by=["d_year"],
                    commit_properties=CommitProperties(custom_metadata={"userMetadata": rewrite}))  # fmt: skip
    after = _files(table)
    left = tree(table)

    proc = run_cli("--set", f"table.path={table}", "--json", "history", "--limit", "2", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert data["latest_version"] == 2 and [v["version"] for v in data["versions"]] == [2, 1]
    compaction, batch = data["versions"]
    assert compaction["service"] == "compactor (generation 1, run r1)" and compaction["seconds"] == 3.5
    assert (compaction["files_added"], compaction["files_removed"]) == (len(after), len(before))
    assert (compaction["bytes_added"], compaction["bytes_removed"]) == (sum(after.values()), sum(before.values()))
    assert compaction["rows_added"] == everything.num_rows
    assert batch["service"] == "stream s1, batch 7" and batch["rows_added"] == 400
    assert batch["files_removed"] == 0 and 1.5 <= batch["seconds"] <= 10
    assert tree(table) == left, "history wrote to the table"

    text = run_cli("--set", f"table.path={table}", "history", cwd=tmp_path)
    assert text.returncode == 0, text.stderr
    lines = text.stdout.splitlines()
    assert lines[0] == f"table {table}: 3 version(s) shown of 3"
    assert "compactor (generation 1, run r1)" in lines[1] and f"files +{len(after)} -{len(before)}" in lines[1]
    assert "stream s1, batch 7" in lines[2] and "rows +400 -0" in lines[2]
    assert "WRITE" in lines[3] or "CREATE" in lines[3]


def test_history_of_a_missing_table_is_one_line(tmp_path: Path) -> None:
    proc = run_cli("--set", f"table.path={tmp_path / 'nope'}", "history", cwd=tmp_path)
    assert proc.returncode == 1 and proc.stderr.startswith("lakecluster: TableNotFoundError: no Delta table at ")
    assert proc.stderr.count("\n") == 1
