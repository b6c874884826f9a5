"""Delta tables as other writers leave them: delta-spark appends of the built-in generator's rows,
then its own DML (DELETE, UPDATE, MERGE, with and without deletion vectors) and schema changes.

Each kind of table is written once per test process (``SharedTables``) and copied to each test
that asks for it, so a test that compacts or reads it pays for a copy, not for Spark's writes."""

from __future__ import annotations

import shutil
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import pyarrow as pa

from lakecluster.config import Config
from lakecluster.stream.generator import GeneratorSettings, generate
from lakecluster.stream.ssb import SSB_COLUMNS
from tests.conftest import duckdb_connection
from tests.generated_tables import generator_config

KEY = "lo_orderkey"


def append_rows(spark, path: Path, start: int, end: int, *, parts: int = 1, seed: int = 9) -> None:  # type: ignore[no-untyped-def]
    """The generator's rows ``start`` to ``end`` appended by delta-spark in ``parts`` commits."""
    rows = pa.Table.from_batches([generate(start, end, GeneratorSettings(seed=seed), SSB_COLUMNS)])
    step = -(-rows.num_rows // parts)
    for at in range(0, rows.num_rows, step):
        spark.createDataFrame(rows.slice(at, step)).write.format("delta").mode("append").save(str(path))


def set_properties(spark, path: Path, **properties: str) -> None:  # type: ignore[no-untyped-def]
    pairs = ", ".join(f"'{k}' = '{v}'" for k, v in properties.items())
    spark.sql(f"ALTER TABLE delta.`{path}` SET TBLPROPERTIES ({pairs})")


def spark_rows(spark, path: Path) -> Counter:  # type: ignore[no-untyped-def]
    """Every row as delta-spark reads the table (deletion vectors applied), as a multiset."""
    frame = spark.read.format("delta").load(str(path))
    columns = sorted(frame.columns)
    return Counter(tuple(r) for r in frame.select(*columns).collect())


def duckdb_count(path: Path, where: str = "true") -> int:
    """Rows DuckDB's ``delta_scan`` (delta-kernel: deletion vectors applied) reads."""
    return int(duckdb_connection().execute(f"SELECT count(*) FROM delta_scan('{path}') WHERE {where}").fetchone()[0])


def compaction_config(path: Path, **extra: str) -> Config:
    """The compactor's settings for these tables: unpartitioned, every small file a candidate."""
    return generator_config(path, rows=1, per_batch=1, **{"table.partition_by": "[]", **extra})


class SharedTables:
    """Tables written once per process by ``build(spark, path)``, copied to each caller's path."""

    def __init__(self, spark, home: Path) -> None:  # type: ignore[no-untyped-def]
        self.spark = spark
        self.home = home
        self.built: dict[str, Path] = {}

    def copy(self, name: str, build: Callable[..., None], target: Path) -> Path:
        if name not in self.built:
            original = self.home / name
            build(self.spark, original)
            self.built[name] = original
        shutil.copytree(self.built[name], target)
        return target


def plain(spark, path: Path) -> None:  # type: ignore[no-untyped-def]
    """6,000 rows in 6 appends (6 small files or more), no table features."""
    append_rows(spark, path, 0, 6_000, parts=6)


def with_deletion_vectors(spark, path: Path) -> None:  # type: ignore[no-untyped-def]
    """:func:`plain` with deletion vectors enabled (a ``DELETE`` then marks rows instead of rewriting files)."""
    plain(spark, path)
    set_properties(spark, path, **{"delta.enableDeletionVectors": "true"})


def create_table(spark, path: Path, *, partition_by: str = "", **properties: str) -> None:  # type: ignore[no-untyped-def]
    """An empty table of the generator's columns, created by delta-spark with ``properties``."""
    from lakecluster.schema import spark_ddl

    partitioned = f"PARTITIONED BY ({partition_by})" if partition_by else ""
    pairs = ", ".join(f"'{k}' = '{v}'" for k, v in properties.items())
    spark.sql(f"CREATE TABLE delta.`{path}` ({spark_ddl(SSB_COLUMNS)}) USING delta {partitioned} "
              f"TBLPROPERTIES ({pairs})")  # fmt: skip


def deleted_in_checkpoint(spark, path: Path) -> None:  # type: ignore[no-untyped-def]
    """Partitioned, deletion vectors in a classic checkpoint and in the commits after it."""
    create_table(spark, path, partition_by="d_year", **{"delta.enableDeletionVectors": "true",
                                                        "delta.checkpointInterval": "4"})  # fmt: skip
    append_rows(spark, path, 0, 6_000, parts=3)
    spark.sql(f"DELETE FROM delta.`{path}` WHERE lo_quantity < 10")  # version 4: a checkpoint
    append_rows(spark, path, 6_000, 8_000, seed=10)
    spark.sql(f"DELETE FROM delta.`{path}` WHERE s_city LIKE 'UNITED%'")


def mapped_v2(spark, path: Path) -> None:  # type: ignore[no-untyped-def]
    """Column mapping (a clustering column renamed, a column added), deletion vectors, V2
    checkpoints with sidecars, partitioned."""
    create_table(spark, path, partition_by="d_year", **{
        "delta.enableDeletionVectors": "true", "delta.columnMapping.mode": "name",
        "delta.checkpointPolicy": "v2", "delta.checkpointInterval": "3"})  # fmt: skip
    append_rows(spark, path, 0, 6_000, parts=3)
    spark.sql(f"ALTER TABLE delta.`{path}` RENAME COLUMN s_city TO supplier_city")
    spark.sql(f"DELETE FROM delta.`{path}` WHERE lo_quantity < 10")
    spark.sql(f"ALTER TABLE delta.`{path}` ADD COLUMNS (note STRING)")
    spark.sql(f"UPDATE delta.`{path}` SET note = 'checked' WHERE lo_orderkey % 13 = 0")


def files_with_vectors(spark, path: Path) -> int:  # type: ignore[no-untyped-def]
    """Live files that have a deletion vector, by delta-spark's own snapshot of the table."""
    jvm = spark._jvm
    none = jvm.scala.Option.empty()
    delta_log = jvm.org.apache.spark.sql.delta.DeltaLog.forTable(spark._jsparkSession, str(path))
    snapshot = delta_log.update(False, none, none)
    return int(snapshot.allFiles().filter("deletionVector IS NOT NULL").count())


def _featured(properties: dict[str, str], *after: str, cluster_by: str = "", extra: str = "") -> Callable[..., None]:
    """A builder: the generator's columns (and ``extra`` column definitions), ``properties``,
    3,000 rows in 3 appends, then the SQL statements ``after`` (``{t}``: the table)."""

    def build(spark, path: Path) -> None:  # type: ignore[no-untyped-def]
        from lakecluster.schema import spark_ddl

        columns = spark_ddl(SSB_COLUMNS) + (f", {extra}" if extra else "")
        clustered = f"CLUSTER BY ({cluster_by})" if cluster_by else ""
        pairs = ", ".join(f"'{k}' = '{v}'" for k, v in properties.items())
        spark.sql(f"CREATE TABLE delta.`{path}` ({columns}) USING delta {clustered} "
                  + (f"TBLPROPERTIES ({pairs})" if pairs else ""))  # fmt: skip
        names = ", ".join(f"`{c.name}`" for c in SSB_COLUMNS)
        rows = pa.Table.from_batches([generate(0, 3_000, GeneratorSettings(seed=9), SSB_COLUMNS)])
        for part in range(3):
            spark.createDataFrame(rows.slice(part * 1_000, 1_000)).createOrReplaceTempView("rows")
            spark.sql(f"INSERT INTO delta.`{path}` ({names}) SELECT {names} FROM rows")
        for statement in after:
            spark.sql(statement.format(t=path))

    return build


# One table per Delta feature other writers bring (docs/storage.md, "Tables other writers share").
FEATURES: dict[str, Callable[..., None]] = {
    "deletion vectors": _featured({"delta.enableDeletionVectors": "true"},
                                  "DELETE FROM delta.`{t}` WHERE lo_quantity < 10"),
    "column mapping": _featured({"delta.columnMapping.mode": "name"},
                                "ALTER TABLE delta.`{t}` ADD COLUMNS (note STRING)",
                                "UPDATE delta.`{t}` SET note = 'n' WHERE lo_orderkey % 3 = 0"),
    "row tracking": _featured({"delta.enableRowTracking": "true"},
                              "UPDATE delta.`{t}` SET lo_quantity = lo_quantity + 1 WHERE lo_orderkey % 5 = 0"),
    "type widening": _featured({"delta.enableTypeWidening": "true"},
                               "ALTER TABLE delta.`{t}` ALTER COLUMN lo_linenumber TYPE BIGINT"),
    "clustering": _featured({}, cluster_by="s_city, c_city, p_brand"),
    "change data feed": _featured({"delta.enableChangeDataFeed": "true"},
                                  "DELETE FROM delta.`{t}` WHERE lo_quantity < 5"),
    "v2 checkpoints": _featured({"delta.checkpointPolicy": "v2", "delta.checkpointInterval": "2"}),
    "in-commit timestamps": _featured({"delta.enableInCommitTimestamps": "true"}),
    "check constraints": _featured({}, "ALTER TABLE delta.`{t}` ADD CONSTRAINT positive CHECK (lo_quantity > 0)"),
    "generated columns": _featured({}, extra="lo_quantity_x2 INT GENERATED ALWAYS AS (lo_quantity * 2)"),
    "identity columns": _featured({}, extra="row_no BIGINT GENERATED ALWAYS AS IDENTITY"),
    "timestampNtz": _featured({}, "UPDATE delta.`{t}` SET local_time = TIMESTAMP_NTZ '2024-05-01 12:00:00' "
                              "WHERE lo_orderkey % 2 = 0", extra="local_time TIMESTAMP_NTZ"),
}  # fmt: skip
