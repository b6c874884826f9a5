"""Every part of lakecluster on a table with each Delta feature another writer brings (the table
of docs/storage.md, "Tables other writers share"): status and the gauges count the table's live
rows and files, the index never skips a file holding a matching row and explain's reader reads
exactly the matching rows, the compactor keeps every row, vacuum deletes no file a live row needs
(on the features that keep files of their own), and the stream appends (or refuses in one line what
it cannot follow). Each feature's table is written once per test process by delta-spark; Spark and
DuckDB's ``delta_scan`` read every result."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest
from deltalake import DeltaTable
from pyspark.sql import functions as F

from lakecluster.compaction.loop import Compactor
from lakecluster.compaction.vacuum import vacuum
from lakecluster.errors import SchemaMismatchError
from lakecluster.index.prune import prune
from lakecluster.index.reader import read_candidates
from lakecluster.index.spec import IndexSpec
from lakecluster.index.sync import sync
from lakecluster.stream.job import StreamJob
from lakecluster.table import LakeTable
from tests.delta_writer import FEATURES, SharedTables, compaction_config, duckdb_count, spark_rows
from tests.generated_tables import generator_config

pytestmark = pytest.mark.integration

# What the stream cannot follow: it stops before anything is read, naming the difference.
STREAM_REFUSES = {"type widening": "column 'lo_linenumber' is int64 in the table, int32 in the config"}
WHERE = "s_city = 'UNITED KI1'"
# Features that write files of their own beside the data files, which vacuum must keep while a
# version references them: deletion vector files, change data, V2 checkpoint sidecars.
KEEPS_FILES_OF_ITS_OWN = {"deletion vectors", "change data feed", "v2 checkpoints"}
# DuckDB's delta-kernel refuses the protocol delta-spark writes for column mapping alone (reader
# version 2 with a writer feature list): delta-rs reads those tables instead.
DUCKDB_REFUSES = {"column mapping"}


def second_reader(feature: str, table: Path) -> int:
    """The table's rows, as a reader other than Spark counts them."""
    if feature in DUCKDB_REFUSES:
        return DeltaTable(str(table)).to_pyarrow_dataset().count_rows()
    return duckdb_count(table)


@pytest.fixture(scope="module")
def tables(spark, tmp_path_factory: pytest.TempPathFactory) -> SharedTables:  # type: ignore[no-untyped-def]
    return SharedTables(spark, tmp_path_factory.mktemp("features"))


def matching(spark, table: Path, where: str):  # type: ignore[no-untyped-def]
    """The live rows that match ``where`` as Spark reads them, each as the name of its file."""
    return spark.read.format("delta").load(str(table)).where(where).select(F.input_file_name().alias("f"))


def holding(frame) -> tuple[set[str], int]:  # type: ignore[no-untyped-def]
    """Runs ``matching``'s ``frame``: the files holding its rows, and the rows."""
    names = Counter(r["f"].rsplit("/", 1)[-1] for r in frame.collect())
    return set(names), sum(names.values())


@pytest.mark.parametrize("feature", list(FEATURES))
def test_every_part_on_a_table_with(feature: str, spark, tables: SharedTables, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    table = tables.copy(feature, FEATURES[feature], tmp_path / "t")
    config = compaction_config(table, **{"compaction.purge_deleted_share": "1e-9"})
    expected = spark_rows(spark, table)
    rows = sum(expected.values())
    assert second_reader(feature, table) == rows > 0

    # status and the gauges: the table's live rows and files
    state = LakeTable(config).state()
    detail = spark.sql(f"DESCRIBE DETAIL delta.`{table}`").collect()[0]
    assert (state.rows, state.files) == (rows, detail["numFiles"])

    # the index and explain: no file with a matching row skipped, exactly the matching rows read
    spec = IndexSpec.of(LakeTable(config))
    sync(spec)
    files, rows_matching = holding(matching(spark, table, WHERE))
    result = prune(spec, WHERE, index="stored")
    assert files <= {p.rsplit("/", 1)[-1] for p in result.paths}
    assert read_candidates(spark, spec, result).where(WHERE).count() == rows_matching > 0

    # the compactor: every row kept, in fewer files
    compactor = Compactor(config, spark=spark)
    committed = [r for r in compactor.run_once() if r.result == "committed"]
    assert committed, feature
    assert spark_rows(spark, table) == expected
    assert second_reader(feature, table) == rows

    # vacuum (no retention), where the feature keeps files of its own beside the data files: the
    # rewrite's inputs go, nothing a live row needs (on the others it is Delta's VACUUM of plain files,
    # tests/compaction/test_vacuum.py)
    if feature in KEEPS_FILES_OF_ITS_OWN:
        vacuum(spark.newSession(), LakeTable(config).delta, retention_hours=0, force=True)
        assert spark_rows(spark, table) == expected
        assert second_reader(feature, table) == rows

    # the stream: 1,000 rows appended, or refused in one line before anything is read
    stream = generator_config(table, rows=1_000, per_batch=1_000, **{"table.partition_by": "[]"})
    if feature in STREAM_REFUSES:
        with pytest.raises(SchemaMismatchError, match=STREAM_REFUSES[feature]):
            StreamJob(stream, spark=spark, available_now=True).run()
        assert second_reader(feature, table) == rows
        return
    StreamJob(stream, spark=spark, available_now=True).run()
    assert spark.read.format("delta").load(str(table)).count() == rows + 1_000 == second_reader(feature, table)


# Predicates of every kind the index tests try (tests/index/test_prune_property.py), over the
# generator's column types the index keeps (booleans only when named: index.columns).
PREDICATES = (
    "s_city = 'UNITED KI1'", "s_city < 'CHINA' OR s_city > 'UNITED ST0'", "c_city IN ('JAPAN    3', 'PERU     7')",
    "c_city NOT IN ('JAPAN    3')", "s_city LIKE 'UNITED%'", "s_city NOT LIKE 'A%'", "lo_quantity BETWEEN 10 AND 12",
    "lo_quantity NOT BETWEEN 2 AND 49", "lo_orderkey >= 2900", "lo_orderkey <= 5 OR lo_orderkey = 1500",
    "lo_revenue > 5000000", "lo_discount != 0.05", "lo_orderdate < DATE '1993-01-01'",
    "event_time >= TIMESTAMP '1998-06-01 00:00:00'", "lo_shipmode IS NULL", "p_brand IS NOT NULL",
    "s_city = 'UNITED KI1' AND lo_quantity < 20",
)  # fmt: skip


def test_a_table_with_deletion_vectors_compacted_as_delta_compacts_it_and_explained_by_its_stats(  # type: ignore[no-untyped-def]
    spark, tables: SharedTables, tmp_path: Path
) -> None:
    """Compacted by lakecluster and by Delta's OPTIMIZE, a table with deletion vectors holds the
    same rows; explain keeps every file with a matching live row, and no more than Delta's own
    skipping by the same stats reads."""
    from tests.spark_scans import files_scanned

    ours = tables.copy("deletion vectors", FEATURES["deletion vectors"], tmp_path / "ours")
    theirs = tables.copy("deletion vectors", FEATURES["deletion vectors"], tmp_path / "theirs")
    config = compaction_config(ours, **{"compaction.purge_deleted_share": "1e-9"})
    spec = IndexSpec.of(LakeTable(config))
    sync(spec)
    for where in PREDICATES:
        frame = matching(spark, ours, where)
        files, _ = holding(frame)  # the files holding matching live rows
        kept = prune(spec, where, index="stored")
        assert files <= {p.rsplit("/", 1)[-1] for p in kept.paths}, where
        assert len(kept.paths) <= files_scanned(frame), where
    assert [r for r in Compactor(config, spark=spark).run_once() if r.result == "committed"]
    spark.sql(f"OPTIMIZE delta.`{theirs}`")
    assert spark_rows(spark, ours) == spark_rows(spark, theirs)
    assert duckdb_count(ours) == duckdb_count(theirs) == sum(spark_rows(spark, theirs).values())
