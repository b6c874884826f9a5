"""Reading the query listener's capture files back (``workload.capture``), and deleting old ones:
records in the listener's format (docs/workload.md), written here by hand so every case of a bad
file is exact. What the listener itself writes is checked in tests/workload/test_listener.py."""

from __future__ import annotations

import datetime as dt
import logging
import os
import time
from decimal import Decimal
from pathlib import Path

import pytest

from lakecluster.config import WorkloadConfig
from lakecluster.table import LakeTable
from lakecluster.workload.capture import expire, predicate_of, read_capture, shape_of
from lakecluster.workload.queries import Predicate
from tests.workload_records import record, write

NOW = time.time()


def test_each_recorded_filter_becomes_the_predicate_tune_scores() -> None:
    f = {"column": "c", "op": "="}
    assert predicate_of({**f, "type": "string", "value": "A"}) == Predicate("c", "eq", ("A",))
    assert predicate_of({**f, "type": "bigint", "value": 7}) == Predicate("c", "eq", (Decimal(7),))
    assert predicate_of({**f, "type": "decimal(18,2)", "value": "12.50"}) == Predicate("c", "eq", (Decimal("12.50"),))
    assert predicate_of({**f, "type": "date", "value": "1995-01-31"}) == Predicate("c", "eq", (dt.date(1995, 1, 31),))
    assert predicate_of({**f, "type": "timestamp", "value": "2026-01-01T10:00:00.5Z"}) == Predicate(
        "c", "eq", (dt.datetime(2026, 1, 1, 10, 0, 0, 500000, tzinfo=dt.UTC),))
    assert predicate_of({**f, "type": "double", "value": "NaN"}).values[0] != 0  # type: ignore[union-attr]
    assert predicate_of({**f, "type": "boolean", "value": True}) == Predicate("c", "eq", (True,))
    rng = {"column": "q", "type": "int"}
    assert predicate_of({**rng, "op": "<=", "value": 5}) == Predicate("q", "range", high=Decimal(5))
    assert predicate_of({**rng, "op": ">", "value": 5}) == Predicate("q", "range", low=Decimal(5))
    assert predicate_of({**rng, "op": "in", "values": [1, 2]}) == Predicate("q", "eq", (Decimal(1), Decimal(2)))
    # A long IN list kept as count, min and max: the range between them (a conservative estimate).
    assert predicate_of({**rng, "op": "in", "count": 40, "min": 1, "max": 90}) == Predicate(
        "q", "range", low=Decimal(1), high=Decimal(90))
    assert predicate_of({"column": "s", "type": "string", "op": "starts_with", "value": "AB"}) == Predicate(
        "s", "range", low="AB", high="AB\U0010ffff")
    for op in ("!=", "not_in", "is_null", "is_not_null", "other"):  # restrict no range of a column
        assert predicate_of({**rng, "op": op, "value": 1, "values": [1]}) is None
    assert predicate_of({**rng, "type": "binary", "op": "=", "value": "x"}) is None


def test_shapes_name_columns_and_operators_without_values() -> None:
    filters = [{"column": "qty", "op": ">="}, {"column": "qty", "op": "<"}, {"column": "city", "op": "="},
               {"column": "city", "op": "is_not_null"}, {"column": "part", "op": "in"},
               {"op": "other", "columns": ["a", "b"]}]  # fmt: skip
    assert shape_of(filters) == "city = AND part IN AND qty BETWEEN AND other(a,b)"
    assert shape_of([]) == ""


def test_records_read_back_oldest_first_with_typed_predicates(tmp_path: Path) -> None:
    t0 = (NOW - 3600) * 1000
    write(tmp_path, t0 + 1000, [record(t0 + 1000, 2, filters=[{"column": "q", "type": "int", "op": ">", "value": 4}],
                                       partition_filters=[{"column": "p", "type": "int", "op": "=", "value": 1}])])
    write(tmp_path, t0, [record(t0, 1, filters=[{"column": "c", "type": "string", "op": "=", "value": "X"}])],
          app="local-2")  # fmt: skip
    capture = read_capture(LakeTable.at(str(tmp_path)), WorkloadConfig())
    assert capture.skipped == [] and capture.files == 2
    assert [s.execution_id for s in capture.scans] == [1, 2]
    assert capture.scans[1].predicates == (Predicate("q", "range", low=Decimal(4)), Predicate("p", "eq", (Decimal(1),)))
    assert capture.scans[1].shape == "p = AND q >"
    assert capture.scans[0].predicates == (Predicate("c", "eq", ("X",)),) and capture.scans[0].shape == "c ="


def test_malformed_lines_and_oversized_files_are_skipped_with_a_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    t0 = (NOW - 600) * 1000
    good = record(t0, 1)
    bad = write(tmp_path, t0, [good, "{not json", "[1, 2]", {**good, "v": 99}, {**good, "time_ms": "soon"},
                               {**good, "filters": "city = 1"}, record(t0, 2)])  # fmt: skip
    big = write(tmp_path, t0 + 1, [record(t0 + 1, 3)] * 200, seq=2)
    (big.parent / ".in-flight.jsonl.tmp").write_text("{partial")  # a writer's temporary file: not read
    (big.parent / "notes.txt").write_text("not a capture file")
    with caplog.at_level(logging.WARNING, logger="lakecluster.workload.capture"):
        capture = read_capture(LakeTable.at(str(tmp_path)), WorkloadConfig(max_file_bytes=big.stat().st_size // 3))
    assert [s.execution_id for s in capture.scans] == [1, 2]  # the good lines of the bad file
    reasons = {s["file"]: s["reason"] for s in capture.skipped}
    assert str(big) in reasons and "over twice workload.max_file_bytes" in reasons[str(big)]
    assert f"{bad} line 2" in reasons  # the first bad line names the file; the count follows in the log
    assert "5 line(s) skipped" in caplog.text and str(big) in caplog.text


def test_only_the_window_and_the_newest_max_bytes_are_read(tmp_path: Path) -> None:
    for days_ago in (40, 3, 1, 0):
        t = (NOW - days_ago * 86_400 - 60) * 1000
        write(tmp_path, t, [record(t, days_ago)])
    table = LakeTable.at(str(tmp_path))
    assert [s.execution_id for s in read_capture(table, WorkloadConfig()).scans] == [3, 1, 0]  # 30 days
    assert [s.execution_id for s in read_capture(table, WorkloadConfig(), since_s=2 * 86_400).scans] == [1, 0]
    size = next((tmp_path / "_lakecluster" / "workload").rglob("*.jsonl")).stat().st_size
    newest_two = WorkloadConfig(max_bytes=2 * size + 10, max_file_bytes=4096)
    assert [s.execution_id for s in read_capture(table, newest_two).scans] == [1, 0]


def test_expiry_deletes_old_and_excess_capture_files_and_nothing_else(tmp_path: Path) -> None:
    old = write(tmp_path, (NOW - 31 * 86_400) * 1000, [record(0, 1)])
    recent = [write(tmp_path, (NOW - d * 3600) * 1000, [record(0, d)], seq=d) for d in (1, 2, 3)]
    stale_tmp = recent[0].parent / ".x.jsonl.tmp"
    fresh_tmp = recent[0].parent / ".y.jsonl.tmp"
    for tmp in (stale_tmp, fresh_tmp):
        tmp.write_text("{")
    os.utime(stale_tmp, (NOW - 7200, NOW - 7200))
    # Beside the capture: the table's data, the index, a file with a capture name outside a day folder.
    untouched = [tmp_path / "part-0.parquet", tmp_path / "_lakecluster" / "index" / "manifest.json",
                 tmp_path / "_lakecluster" / "workload" / recent[0].name, recent[0].parent / "README"]  # fmt: skip
    for path in untouched:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("keep")
    size = recent[0].stat().st_size
    report = expire(LakeTable.at(str(tmp_path)), WorkloadConfig(max_bytes=2 * size, max_file_bytes=4096), now=NOW)
    assert not old.exists() and not old.parent.exists()  # the day folder it left empty too
    assert [p.exists() for p in recent] == [True, True, False]  # beyond max_bytes: the oldest goes
    assert not stale_tmp.exists() and fresh_tmp.exists()  # a writer may still be renaming the fresh one
    assert all(p.read_text() == "keep" for p in untouched)
    assert (report.files, report.kept_files) == (3, 2)
    assert expire(LakeTable.at(str(tmp_path / "no-table")), WorkloadConfig()).files == 0


def test_the_compactors_vacuum_expires_capture_files_without_spark(tmp_path: Path) -> None:
    from lakecluster.compaction.loop import Compactor
    from lakecluster.config import load_config
    from tests.cli.conftest import write_ssb_table

    table = write_ssb_table(tmp_path / "t")
    old = write(table, (NOW - 31 * 86_400) * 1000, [record(0, 1)])
    kept = write(table, (NOW - 60) * 1000, [record(0, 2)])
    compactor = Compactor(load_config(overrides={"table.path": str(table), "metrics.port": "0"}, environ={}))
    compactor.maybe_vacuum()
    assert not old.exists() and kept.exists()
    assert compactor._spark is None
