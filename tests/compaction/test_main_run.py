"""``compaction.main_run_merge_ratio``: a partition merged into one run on a real Delta table."""

from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path

import pyarrow as pa
from deltalake import DeltaTable

from lakecluster.compaction.loop import Compactor
from tests.conftest import duckdb_connection, read_delta
from tests.generated_tables import generator_config, row_multiset


def _runs(table: Path) -> dict[str | None, int]:
    from tests.file_names import file_run

    runs: dict[str | None, int] = {}
    for path in pa.table(DeltaTable(str(table)).get_add_actions(flatten=True))["path"].to_pylist():
        runs[file_run(path)[1]] = runs.get(file_run(path)[1], 0) + 1
    return runs


def test_a_partition_with_enough_bytes_outside_its_main_run_becomes_one_run(spark, filled, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    table = tmp_path / "t"
    config = generator_config(table, rows=24_000, per_batch=6_000, **{"table.partition_by": "[]"})
    filled(config)
    before = read_delta(table)
    stream_files = sorted(pa.table(DeltaTable(str(table)).get_add_actions(flatten=True))["path"].to_pylist())
    [first] = Compactor(config, spark=spark, scope=lambda: stream_files[: len(stream_files) // 3]).run_once()
    assert first.result == "committed" and len(_runs(table)) == 2  # a run, and the stream's files (None)
    # Off (the default): the new files become a run of their own beside the first.
    off = Compactor(config, spark=spark)
    assert all(not g.reason.startswith("merge into the main run") for g in off.plan().groups)
    merging = replace(config, compaction=replace(config.compaction, main_run_merge_ratio=0.5))
    # compact --where: a scope of some files of the partition never merges them into a main run.
    everything = pa.table(DeltaTable(str(table)).get_add_actions(flatten=True))["path"].to_pylist()
    scoped = Compactor(merging, spark=spark, scope=lambda: everything)
    assert scoped.plan().groups and all(not g.reason.startswith("merge into") for g in scoped.plan().groups)
    on = Compactor(merging, spark=spark)
    [group] = on.plan().groups
    share = re.fullmatch(r"merge into the main run: (\d+)% of its bytes outside it, 0 other run\(s\) and "
                         r"(\d+) new file\(s\)", group.reason)  # fmt: skip
    assert share and int(share[1]) >= 50 and int(share[2]) == _runs(table)[None]
    assert len(group.files) == sum(_runs(table).values()), "every live file of the partition"
    [merged] = on.run_once()
    assert merged.result == "committed" and merged.group.generation == 2
    runs = _runs(table)
    assert len(runs) == 1 and None not in runs, runs
    after = read_delta(table)
    assert row_multiset(after) == row_multiset(before)
    assert duckdb_connection().execute(f"SELECT count(*) FROM delta_scan('{table}')").fetchone() == (24_000,)
    assert not on.plan().groups, "one run and nothing outside it: nothing to do"
