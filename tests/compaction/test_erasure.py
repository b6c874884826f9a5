"""A value another writer deleted leaves lakecluster's own copies too: the boundary sketches and the
column-stats index are rebuilt from the live data after the DELETE (and again when a stream wrote
its sketches over the rebuild), and quarantined records go after their retention."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from lakecluster.compaction.erasure import expire_quarantine
from lakecluster.compaction.loop import Compactor
from lakecluster.stream.batch_task import QUARANTINE_DDL
from lakecluster.table import LakeTable
from tests.delta_writer import duckdb_count, set_properties
from tests.generated_tables import generator_config

pytestmark = pytest.mark.integration

ERASED = "VIETNAM  9"  # the largest city: every file's maximum, and a sketch keeps its maximum


def sketch_files(table: Path) -> list[Path]:
    return sorted((table / "_lakecluster").rglob("*.sketches"))


def city_sketches(lake: LakeTable) -> list[bytes]:
    """The s_city sketch of every sketch file on storage, serialized (every value it keeps)."""
    store = lake.sketches()
    return [store.read(str(f)).sketches["s_city"].to_bytes() for f in sketch_files(Path(lake.uri))]


def index_values(table: Path) -> list[bytes]:
    """Every s_city minimum and maximum of every file the index keeps on storage (not only the
    live ones), as encoded."""
    out: list[bytes] = []
    for f in (table / "_lakecluster" / "index").glob("*.parquet"):
        rows = pq.read_table(f, columns=["column", "min", "max"], filters=[("column", "=", "s_city")])
        out += [v for c in ("min", "max") for v in rows[c].to_pylist() if v is not None]
    assert out, "the index holds no s_city bounds"
    return out


def test_a_deleted_value_leaves_the_sketches_and_the_index(spark, filled, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    table = tmp_path / "t"
    settings = {"table.partition_by": "[]", "compaction.forget_interval_s": "0", "index.gc_grace_s": "0",
                "compaction.purge_deleted_share": "1e-9"}  # fmt: skip
    config = generator_config(table, rows=6_000, per_batch=2_000, **settings)
    filled(config)
    compactor = Compactor(config, spark=spark)
    compactor.run_once()  # compacted, the index synced: nothing was deleted, nothing is rebuilt
    assert compactor.erasure.last_pass is None
    lake = LakeTable(config)
    assert any(ERASED.encode() in b for b in city_sketches(lake))
    assert any(ERASED.encode() in v for v in index_values(table))

    set_properties(spark, table, **{"delta.enableDeletionVectors": "true"})
    spark.sql(f"DELETE FROM delta.`{table}` WHERE s_city = '{ERASED}'")
    compactor.run_once()  # purges the files the DELETE marked, then rebuilds sketches and index
    assert duckdb_count(table, f"s_city = '{ERASED}'") == 0
    assert city_sketches(lake) and not any(ERASED.encode() in b for b in city_sketches(lake))
    assert compactor.erasure.last_pass is not None
    stored = lake.sketches().latest()
    assert stored is not None and stored.sketches["s_city"].n > 3_000  # rebuilt from the live rows
    compactor.run_once()  # the index's unnamed files are collected
    assert not any(ERASED.encode() in v for v in index_values(table))


def test_a_stream_that_wrote_its_sketches_over_the_rebuild_is_rebuilt_again(spark, filled, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    table = tmp_path / "t"
    config = generator_config(table, rows=4_000, per_batch=2_000,
                              **{"table.partition_by": "[]", "compaction.forget_interval_s": "0"})  # fmt: skip
    filled(config)
    lake = LakeTable(config)
    before = lake.sketches(lake.stream_id).latest()
    assert before is not None and before.erased_at == -1
    spark.sql(f"DELETE FROM delta.`{table}` WHERE s_city = '{ERASED}'")
    compactor = Compactor(config, spark=spark)
    compactor.run_once()
    rebuilt = compactor.erasure.verify_at
    assert rebuilt is not None and lake.sketches(lake.stream_id).latest().erased_at == rebuilt  # type: ignore[union-attr]

    # A batch in flight writes its sketches, from before the rebuild, over it.
    before.delta_version = rebuilt + 1
    lake.sketches(lake.stream_id).write(before)
    assert any(ERASED.encode() in b for b in city_sketches(lake))
    compactor.run_once()  # finds it, and rebuilds again
    latest = lake.sketches(lake.stream_id).latest()
    assert latest is not None and latest.erased_at >= rebuilt
    assert not any(ERASED.encode() in b for b in city_sketches(lake))


def test_quarantined_records_go_after_their_retention(spark, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    config = generator_config(tmp_path / "t", rows=1, per_batch=1)
    lake = LakeTable(config)
    quarantine = lake.quarantine.uri
    spark.sql(f"CREATE TABLE delta.`{quarantine}` ({QUARANTINE_DDL}) USING delta")
    now = dt.datetime.now(dt.UTC)
    for age in (60, 45, 1):
        when = pa.array([now - dt.timedelta(days=age)], pa.timestamp("us", tz="UTC"))
        rows = pa.table({"raw_value": [f"record {age} days old".encode()], "reason_code": ["not_json"],
                         "quarantined_at": when})
        spark.createDataFrame(rows).write.format("delta").mode("append").option("mergeSchema", "false") \
            .save(quarantine)  # fmt: skip
    assert expire_quarantine(lambda: spark, lake, 0) == 0  # 0: kept for good
    assert expire_quarantine(lambda: spark, lake, 30) == 2
    left = [r["raw_value"] for r in spark.read.format("delta").load(quarantine).collect()]
    assert left == [b"record 1 days old"]
    assert expire_quarantine(lambda: spark, lake, 30) == 0  # nothing old enough: no Spark job
