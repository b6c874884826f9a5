"""Other Delta clients on a table lakecluster writes: a delta-spark job appending while the
compactor rewrites loses nothing; Spark SQL skips files by the rewritten stats, shows the rewrites
in DESCRIBE HISTORY as what they are, and time-travels; delta-rs and DuckDB read the same rows."""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from deltalake import DeltaTable

from lakecluster.compaction.loop import Compactor
from lakecluster.stream.generator import GeneratorSettings, generate
from lakecluster.stream.ssb import SSB_COLUMNS
from tests.conftest import duckdb_connection, read_delta
from tests.generated_tables import fill, generator_config
from tests.spark_scans import files_scanned

pytestmark = pytest.mark.integration


def files_read(spark, sql: str) -> tuple[int, int]:  # type: ignore[no-untyped-def]
    """(rows, files the scan read) of ``sql``, from Spark's own scan metrics."""
    frame = spark.sql(sql)
    rows = frame.collect()
    return int(rows[0][0]), files_scanned(frame)


def test_a_delta_spark_append_during_compaction_loses_nothing_and_spark_sql_reads_the_rewrite(  # type: ignore[no-untyped-def]
    spark, tmp_path: Path
) -> None:
    table = tmp_path / "t"
    config = generator_config(table, rows=12_000, per_batch=3_000,
                              **{"table.partition_by": "[]", "stream.max_records_per_file": "500"})  # fmt: skip
    fill(spark, config)
    before_version = DeltaTable(str(table)).version()
    appended = generate(100_000, 104_000, GeneratorSettings(seed=9), SSB_COLUMNS)

    # Another Delta writer (a plain delta-spark job) appends in four commits while the compactor
    # runs its rounds on the same table.
    errors: list[BaseException] = []

    def append() -> None:
        try:
            for part in range(4):
                rows = pa.Table.from_batches([appended.slice(part * 1_000, 1_000)])
                spark.createDataFrame(rows).write.format("delta").mode("append").save(str(table))
        except BaseException as e:
            errors.append(e)

    writer = threading.Thread(target=append)
    compactor = Compactor(config, spark=spark)
    writer.start()
    results: list[Any] = []
    while writer.is_alive() or not results:
        results.extend(compactor.run_once())
    writer.join()
    results.extend(compactor.run_once())
    assert not errors, errors
    assert any(r.result == "committed" for r in results), results

    # Nothing lost, nothing twice: 12,000 streamed rows and 4,000 appended ones, by every reader.
    rows = read_delta(table)
    assert rows.num_rows == 16_000
    keys = rows.column("lo_orderkey").to_pylist()
    assert sorted(keys) == sorted([*range(12_000), *range(100_000, 104_000)])
    duck = duckdb_connection().execute(f"SELECT count(*), count(DISTINCT lo_orderkey) FROM delta_scan('{table}')")
    assert duck.fetchone() == (16_000, 16_000)
    assert spark.read.format("delta").load(str(table)).count() == 16_000

    # DESCRIBE HISTORY shows each rewrite as an OPTIMIZE with its metrics; its actions change no data.
    history = spark.sql(f"DESCRIBE HISTORY delta.`{table}`").collect()
    optimizes = [h for h in history if h["operation"] == "OPTIMIZE"]
    assert len(optimizes) == sum(r.result == "committed" for r in results)
    for h in optimizes:
        metrics = h["operationMetrics"]
        assert int(metrics["numRemovedFiles"]) > 0 and int(metrics["numAddedFiles"]) > 0
        entries = [json.loads(line) for line in
                   (table / "_delta_log" / f"{h['version']:020d}.json").read_text().splitlines()]  # fmt: skip
        actions = [e.get("add") or e.get("remove") for e in entries if "add" in e or "remove" in e]
        assert actions and all(a["dataChange"] is False for a in actions)
    assert {h["operation"] for h in history} >= {"WRITE", "OPTIMIZE"}

    # Time travel through Spark SQL: the version before any rewrite reads the streamed rows.
    old = spark.sql(f"SELECT lo_orderkey FROM delta.`{table}` VERSION AS OF {before_version}").toPandas()
    assert sorted(old["lo_orderkey"]) == list(range(12_000))
    old_rs = DeltaTable(str(table), version=before_version).to_pyarrow_table(columns=["lo_orderkey"])
    assert sorted(old_rs.column("lo_orderkey").to_pylist()) == list(range(12_000))

    # Data skipping by the rewritten files' stats: a point query reads exactly the files whose
    # min/max admit the value, a fraction of the table (about N^(2/3) of N files for a layout on
    # three columns).
    city = rows.column("s_city")[0].as_py()
    adds = pa.table(DeltaTable(str(table)).get_add_actions(flatten=True)).to_pylist()
    admitting = sum(1 for a in adds if a["min.s_city"] <= city <= a["max.s_city"])
    count, read = files_read(spark, f"SELECT count(*) FROM delta.`{table}` WHERE s_city = '{city}'")
    assert count == sum(1 for c in rows.column("s_city").to_pylist() if c == city)
    assert read == admitting, (read, admitting)
    assert read <= 1.5 * len(adds) ** (2 / 3) and read < len(adds), (read, len(adds))
