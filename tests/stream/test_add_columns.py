"""The add-columns commit (``stream/add_columns.py``) on real Delta tables: Delta's ADD COLUMNS in
the log, column mapping honoured, a column present by any case of its name never added twice."""

from __future__ import annotations

import decimal
from pathlib import Path

import pytest

from lakecluster.config import StorageConfig
from lakecluster.schema import ColumnSpec
from lakecluster.stream.add_columns import add_columns
from lakecluster.stream.append import table_facts
from lakecluster.table import DeltaLocation, parse_user_metadata
from tests.conftest import duckdb_connection

pytestmark = pytest.mark.integration


@pytest.mark.parametrize("mapping", ["none", "name"])
def test_columns_are_added_as_delta_adds_them_and_only_once(spark, tmp_path: Path, mapping: str) -> None:  # type: ignore[no-untyped-def]
    path = tmp_path / f"t_{mapping}"
    mapped = "'delta.columnMapping.mode' = 'name', 'delta.minReaderVersion' = '2', 'delta.minWriterVersion' = '5'"
    props = "" if mapping == "none" else f" TBLPROPERTIES ({mapped})"
    spark.sql(f"CREATE TABLE delta.`{path}` (id BIGINT NOT NULL, City STRING) USING delta{props}")
    spark.sql(f"INSERT INTO delta.`{path}` VALUES (1, 'a')")
    location = DeltaLocation(str(path), StorageConfig())

    version = add_columns(spark, location, [ColumnSpec("discount", "decimal(9,2)"), ColumnSpec("ts", "timestamp")],
                          stream_id="s1")  # fmt: skip
    assert version == 2
    # Present already (one by another case of its name): nothing is committed.
    assert add_columns(spark, location, [ColumnSpec("discount", "double"), ColumnSpec("city", "string")],
                       stream_id="s1") is None  # fmt: skip
    history = spark.sql(f"DESCRIBE HISTORY delta.`{path}`").collect()
    assert [h["operation"] for h in history][:2] == ["ADD COLUMNS", "WRITE"]
    assert (parse_user_metadata(history[0]["userMetadata"]) or {})["columns"] == ["discount", "ts"]

    fields = {f["name"]: f for f in table_facts(spark, location).fields}  # the log's schema
    assert fields["discount"]["type"] == "decimal(9,2)" and fields["discount"]["nullable"]
    assert fields["id"]["nullable"] is False  # the rest of the schema untouched
    if mapping == "name":  # Delta gave the new columns their ids and physical names
        assert {"delta.columnMapping.id", "delta.columnMapping.physicalName"} <= set(fields["ts"]["metadata"])
    spark.sql(f"INSERT INTO delta.`{path}` VALUES (2, 'b', 1.25, TIMESTAMP'2026-01-01 00:00:00')")
    rows = spark.read.format("delta").load(str(path)).orderBy("id").collect()
    assert [(r["id"], r["discount"]) for r in rows] == [(1, None), (2, decimal.Decimal("1.25"))]
    duck = duckdb_connection().execute(f"SELECT id, ts IS NULL FROM delta_scan('{path}') ORDER BY id").fetchall()
    assert duck == [(1, True), (2, False)]
