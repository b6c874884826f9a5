"""Tables delta-spark changed read right by every reader of lakecluster: deletion vectors (in a
classic checkpoint and the commits after it, a V2 checkpoint with sidecars), column mapping with a renamed
column, partitions keyed by physical names. The live files and their rows agree with Spark and
DuckDB; the index never skips a file holding a matching live row, and reading its candidates
gives exactly the rows Spark's filter gives."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from pathlib import Path

import pyarrow.compute as pc
import pytest
from pyspark.sql import functions as F

from lakecluster.config import StorageConfig
from lakecluster.errors import StatsIndexError, UnsupportedTableError
from lakecluster.index.prune import prune
from lakecluster.index.reader import read_candidates
from lakecluster.index.spec import IndexSpec
from lakecluster.index.sync import sync
from lakecluster.schema import ColumnSpec
from lakecluster.table import LakeTable
from lakecluster.table.live_files import LiveFiles
from lakecluster.table.location import DeltaLocation
from tests.delta_writer import SharedTables, deleted_in_checkpoint, duckdb_count, mapped_v2

pytestmark = pytest.mark.integration

# Deletion vectors in JSON commits alone: tests/test_delta_features.py.
TABLES: dict[str, Callable[..., None]] = {"checkpoint": deleted_in_checkpoint, "v2-mapped": mapped_v2}
# A change of the columns after the index's version, and how the index's reader names it.
CHANGES = {"checkpoint": ("ADD COLUMNS (extra STRING)", "extra added", "lo_quantity"),
           "v2-mapped": ("RENAME COLUMN lo_quantity TO quantity", "lo_quantity was renamed to quantity", "quantity")}


@pytest.fixture(scope="module")
def tables(spark, tmp_path_factory: pytest.TempPathFactory) -> SharedTables:  # type: ignore[no-untyped-def]
    return SharedTables(spark, tmp_path_factory.mktemp("shared-reads"))


def spark_files(spark, path: Path, where: str = "true") -> tuple[set[str], int]:  # type: ignore[no-untyped-def]
    """(the data files holding live rows that match ``where``, those rows), as Spark reads them."""
    frame = spark.read.format("delta").load(str(path)).where(where).select(F.input_file_name().alias("f"))
    names = Counter(r["f"].rsplit("/", 1)[-1] for r in frame.collect())
    return set(names), sum(names.values())


@pytest.mark.parametrize("kind", list(TABLES))
def test_live_files_rows_and_the_index_agree_with_spark_and_duckdb(spark, tables: SharedTables, tmp_path: Path,  # type: ignore[no-untyped-def]
                                                                   kind: str) -> None:  # fmt: skip
    """The live files, their rows and bounds as Spark reads them; the index keeps every file with a
    matching live row, read from the log and synced incrementally, and its reader reads exactly
    the matching rows."""
    table = tables.copy(kind, TABLES[kind], tmp_path / "t")
    city = "supplier_city" if kind == "v2-mapped" else "s_city"
    partitions = [ColumnSpec("d_year", "int")]
    live = LiveFiles(DeltaLocation(str(table), StorageConfig()), partitions, [ColumnSpec(city, "string")])
    version, files = live.snapshot()
    detail = spark.sql(f"DESCRIBE DETAIL delta.`{table}`").collect()[0]
    history = spark.sql(f"DESCRIBE HISTORY delta.`{table}` LIMIT 1").collect()[0]
    assert version == history["version"]
    assert files.num_rows == detail["numFiles"]
    assert files["deletion_vector"].null_count < files.num_rows  # files with deletion vectors are live
    total = spark.read.format("delta").load(str(table)).count()
    assert pc.sum(files["rows"]).as_py() == total == duckdb_count(table)
    # Each file's rows and bounds: what Spark reads of it.
    per_file = {r["f"].rsplit("/", 1)[-1]: r for r in spark.read.format("delta").load(str(table))
                .groupBy(F.input_file_name().alias("f"))
                .agg(F.count("*").alias("n"), F.min(city).alias("lo"), F.max(city).alias("hi")).collect()}  # fmt: skip
    for row in files.to_pylist():
        seen = per_file.get(row["path"].rsplit("/", 1)[-1])
        assert seen is not None and seen["n"] == row["rows"], row["path"]
        assert row[f"min.{city}"] <= seen["lo"] and seen["hi"] <= row[f"max.{city}"]
        assert row["partition.d_year"] is not None

    spec = IndexSpec.for_location(LakeTable.at(str(table)))
    assert sync(spec).mode == "rebuild"
    # One more DELETE after the index's version: read from the log ("latest"), then synced as a segment.
    spark.sql(f"DELETE FROM delta.`{table}` WHERE lo_orderkey % 4 = 0")
    wheres = [f"{city} = 'UNITED KI1'", f"{city} >= 'R' AND lo_quantity < 20", "d_year = 1995"]
    truth = {where: spark_files(spark, table, where) for where in wheres}
    for where, (holding, _) in truth.items():
        kept = {p.rsplit("/", 1)[-1] for p in prune(spec, where, index="latest").paths}
        assert holding <= kept, (where, holding - kept)
    assert sync(spec).mode == "incremental"
    for where, (holding, rows) in truth.items():
        result = prune(spec, where, index="stored")
        assert holding <= {p.rsplit("/", 1)[-1] for p in result.paths}, where
        assert read_candidates(spark, spec, result).where(where).count() == rows, where

    # Delta's reader names a file's columns as the table does now: the columns changed between
    # prune and the read, the index's reader refuses (never a renamed column read as null, never
    # one missed), and reads again once synced.
    change, named, quantity = CHANGES[kind]
    result = prune(spec, wheres[1], index="stored")
    spark.sql(f"ALTER TABLE delta.`{table}` {change}")
    with pytest.raises(StatsIndexError, match=f"{named}.*sync the index"):
        read_candidates(spark, spec, result)
    sync(spec)
    where = f"{city} >= 'R' AND {quantity} < 20"
    _, rows = spark_files(spark, table, where)
    assert rows > 0
    assert read_candidates(spark, spec, prune(spec, where, index="stored")).where(where).count() == rows


def test_a_reader_feature_lakecluster_does_not_read_is_refused_in_one_line(spark, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """Never read as something else: a table with variant columns is refused by every reader."""
    from tests.cli.conftest import run_cli

    table = tmp_path / "t"
    spark.sql(f"CREATE TABLE delta.`{table}` (id BIGINT, v VARIANT) USING delta")
    spark.sql(f"INSERT INTO delta.`{table}` SELECT id, parse_json(concat('[', id, ']')) FROM range(10)")
    with pytest.raises(UnsupportedTableError, match=r"reader feature.* variantType"):
        LiveFiles(DeltaLocation(str(table), StorageConfig()), [], []).snapshot()
    status = run_cli(f"--set=table.path={table}", "--set=table.partition_by=[]", "status", cwd=tmp_path)
    assert status.returncode != 0
    [line] = status.stderr.strip().splitlines()
    assert "variantType" in line and "Traceback" not in status.stderr
