"""The compactor beside other writers of its table (delta-spark's DELETE, UPDATE and MERGE, with
and without deletion vectors): a rewrite never brings a deleted row back, never undoes an update,
never duplicates a row, whether the DML lands before the rewrite's transaction starts or after."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable

import lakecluster.commit
import lakecluster.compaction.group_rewrite
import lakecluster.compaction.rewrite_schema
from lakecluster.compaction.group_rewrite import GroupResult
from lakecluster.compaction.loop import Compactor
from lakecluster.errors import UnsupportedTableError
from lakecluster.schema import spark_ddl
from lakecluster.stream.ssb import SSB_COLUMNS
from lakecluster.table import LakeTable
from tests.delta_writer import (
    SharedTables,
    append_rows,
    compaction_config,
    duckdb_count,
    files_with_vectors,
    plain,
    spark_rows,
    with_deletion_vectors,
)

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def tables(spark, tmp_path_factory: pytest.TempPathFactory) -> SharedTables:  # type: ignore[no-untyped-def]
    return SharedTables(spark, tmp_path_factory.mktemp("other-writers"))


def compact_all(compactor: Compactor, rounds: int = 6) -> list[GroupResult]:
    results: list[GroupResult] = []
    for _ in range(rounds):
        done = compactor.run_once()
        results += done
        if not done:
            break
    return results


@pytest.mark.parametrize("engine", ["local", "tasks", "spark"])
def test_compaction_purges_deletion_vectors_and_no_deleted_row_comes_back(  # type: ignore[no-untyped-def]
    spark, tables: SharedTables, tmp_path: Path, engine: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """In each rewrite: this process's, Spark tasks', and Spark's reader (Delta's own, for files
    the tasks cannot read)."""
    table = tables.copy("dv", with_deletion_vectors, tmp_path / "t")
    spark.sql(f"DELETE FROM delta.`{table}` WHERE lo_quantity < 10")
    assert files_with_vectors(spark, table), "the DELETE wrote no deletion vectors"
    expected = spark_rows(spark, table)
    assert 0 < sum(expected.values()) < 6_000

    extra = {"compaction.local_rewrite_max_bytes": "0"} if engine != "local" else {}
    if engine == "spark":
        def unreadable(*_: object) -> None:
            raise pa.ArrowInvalid("the tasks cannot read these files")

        monkeypatch.setattr(lakecluster.compaction.group_rewrite, "rewrite_in_tasks", unreadable)
    results = compact_all(Compactor(compaction_config(table, **extra), spark=spark))
    assert any(r.result == "committed" for r in results), [r.describe() for r in results]
    engines = {json.loads(c["commitInfo"]["userMetadata"])["lakecluster"]["rewrite"] for c in commit_infos(table)
               if "userMetadata" in c["commitInfo"] and "rewrite" in c["commitInfo"]["userMetadata"]}  # fmt: skip
    assert engines == {engine}
    assert not files_with_vectors(spark, table)  # every file with a vector was rewritten without its deleted rows

    assert spark_rows(spark, table) == expected  # no row lost, none back, none twice
    assert duckdb_count(table) == sum(expected.values())
    assert duckdb_count(table, "lo_quantity < 10") == 0
    # The new files' stats count exactly the rows they hold.
    for add in pa.table(DeltaTable(str(table)).get_add_actions(flatten=True)).to_pylist():
        assert pq.read_metadata(table / add["path"]).num_rows == add["num_records"]


DML = {
    "delete": "DELETE FROM delta.`{t}` WHERE lo_orderkey % 7 = 0",
    "update": "UPDATE delta.`{t}` SET lo_quantity = lo_quantity + 1000 WHERE lo_orderkey % 5 = 0",
    "merge": ("MERGE INTO delta.`{t}` AS t USING (SELECT lo_orderkey AS k FROM delta.`{t}` WHERE lo_orderkey % 3 = 0) "
              "AS s ON t.lo_orderkey = s.k WHEN MATCHED AND t.lo_orderkey % 2 = 0 THEN DELETE "
              "WHEN MATCHED THEN UPDATE SET t.lo_discount = 0.5"),
}  # fmt: skip


def commit_infos(table: Path) -> list[dict]:
    """Every commit's commitInfo action, read from the log's files."""
    return [json.loads(line) for f in sorted((table / "_delta_log").glob("*.json"))
            for line in f.read_text().splitlines() if line.startswith('{"commitInfo"')]  # fmt: skip


def run_dml_at(monkeypatch: pytest.MonkeyPatch, module: object, point: str, action: Callable[[], None]) -> list[str]:
    """Run ``action`` once, the first time the compactor passes ``point`` (``lakecluster.faults``)."""
    hits: list[str] = []

    def pause(name: str) -> None:
        if name == point and not hits:
            hits.append(name)
            action()

    monkeypatch.setattr(module, "pause_point", pause)
    return hits


@pytest.mark.parametrize(("window", "dml", "vectors"), [
    ("before the transaction", "delete", True),
    ("before the transaction", "update", True),
    ("before the transaction", "merge", True),
    ("inside the transaction", "delete", True),
    ("inside the transaction", "merge", False),
])  # fmt: skip
def test_dml_landing_while_a_group_is_rewritten_makes_it_conflict_and_loses_nothing(  # type: ignore[no-untyped-def]
    spark, tables: SharedTables, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, window: str, dml: str,
    vectors: bool,
) -> None:
    """The DML commits after the group's rows were read: before the compactor's transaction starts
    (its precheck must see the files changed: same paths, new deletion vectors) or after (Delta's
    conflict checker must refuse the commit). The group is dropped, the next round rewrites the
    files as they are now, and the table holds exactly the rows the DML left."""
    table = tables.copy("dv" if vectors else "plain", with_deletion_vectors if vectors else plain, tmp_path / "t")
    after_dml: dict[str, object] = {}

    def other_writer() -> None:
        spark.sql(DML[dml].format(t=table))
        append_rows(spark, table, 10_000, 10_300)  # and an append beside it: both land
        after_dml["rows"] = spark_rows(spark, table)

    if window == "before the transaction":
        hits = run_dml_at(monkeypatch, lakecluster.compaction.group_rewrite, "compaction_before_commit", other_writer)
    else:
        hits = run_dml_at(monkeypatch, lakecluster.commit, "commit_transaction_started", other_writer)
    compactor = Compactor(compaction_config(table), spark=spark)
    first = compactor.run_once()
    assert hits and first, "the DML never ran beside a rewrite"
    assert first[0].result == "conflict", [r.describe() for r in first]
    if vectors and dml != "merge":
        assert files_with_vectors(spark, table), "the DML wrote no deletion vectors"
    later = compact_all(compactor)
    assert any(r.result == "committed" for r in later), [r.describe() for r in later]  # the files as they are now
    assert not files_with_vectors(spark, table)

    assert spark_rows(spark, table) == after_dml["rows"]
    assert duckdb_count(table) == sum(after_dml["rows"].values())  # type: ignore[attr-defined]


def test_a_column_another_writer_added_keeps_its_values_through_compaction(spark, tables: SharedTables,  # type: ignore[no-untyped-def]
                                                                           tmp_path: Path) -> None:  # fmt: skip
    """The rewrite writes the table's schema at the version it read, not the declared columns."""
    table = tables.copy("plain", plain, tmp_path / "t")
    spark.sql(f"ALTER TABLE delta.`{table}` ADD COLUMNS (note STRING)")
    for part in range(4):  # small appends that fill the new column
        spark.sql(f"INSERT INTO delta.`{table}` SELECT * EXCEPT (note), concat('n', lo_orderkey) "
                  f"FROM delta.`{table}` WHERE lo_orderkey >= {part * 300} AND lo_orderkey < {part * 300 + 300} "
                  "AND note IS NULL")  # fmt: skip
    before = spark_rows(spark, table)
    assert spark.read.format("delta").load(str(table)).where("note IS NOT NULL").count() == 1_200

    results = compact_all(Compactor(compaction_config(table), spark=spark))
    assert any(r.result == "committed" for r in results), [r.describe() for r in results]
    assert spark_rows(spark, table) == before
    assert duckdb_count(table, "note IS NOT NULL") == 1_200


def test_column_mapping_renames_drops_and_widened_types_keep_every_value(spark, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """A table created with column mapping (its files name columns by generated physical names),
    a clustering column renamed back and forth, a column dropped, a type widened: every column and
    value comes through the rewrite, read back by Spark and DuckDB."""
    from tests.delta_writer import append_rows, create_table

    table = tmp_path / "t"
    create_table(spark, table, **{"delta.columnMapping.mode": "name", "delta.enableTypeWidening": "true",
                                  "delta.enableDeletionVectors": "true"})  # fmt: skip
    append_rows(spark, table, 0, 4_000, parts=4)
    spark.sql(f"ALTER TABLE delta.`{table}` RENAME COLUMN lo_shipmode TO ship_mode")
    spark.sql(f"ALTER TABLE delta.`{table}` DROP COLUMN is_returned")
    spark.sql(f"ALTER TABLE delta.`{table}` ALTER COLUMN lo_quantity TYPE BIGINT")
    spark.sql(f"INSERT INTO delta.`{table}` SELECT * FROM delta.`{table}` WHERE lo_orderkey < 500")
    spark.sql(f"UPDATE delta.`{table}` SET lo_quantity = lo_quantity + 3000000000 WHERE lo_orderkey % 9 = 0")
    spark.sql(f"DELETE FROM delta.`{table}` WHERE lo_orderkey % 10 = 3")
    before = spark_rows(spark, table)
    columns = spark.read.format("delta").load(str(table)).columns
    assert "ship_mode" in columns and "is_returned" not in columns

    results = compact_all(Compactor(compaction_config(table), spark=spark))
    assert any(r.result == "committed" for r in results), [r.describe() for r in results]
    assert not files_with_vectors(spark, table)
    assert spark_rows(spark, table) == before
    assert duckdb_count(table) == sum(before.values())
    quantity = sorted(columns).index("lo_quantity")  # spark_rows orders the columns by name
    assert duckdb_count(table, "lo_quantity > 3000000000") == sum(n for r, n in before.items()
                                                                  if r[quantity] > 3_000_000_000) > 0


def test_files_landing_between_rounds_of_a_partitioned_mapped_table_keep_their_partitions(  # type: ignore[no-untyped-def]
    spark, tmp_path: Path
) -> None:
    """Under column mapping the log keys partition values and stats by physical names, in the
    commits the compactor reads after its first snapshot as in the snapshot: files another writer
    adds (or re-adds with a deletion vector) between rounds are grouped in their own partition, and
    their rows keep their partition values through the rewrite."""
    from tests.delta_writer import create_table

    table = tmp_path / "t"
    create_table(spark, table, partition_by="d_year", **{"delta.columnMapping.mode": "name",
                                                         "delta.enableDeletionVectors": "true"})  # fmt: skip
    append_rows(spark, table, 0, 1_000)
    compactor = Compactor(compaction_config(table, **{"table.partition_by": '["d_year"]'}), spark=spark)
    compactor.run_once()  # the first round reads the whole snapshot
    append_rows(spark, table, 1_000, 4_000, parts=3, seed=10)  # then files land in commits
    spark.sql(f"DELETE FROM delta.`{table}` WHERE lo_quantity < 10")
    before = spark_rows(spark, table)

    live = LakeTable(compactor.config).live_files()
    live.snapshot()
    append_rows(spark, table, 4_000, 4_500, seed=11)
    _, files = live.snapshot()  # brought forward by the commit
    assert files["partition.d_year"].null_count == 0
    assert files["min.s_city"].null_count == 0

    results = compact_all(compactor)
    assert any(r.result == "committed" for r in results), [r.describe() for r in results]
    after = spark_rows(spark, table)
    years = sorted(spark.read.format("delta").load(str(table)).columns).index("d_year")
    assert sum(n for r, n in after.items() if r[years] is None) == 0
    assert sum(after.values()) == sum(before.values()) + 500 == duckdb_count(table)
    assert Counter({r: n for r, n in after.items() if r in before}) == before


def test_compacted_files_whose_rows_a_delete_erased_are_purged_past_the_threshold(spark, tables: SharedTables,  # type: ignore[no-untyped-def]
                                                                                  tmp_path: Path) -> None:  # fmt: skip
    """Settled files the planner would leave alone are rewritten once their deletion vectors delete
    ``purge_deleted_share`` of their rows (GDPR erasure: the rows then leave the live files), and
    not before; ``purge_deletion_vectors = false`` leaves them."""
    table = tables.copy("dv", with_deletion_vectors, tmp_path / "t")
    settings = {"compaction.target_file_bytes": "400000", "compaction.purge_deleted_share": "0.1"}
    assert any(r.result == "committed" for r in compact_all(Compactor(compaction_config(table, **settings),
                                                                      spark=spark)))  # fmt: skip
    spark.sql(f"DELETE FROM delta.`{table}` WHERE lo_orderkey % 50 = 0")  # 2 % of the rows
    assert files_with_vectors(spark, table)
    assert compact_all(Compactor(compaction_config(table, **settings), spark=spark)) == []  # below the share
    spark.sql(f"DELETE FROM delta.`{table}` WHERE lo_orderkey % 10 = 1")  # 12 % in all
    expected = spark_rows(spark, table)
    off = {**settings, "compaction.purge_deletion_vectors": "false"}
    assert compact_all(Compactor(compaction_config(table, **off), spark=spark)) == []
    purged = compact_all(Compactor(compaction_config(table, **settings), spark=spark))
    assert purged and all(r.result == "committed" and "purge" in r.group.reason for r in purged), purged
    assert not files_with_vectors(spark, table)
    assert spark_rows(spark, table) == expected
    assert duckdb_count(table, "lo_orderkey % 10 = 1 OR lo_orderkey % 50 = 0") == 0


def row_ids(spark, path: Path) -> dict[int, tuple[int, int]]:  # type: ignore[no-untyped-def]
    """Each row's (row id, row commit version), by its key, as delta-spark reads them."""
    frame = spark.read.format("delta").load(str(path)).select(
        "lo_orderkey", "_metadata.row_id", "_metadata.row_commit_version")
    return {r[0]: (r[1], r[2]) for r in frame.collect()}


def test_row_tracking_keeps_every_rows_id_and_commit_version_through_a_rewrite(spark, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """As Delta's OPTIMIZE does: ids from each file's base row id and position, or the ids an
    UPDATE materialized into its files, move with their rows; deleted rows stay deleted."""
    from tests.delta_writer import append_rows, create_table

    table = tmp_path / "t"
    create_table(spark, table, **{"delta.enableRowTracking": "true", "delta.enableDeletionVectors": "true"})
    append_rows(spark, table, 0, 3_000, parts=3)
    spark.sql(f"UPDATE delta.`{table}` SET lo_quantity = lo_quantity + 100 WHERE lo_orderkey % 7 = 0")
    spark.sql(f"DELETE FROM delta.`{table}` WHERE lo_orderkey % 11 = 0")
    append_rows(spark, table, 3_000, 4_000, parts=2, seed=10)
    before, ids = spark_rows(spark, table), row_ids(spark, table)
    assert len(ids) == sum(before.values()) and len({v[0] for v in ids.values()}) == len(ids)

    results = compact_all(Compactor(compaction_config(table), spark=spark))
    assert any(r.result == "committed" for r in results), [r.describe() for r in results]
    assert not files_with_vectors(spark, table)
    assert spark_rows(spark, table) == before
    assert row_ids(spark, table) == ids
    assert duckdb_count(table) == len(ids)


def test_a_table_delta_clusters_keeps_its_clustering_and_refuses_other_columns(spark, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """CLUSTER BY: the compactor clusters by the table's own columns (the command line takes them
    when table.clustering_columns is set nowhere), keeps its domain metadata, and refuses others."""
    from tests.cli.conftest import run_cli

    table = tmp_path / "t"
    spark.sql(f"CREATE TABLE delta.`{table}` ({spark_ddl(SSB_COLUMNS)}) USING delta CLUSTER BY (s_city, p_brand)")
    append_rows(spark, table, 0, 3_000, parts=3)
    shown = run_cli(f"--set=table.path={table}", "--set=table.partition_by=[]", "--json", "config", cwd=tmp_path)
    assert json.loads(shown.stdout)["table"]["clustering_columns"] == ["s_city", "p_brand"], shown.stderr
    chosen = run_cli(f"--set=table.path={table}", "--set=table.partition_by=[]",
                     "--set=table.clustering_columns=[\"c_city\"]", "--json", "config", cwd=tmp_path)  # fmt: skip
    assert json.loads(chosen.stdout)["table"]["clustering_columns"] == ["c_city"]

    version = DeltaTable(str(table)).version()
    other = compaction_config(table, **{"table.clustering_columns": '["c_city"]'})
    with pytest.raises(UnsupportedTableError, match="clustered by Delta on s_city, p_brand"):
        Compactor(other, spark=spark).run_once()
    assert DeltaTable(str(table)).version() == version  # nothing written

    before = spark_rows(spark, table)
    own = compaction_config(table, **{"table.clustering_columns": '["s_city", "p_brand"]'})
    results = compact_all(Compactor(own, spark=spark))
    assert any(r.result == "committed" for r in results), [r.describe() for r in results]
    assert spark_rows(spark, table) == before
    detail = spark.sql(f"DESCRIBE DETAIL delta.`{table}`").collect()[0]
    assert list(detail["clusteringColumns"]) == ["s_city", "p_brand"]  # the domain metadata is kept


def test_a_writer_feature_the_rewrites_do_not_keep_is_refused_before_any_work(  # type: ignore[no-untyped-def]
    spark, tables: SharedTables, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Any writer feature outside what the rewrites keep (a feature newer than the compactor, say)."""
    table = tables.copy("dv", with_deletion_vectors, tmp_path / "t")
    monkeypatch.setattr(lakecluster.compaction.rewrite_schema, "REWRITE_FEATURES",
                        lakecluster.compaction.rewrite_schema.REWRITE_FEATURES - {"deletionVectors"})  # fmt: skip
    version = DeltaTable(str(table)).version()
    with pytest.raises(UnsupportedTableError, match=r"writer feature\(s\) deletionVectors, which the compactor"):
        Compactor(compaction_config(table), spark=spark).run_once()
    assert DeltaTable(str(table)).version() == version  # nothing written


def test_the_sketch_of_a_renamed_clustering_column_follows_the_rename(  # type: ignore[no-untyped-def]
    spark, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Column mapping keeps a renamed column's physical name: the stream recorded it in its sketch
    file, and the compactor clusters by the new name with the stream's sketch, not one rebuilt."""
    import logging
    from dataclasses import replace

    from lakecluster.config import DEFAULT_COLUMNS
    from lakecluster.stream.job import StreamJob
    from tests.delta_writer import create_table
    from tests.generated_tables import generator_config

    table = tmp_path / "t"
    create_table(spark, table, **{"delta.columnMapping.mode": "name"})
    StreamJob(generator_config(table, rows=4_000, per_batch=2_000, **{"table.partition_by": "[]"}), spark=spark,
              available_now=True).run()  # fmt: skip
    streamed = LakeTable(compaction_config(table)).sketches().latest()
    assert streamed is not None and streamed.sketches["s_city"].n == 4_000
    spark.sql(f"ALTER TABLE delta.`{table}` RENAME COLUMN s_city TO supplier_city")

    columns = tuple(replace(c, name="supplier_city") if c.name == "s_city" else c for c in DEFAULT_COLUMNS)
    renamed = replace(compaction_config(table), table=replace(compaction_config(table).table, columns=columns,
                      clustering_columns=("supplier_city", "c_city", "p_brand")))  # fmt: skip
    before = spark_rows(spark, table)
    compactor = Compactor(renamed, spark=spark)
    with caplog.at_level(logging.WARNING):
        sketches = compactor.sketches()
    assert sketches.sketches["supplier_city"].n == 4_000 and "supplier_city" not in sketches.from_table
    assert "built from the table" not in caplog.text
    results = compact_all(compactor)
    assert any(r.result == "committed" for r in results), [r.describe() for r in results]
    assert spark_rows(spark, table) == before
