"""Delta stats and partition values of the files lakecluster writes, as Delta's own writer gives them."""

from __future__ import annotations

import datetime as dt
import json
from decimal import Decimal

import numpy as np
import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq
from hypothesis import given, settings
from hypothesis import strategies as st

from lakecluster.parquet_files import (
    partition_value_string,
    split_by_partition,
)
from tests.parquet_writes import delta_stats

UTC = dt.UTC


def _stats(**columns: pa.Array) -> dict:
    return json.loads(delta_stats(pa.table(columns)))


def test_a_column_holding_nan_gets_no_maximum_because_spark_orders_nan_above_every_number() -> None:
    stats = _stats(x=pa.array([1.0, float("nan"), 3.0]), y=pa.array([1.0, 2.0, 3.0]))
    assert stats["minValues"]["x"] == 1.0 and "x" not in stats["maxValues"]
    assert (stats["minValues"]["y"], stats["maxValues"]["y"]) == (1.0, 3.0)
    assert stats["nullCount"]["x"] == 0


def test_the_last_microsecond_of_year_9999_leaves_the_upper_bound_out_instead_of_failing() -> None:
    last = dt.datetime(9999, 12, 31, 23, 59, 59, 999_999, tzinfo=UTC)
    stats = _stats(ts=pa.array([dt.datetime(2020, 1, 1, tzinfo=UTC), last], pa.timestamp("us", tz="UTC")))
    assert "ts" not in stats["maxValues"] and "ts" not in stats["minValues"]
    whole_ms = dt.datetime(9999, 12, 31, 23, 59, 59, 999_000, tzinfo=UTC)
    stats = _stats(ts=pa.array([whole_ms], pa.timestamp("us", tz="UTC")))
    assert stats["maxValues"]["ts"] == "9999-12-31T23:59:59.999000Z"


def test_years_before_1000_keep_four_digits() -> None:
    ts = dt.datetime(999, 1, 2, 3, 4, 5, 6000, tzinfo=UTC)
    stats = _stats(ts=pa.array([ts], pa.timestamp("us", tz="UTC")), d=pa.array([dt.date(99, 1, 2)], pa.date32()))
    assert stats["minValues"]["ts"] == "0999-01-02T03:04:05.006000Z"
    assert stats["minValues"]["d"] == "0099-01-02"
    assert partition_value_string(ts) == "0999-01-02T03:04:05.006000Z"


def test_partition_values_are_spelled_as_delta_sparks_writer_spells_them() -> None:
    # Spelled by delta-spark 4.4 for the same values (INSERT into a table partitioned by them).
    assert partition_value_string("") is None
    assert partition_value_string(Decimal("0E-8")) == "0.00000000"
    assert partition_value_string(Decimal("1.50000000")) == "1.50000000"
    ts = dt.datetime(2024, 1, 2, 3, 4, 5, 123456, tzinfo=UTC)
    assert partition_value_string(ts) == "2024-01-02T03:04:05.123456Z"
    assert partition_value_string(dt.date(2024, 1, 2)) == "2024-01-02"
    assert partition_value_string(True) == "true"
    assert partition_value_string(np.float32(0.1)) == "0.1"
    assert partition_value_string(np.float32(1e20)) == "1.0E20"
    assert [partition_value_string(v) for v in (1.5, 100.0, 1e-5, 123456789.0, -0.0, 1e7, 0.001)] == \
        ["1.5", "100.0", "1.0E-5", "1.23456789E8", "-0.0", "1.0E7", "0.001"]


def test_a_float32_partition_keeps_its_short_spelling() -> None:
    table = pa.table({"f": pa.array([0.1, 0.1, 2.5], pa.float32()), "row": pa.array([0, 1, 2])})
    values = sorted(partition_value_string(v["f"]) for v, _ in split_by_partition(table, ["f"]))
    assert values == ["0.1", "2.5"]


@settings(max_examples=30, deadline=None)
@given(st.lists(st.tuples(*[st.integers(0, 5)] * 4), min_size=1, max_size=60), st.integers(0, 10_000))
def test_rows_are_grouped_by_all_their_partition_values(rows: list[tuple[int, ...]], spread: int) -> None:
    # Spread values make the columns' dictionaries large; each group holds exactly its rows.
    cols = {f"p{i}": pa.array([r[i] * spread + i for r in rows], pa.int64()) for i in range(4)}
    table = pa.table({**cols, "row": pa.array(np.arange(len(rows)))})
    groups = split_by_partition(table, list(cols))
    expected: dict[tuple[int, ...], list[int]] = {}
    for n, r in enumerate(rows):
        expected.setdefault(tuple(r[i] * spread + i for i in range(4)), []).append(n)
    got = {tuple(values[f"p{i}"] for i in range(4)): part["row"].to_pylist() for values, part in groups}
    assert got == expected


def test_write_rows_writes_the_rows_in_the_order_given_a_row_group_at_a_time(tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    from lakecluster import parquet_files

    monkeypatch.setattr(parquet_files, "ROW_GROUP_ROWS", 1000)
    chunks = [pa.table({"id": pa.array(range(i, i + 700), pa.int64()), "s": [f"v{j}" for j in range(i, i + 700)]})
              for i in range(0, 3500, 700)]  # fmt: skip
    table = pa.concat_tables(chunks)  # several chunks, as a reducer's shuffled batches are
    order = np.random.default_rng(1).permutation(table.num_rows)
    writer = parquet_files.FileWriter(pafs.LocalFileSystem(), str(tmp_path), "f.parquet", table.schema, {})
    writer.write_rows(table, order[:3400])
    written = writer.close()
    back = pq.ParquetFile(tmp_path / "f.parquet")
    assert back.read().equals(table.take(pa.array(order[:3400])).combine_chunks())
    assert [back.metadata.row_group(i).num_rows for i in range(back.metadata.num_row_groups)] == [1000] * 3 + [400]
    stats = json.loads(written.stats)
    assert written.num_records == stats["numRecords"] == 3400
    ids = order[:3400]
    assert (stats["minValues"]["id"], stats["maxValues"]["id"]) == (int(ids.min()), int(ids.max()))


WRITE_ROWS_MEMORY = """
import resource, sys
import numpy as np, pyarrow as pa, pyarrow.fs as pafs
from lakecluster.parquet_files import FileWriter
rng = np.random.default_rng(2)
table = pa.concat_tables([pa.table({f"c{i}": rng.random(40_000) for i in range(24)}) for _ in range(40)])
order = rng.permutation(table.num_rows)
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss << 10
writer = FileWriter(pafs.LocalFileSystem(), sys.argv[1], "f.parquet", table.schema, {}, stats_columns=())
writer.write_rows(table, order)
writer.close()
print(table.nbytes, (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss << 10) - before)
"""


def test_write_rows_never_holds_a_sorted_copy_of_the_file(tmp_path) -> None:  # type: ignore[no-untyped-def]
    import subprocess
    import sys

    from tests.conftest import subprocess_env

    out = subprocess.run([sys.executable, "-c", WRITE_ROWS_MEMORY, str(tmp_path)], env=subprocess_env(),
                         capture_output=True, text=True, timeout=120, check=True)  # fmt: skip
    table_bytes, growth = map(int, out.stdout.split())
    # Taking every row at once (a sorted copy, and the chunks concatenated first) grows by more
    # than the table; a row group at a time by a few row groups.
    assert table_bytes > 250 << 20 and growth < table_bytes // 3, (table_bytes, growth)
