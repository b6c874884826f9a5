"""A vacuum with nothing old enough to delete skips Delta's VACUUM (and Spark) when the log shows a
recent vacuum or creation; a file old enough, or a log without a vacuum for a day, runs it.

The CLI runs with a JAVA_HOME that cannot start Spark: a skipped vacuum finishes, one that runs
Delta's VACUUM fails at Spark's start, which shows that it would have run.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import DeltaTable

from lakecluster.compaction.vacuum import any_file_before
from lakecluster.table import LakeTable
from tests.cli.conftest import run_cli, write_ssb_table


def _vacuum(table: Path, *flags: str) -> tuple[int, str, str]:
    proc = run_cli(f"--set=table.path={table}", "vacuum", *flags, cwd=table.parent)
    return proc.returncode, proc.stdout, proc.stderr


def test_a_young_table_is_vacuumed_in_a_second_without_spark_or_a_commit(tmp_path: Path) -> None:
    table = write_ssb_table(tmp_path / "t")
    version = DeltaTable(str(table)).version()
    started = time.monotonic()
    status, out, err = _vacuum(table)
    assert status == 0, err
    assert time.monotonic() - started < 10
    assert "deleted 0 file(s)" in out and "no file older than the retention of 168 h" in out
    assert DeltaTable(str(table)).version() == version  # no VACUUM START / END commits
    status, out, err = _vacuum(table, "--dry-run")
    assert status == 0 and "would delete 0 file(s)" in out, err


def _age(path: Path, hours: float) -> None:
    old = time.time() - hours * 3600
    os.utime(path, (old, old))


def test_a_file_older_than_the_retention_runs_deltas_vacuum(tmp_path: Path) -> None:
    table = write_ssb_table(tmp_path / "t")
    _age(next(table.rglob("*.parquet")), hours=200)  # in a partition directory: d_year=...
    status, _, err = _vacuum(table)
    assert status == 1 and "java" in err.lower(), err  # it went on to start Spark for Delta's VACUUM


def test_a_log_without_a_vacuum_for_a_day_runs_deltas_vacuum(tmp_path: Path) -> None:
    """The alert on vacuums reads the log: a day without a recorded one, and VACUUM runs even with
    nothing to delete."""
    table = write_ssb_table(tmp_path / "t")
    first = table / "_delta_log" / f"{0:020d}.json"
    actions = [json.loads(line) for line in first.read_text().splitlines()]
    for action in actions:
        if "commitInfo" in action:
            action["commitInfo"]["timestamp"] -= 2 * 86_400_000
    first.write_text("".join(json.dumps(a) + "\n" for a in actions))
    status, _, err = _vacuum(table)
    assert status == 1 and "java" in err.lower(), err


@pytest.mark.parametrize(("place", "counted"), [
    ("_delta_log/x.json", False), ("_lakecluster/sketches/x", False), (".hidden/x.parquet", False),
    ("_c=1/part-0.parquet", True), ("_change_data/cdc-0.parquet", True), ("d_year=1990/part-x.parquet", True),
])  # fmt: skip
def test_old_files_count_where_deltas_vacuum_lists_them(tmp_path: Path, place: str, counted: bool) -> None:
    table = write_ssb_table(tmp_path / "t")
    location = LakeTable.at(str(table)).delta
    cutoff = time.time() - 3600
    assert not any_file_before(location, cutoff)
    path = table / place
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"x")
    _age(path, hours=2)
    assert any_file_before(location, cutoff) is counted


def test_a_history_read_only_part_of_the_way_back_does_not_count_as_the_creation(tmp_path: Path) -> None:
    """A long log is read back only so far: its oldest commit read is not the table's creation,
    and without a vacuum among the commits read, VACUUM runs."""
    from deltalake import write_deltalake

    from lakecluster.compaction.vacuum import recently_recorded
    from lakecluster.table.state import CommitHistory

    table = tmp_path / "t"
    for i in range(6):
        write_deltalake(str(table), pa.table({"x": [i]}), mode="append")
    lake = LakeTable.at(str(table))
    lake._history = CommitHistory(lake.delta, scan=3)  # as a fresh process reads a log of thousands
    assert not recently_recorded(lake)
    assert recently_recorded(LakeTable.at(str(table)))  # read back to version 0: a young table
