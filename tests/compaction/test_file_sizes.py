"""Output files of about ``compaction.target_file_bytes``: sized from the rows and what the table's
compacted files hold per row, not from the input's bytes (which compress worse)."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import DeltaTable

from lakecluster.compaction.group_rewrite import GroupRewriter
from lakecluster.compaction.loop import Compactor
from lakecluster.compaction.planner import Group
from lakecluster.table.live_files import DataFile
from tests.compaction.test_compaction import ENGINES
from tests.conftest import read_delta
from tests.generated_tables import generator_config, row_multiset


def test_expected_files_counts_rows_at_the_compacted_bytes_per_row() -> None:
    files = tuple(DataFile(f"f{i}", 1_000, 100, (), 0, None) for i in range(10))  # 10,000 bytes, 1,000 rows
    group = Group((), files, 1, "new files")
    assert group.expected_files(1_000) == 10  # from the input's bytes
    assert group.expected_files(1_000, bytes_per_row=7.5) == 8  # 7,500 bytes expected: the nearest count
    assert group.expected_files(1_000, bytes_per_row=7.4) == 7
    assert group.expected_files(1_000, bytes_per_row=30.0) == 10, "never more than the input's bytes"
    assert group.expected_files(100_000, bytes_per_row=7.5) == 1
    assert group.expected_files(1_000, bytes_per_row=2.0) == 5, "at least half the input's bytes"
    unknown = Group((), (*files[:9], DataFile("f9", 1_000, 0, (), 0, None)), 1, "new files")
    assert unknown.expected_files(1_000, bytes_per_row=7.5) == 10, "a file without a row count: the bytes"


@pytest.mark.parametrize("engine", ENGINES)
def test_files_written_after_the_first_compaction_are_about_the_target_size(spark, filled, tmp_path: Path,
                                                                            engine: str) -> None:  # type: ignore[no-untyped-def]  # fmt: skip
    """The stream's files hold more bytes per row than compacted files: the first group, with no
    compacted file to learn from, writes files a good deal under the target; the groups after it
    count their output from the rows at the bytes per row of the compacted files, and come out at
    about the target. (Sized from the input's bytes, the second group's came out at 0.69 x.)"""
    table = tmp_path / "t"
    # Stream files of 300 rows: each carries a footer and page headers for every column, which the
    # compacted files of ~1,500 rows spread over more rows (at 128 MiB files, sorting is what compresses).
    config = generator_config(table, rows=48_000, per_batch=6_000, **{"table.partition_by": "[]",
                              "stream.max_records_per_file": "300"}, **ENGINES[engine])  # fmt: skip
    filled(config)
    before = read_delta(table)
    stream_files = sorted(pa.table(DeltaTable(str(table)).get_add_actions(flatten=True))["path"].to_pylist())
    target = config.compaction.target_file_bytes
    first = Compactor(config, spark=spark, scope=lambda: stream_files[: len(stream_files) // 2])
    assert first.compacted_bytes_per_row() is None
    [a] = first.run_once()
    rest = Compactor(config, spark=spark, scope=lambda: stream_files[len(stream_files) // 2 :])
    per_row = rest.compacted_bytes_per_row()
    assert per_row is not None and per_row < a.group.bytes / a.group.rows
    [b] = rest.run_once()
    assert a.result == b.result == "committed"
    assert b.files_out <= b.group.expected_files(target, per_row) < b.group.expected_files(target)

    def mean_size(result) -> float:  # type: ignore[no-untyped-def]
        return result.bytes_out / result.files_out

    assert mean_size(a) < 0.9 * target, "the first group sizes from the input's bytes"
    assert 0.9 * target <= mean_size(b) <= 1.15 * target
    assert row_multiset(read_delta(table)) == row_multiset(before)
    actions = pa.table(DeltaTable(str(table)).get_add_actions(flatten=True))
    assert sum(actions["num_records"].to_pylist()) == 48_000


def test_the_bytes_per_row_are_the_groups_partitions_when_it_has_compacted_files() -> None:
    """A partition of wide rows beside a table of narrow ones: its own figure, not the table's."""
    live = pa.table({
        "size": pa.array([100, 100, 9_000, 50], pa.int64()), "rows": pa.array([10, 10, 10, 10], pa.int64()),
        "partition.kind": ["narrow", "narrow", "wide", None], "generation": pa.array([1, 2, 1, 0], pa.int32()),
    })  # fmt: skip

    class View:
        def snapshot(self) -> tuple[int, pa.Table]:
            return 3, live

    compactor = GroupRewriter.__new__(GroupRewriter)
    compactor.live = View()  # type: ignore[assignment]
    assert compactor.compacted_bytes_per_row({"kind": "wide"}) == 900
    assert compactor.compacted_bytes_per_row({"kind": "narrow"}) == 10
    assert compactor.compacted_bytes_per_row({"kind": None}) == 9_200 / 30, "none compacted there: the table's"
    assert compactor.compacted_bytes_per_row() == 9_200 / 30
