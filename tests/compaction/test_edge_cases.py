"""Layouts the compactor must handle: a clustering column null in every row, input files without
column statistics (written by another Delta writer)."""

from __future__ import annotations

import json
import math
import uuid
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import DeltaTable

from lakecluster.compaction.loop import Compactor
from lakecluster.config import load_config
from lakecluster.stream.job import StreamJob
from tests.conftest import read_delta
from tests.generated_tables import SMALL, fill, generator_config, row_multiset
from tests.services.kafka import KafkaBroker
from tests.stream import kafka_records as kr

pytestmark = pytest.mark.integration


def test_a_clustering_column_null_in_every_row_does_not_block_compaction(spark, kafka: KafkaBroker,  # type: ignore[no-untyped-def]
                                                                          tmp_path: Path) -> None:  # fmt: skip
    topic = f"nulls_{uuid.uuid4().hex[:8]}"
    kafka.create_topic(topic, 1)
    # "brand", a clustering column, is never sent: null in every row.
    values = [json.dumps({"id": i, "city": f"city{i % 37:02d}", "qty": i % 50, "day": "2024-01-01"}).encode()
              for i in range(2_000)]  # fmt: skip
    kafka.produce(topic, [(0, v) for v in values])
    table = tmp_path / "orders"
    config = load_config(kr.write_config(tmp_path / "c.toml", bootstrap=kafka.bootstrap, topic=topic, table=table,
                                         max_offsets=400),
                         overrides={k: v for k, v in SMALL.items() if k.startswith("compaction.")})  # fmt: skip
    StreamJob(config, spark=spark, available_now=True).run()
    before = read_delta(table)
    assert before.num_rows == 2_000 and before.column("brand").null_count == 2_000
    files_before = len(DeltaTable(str(table)).file_uris())

    results = Compactor(config, spark=spark).run_once()

    assert [r.result for r in results] and {r.result for r in results} == {"committed"}, results
    assert len(DeltaTable(str(table)).file_uris()) < files_before
    assert row_multiset(read_delta(table)) == row_multiset(before)


def test_files_without_column_stats_are_compacted_into_files_of_the_target_size(spark, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    table = tmp_path / "t"
    config = generator_config(table, rows=6_000, per_batch=3_000, **{"table.partition_by": "[]"})
    fill(spark, config)
    rows = spark.read.format("delta").load(str(table))
    # Another Delta writer that collects no statistics (Delta's own setting) appends the same rows again.
    spark.conf.set("spark.databricks.delta.stats.collect", "false")
    try:
        rows.repartition(4).write.format("delta").mode("append").save(str(table))
    finally:
        spark.conf.unset("spark.databricks.delta.stats.collect")
    adds = pa.table(DeltaTable(str(table)).get_add_actions(flatten=True)).to_pylist()
    stats_less = {a["path"] for a in adds if a.get("num_records") is None}
    assert len(stats_less) == 4, adds
    before = read_delta(table)

    results = Compactor(config, spark=spark).run_once()

    assert {r.result for r in results} == {"committed"}, results
    after = pa.table(DeltaTable(str(table)).get_add_actions(flatten=True)).to_pylist()
    assert not stats_less & {a["path"] for a in after}, "the stats-less files should have been rewritten"
    # The rewrite's own files are of about the target size (60 kB), never one per row.
    outputs = [a for a in after if a["path"] not in {b["path"] for b in adds}]
    target = int(SMALL["compaction.target_file_bytes"])
    expected = math.ceil(sum(a["size_bytes"] for a in outputs) / target)
    assert outputs and max(a["size_bytes"] for a in outputs) <= 2 * target, sorted(a["size_bytes"] for a in outputs)
    assert len(outputs) <= 2 * expected + 1, (len(outputs), expected)
    assert all(a["num_records"] is not None for a in after), "rewritten files carry statistics"
    assert row_multiset(read_delta(table)) == row_multiset(before)
