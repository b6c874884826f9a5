"""The stream's tasks write their own files; Delta commits them as the appends Delta's writer makes.

Checked with independent readers (delta-spark, delta-rs, DuckDB) and against the log itself, and
against tables whose features only Delta's own writer honours (the batch goes there instead).
"""

from __future__ import annotations

import json
import re
import uuid
from dataclasses import replace
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import DeltaTable

from lakecluster.config import load_config
from lakecluster.stream.job import StreamJob
from lakecluster.table import LakeTable, create_table, parse_user_metadata
from tests.conftest import duckdb_connection, read_delta
from tests.services.kafka import KafkaBroker as Broker
from tests.stream import kafka_records as kr

pytestmark = pytest.mark.integration

TASK_FILE = re.compile(r"(^|/)part-[0-9a-f]{20}-c\d{4}\.snappy\.parquet$")  # stream/task_files.py
SPARK_FILE = re.compile(r"(^|/)part-\d{5}-[0-9a-f]{8}(-[0-9a-f]{4}){3}-[0-9a-f]{12}[.-]c\d{3}(\.snappy)?\.parquet$")


def _commits(table: Path) -> list[list[dict]]:
    log = sorted((table / "_delta_log").glob("*.json"))
    return [[json.loads(line) for line in f.read_text().splitlines() if line] for f in log]


def _generator_config(tmp_path: Path, name: str, **extra: str):  # type: ignore[no-untyped-def]
    settings = {
        "table.path": str(tmp_path / name), "source.generator.max_rows": "6000",
        "source.generator.max_rows_per_trigger": "3000", "source.generator.partitions": "2",
        "stream.progress": "false", "stream.trigger_interval_s": "0", "metrics.port": "0", **extra,
    }  # fmt: skip
    return load_config(overrides=settings, environ={})


def test_tasks_write_the_batch_and_delta_commits_it_as_an_append(spark, broker: Broker, tmp_path: Path) -> None:
    topic = f"orders_{uuid.uuid4().hex[:8]}"
    broker.create_topic(topic, 2)
    records = kr.build(0, 500, partitions=2, seed=11)
    broker.produce(topic, [(r.partition, r.value) for r in records])
    table = tmp_path / "orders"
    config = load_config(kr.write_config(tmp_path / "c.toml", bootstrap=broker.bootstrap, topic=topic, table=table))
    reports = StreamJob(config, spark=spark, available_now=True).run()
    assert len(reports) >= 2

    quarantine_path = Path(LakeTable(config).quarantine.uri)
    for path, expected_rows in ((table, sum(r.rows for r in reports)),
                                (quarantine_path, sum(r.quarantined for r in reports))):  # fmt: skip
        writes = [c for c in _commits(path) if any("txn" in a for a in c)]
        assert writes, path
        for actions in writes:
            info = next(a["commitInfo"] for a in actions if "commitInfo" in a)
            adds = [a["add"] for a in actions if "add" in a]
            (txn,) = [a["txn"] for a in actions if "txn" in a]
            assert info["operation"] == "WRITE" and info["operationParameters"]["mode"] == "Append"
            assert info["isBlindAppend"] is True
            meta = parse_user_metadata(info["userMetadata"])
            assert meta is not None and meta["txn"] == txn["version"] and txn["appId"] == LakeTable(config).stream_id
            metrics = info["operationMetrics"]
            assert int(metrics["numFiles"]) == len(adds)
            assert int(metrics["numOutputRows"]) == sum(json.loads(a["stats"])["numRecords"] for a in adds)
            assert all(TASK_FILE.search(a["path"]) and a["dataChange"] for a in adds), adds
        added = sum(int(next(a["commitInfo"] for a in c if "commitInfo" in a)["operationMetrics"]["numOutputRows"])
                    for c in writes)  # fmt: skip
        assert added == expected_rows > 0

    expected = kr.expected_rows(records)
    assert kr.table_rows(read_delta(table)) == expected
    assert kr.table_rows(spark.read.format("delta").load(str(table)).toArrow()) == expected
    con = duckdb_connection()
    assert kr.table_rows(con.execute(f"SELECT * FROM delta_scan('{table}')").fetch_arrow_table()) == expected
    bad = {(p, o): r for p, o, r in kr.with_offsets(records) if r.reason}
    quarantined = spark.read.format("delta").load(str(quarantine_path)).toArrow().to_pylist()
    assert {(q["partition"], q["offset"]): q["raw_value"] for q in quarantined} == {k: r.value for k, r in bad.items()}
    assert all(q["stream_id"] == LakeTable(config).stream_id and q["reason"] for q in quarantined)
    assert DeltaTable(str(table)).transaction_version(LakeTable(config).stream_id) == reports[-1].txn_version


def test_a_partitioned_table_written_by_the_tasks_reads_the_same_everywhere(spark, tmp_path: Path) -> None:
    config = _generator_config(tmp_path, "t", **{"table.partition_by": '["d_year"]'})
    StreamJob(config, spark=spark, available_now=True).run()
    table = Path(config.table.path)
    adds = [a["add"] for c in _commits(table) for a in c if "add" in a]
    assert adds and all(TASK_FILE.search(a["path"]) for a in adds)
    assert all(a["path"].startswith(f"d_year={a['partitionValues']['d_year']}/") for a in adds)
    through_rs = read_delta(table)
    through_spark = spark.read.format("delta").load(str(table)).toArrow()
    assert through_rs.num_rows == through_spark.num_rows == 6000
    key = ["lo_orderkey", "lo_linenumber"]
    assert through_rs.sort_by([(k, "ascending") for k in key]).to_pylist() == \
        through_spark.select(through_rs.column_names).sort_by([(k, "ascending") for k in key]).to_pylist()
    for year in sorted(set(through_rs["d_year"].to_pylist()))[:2]:
        rows = spark.read.format("delta").load(str(table)).where(f"d_year = {year}").count()
        assert rows == pa.compute.sum(pa.compute.equal(through_rs["d_year"], year)).as_py()


def test_a_table_with_a_check_constraint_is_written_by_deltas_writer_which_enforces_it(spark, tmp_path: Path) -> None:
    config = _generator_config(tmp_path, "checked", **{"table.partition_by": "[]"})
    create_table(spark, LakeTable(config).delta, LakeTable(config).spec)
    spark.sql(f"ALTER TABLE delta.`{config.table.path}` ADD CONSTRAINT negative CHECK (lo_quantity < 0)")
    with pytest.raises(Exception, match=r"DELTA_VIOLATE_CONSTRAINT.*CHECK constraint negative"):
        StreamJob(config, spark=spark, available_now=True).run()
    assert read_delta(config.table.path).num_rows == 0, "no row that breaks the constraint was committed"

    spark.sql(f"ALTER TABLE delta.`{config.table.path}` DROP CONSTRAINT negative")
    spark.sql(f"ALTER TABLE delta.`{config.table.path}` ADD CONSTRAINT positive CHECK (lo_quantity > 0)")
    StreamJob(config, spark=spark, available_now=True).run()
    assert read_delta(config.table.path).num_rows == 6000
    adds = [a["add"] for c in _commits(Path(config.table.path)) for a in c if "add" in a]
    assert adds and all(SPARK_FILE.search(a["path"]) for a in adds), adds[:2]


def test_the_stream_follows_a_nullable_column_another_writer_added(spark, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """Its tasks go on writing the declared columns: the added one reads as null in their rows."""
    config = _generator_config(tmp_path, "added", **{"table.partition_by": "[]", "source.generator.max_rows": "3000"})
    StreamJob(config, spark=spark, available_now=True).run()
    spark.sql(f"ALTER TABLE delta.`{config.table.path}` ADD COLUMNS (note STRING)")
    spark.sql(f"UPDATE delta.`{config.table.path}` SET note = 'old' WHERE lo_orderkey < 10")
    more = replace(config, source=replace(config.source, generator=replace(config.source.generator, max_rows=6000)))
    StreamJob(more, spark=spark, available_now=True).run()
    rows = spark.read.format("delta").load(config.table.path)
    assert rows.count() == 6000 and rows.where("note = 'old'").count() == 10
    assert duckdb_connection().execute(f"SELECT count(*) FROM delta_scan('{config.table.path}') "
                                       "WHERE note IS NULL AND lo_orderkey >= 3000").fetchone() == (3000,)  # fmt: skip
    last = _commits(Path(config.table.path))[-1]
    adds = [a["add"] for a in last if "add" in a]
    assert adds and all(TASK_FILE.search(a["path"]) for a in adds), adds[:2]  # the tasks wrote them


def test_write_in_tasks_off_writes_the_same_rows_with_deltas_writer(spark, tmp_path: Path) -> None:
    tables = {}
    for on in (True, False):
        config = _generator_config(tmp_path, f"t_{on}", **{"stream.write_in_tasks": str(on).lower()})
        StreamJob(config, spark=spark, available_now=True).run()
        adds = [a["add"] for c in _commits(Path(config.table.path)) for a in c if "add" in a]
        assert adds and all((TASK_FILE if on else SPARK_FILE).search(a["path"]) for a in adds)
        tables[on] = read_delta(config.table.path)
    key = [("lo_orderkey", "ascending"), ("lo_linenumber", "ascending")]
    assert tables[True].sort_by(key).to_pylist() == tables[False].sort_by(key).to_pylist()


def _stats_keys(table: Path) -> dict[str, set[str]]:
    stats = [json.loads(a["add"]["stats"]) for c in _commits(table) for a in c if "add" in a]
    assert stats
    return {side: set().union(*(s[side] for s in stats)) for side in ("minValues", "maxValues", "nullCount")}


@pytest.mark.parametrize("properties", [
    {"delta.dataSkippingNumIndexedCols": "3"},
    {"delta.dataSkippingStatsColumns": "lo_revenue, `C_CITY`"},
])  # fmt: skip
def test_task_files_carry_stats_for_the_columns_deltas_writer_picks(  # type: ignore[no-untyped-def]
    spark, tmp_path: Path, properties: dict[str, str], caplog: pytest.LogCaptureFixture
) -> None:
    keys = {}
    for on in (True, False):
        config = _generator_config(tmp_path, f"t_{on}", **{"stream.write_in_tasks": str(on).lower(),
                                                           "source.generator.max_rows": "3000"})  # fmt: skip
        create_table(spark, LakeTable(config).delta, LakeTable(config).spec, properties=properties)
        StreamJob(config, spark=spark, available_now=True).run()
        keys[on] = _stats_keys(Path(config.table.path))
    assert keys[True] == keys[False]
    # The clustering columns the properties leave out are named, with what to do.
    without = [c for c in config.table.clustering_columns if c not in keys[False]["minValues"]]
    assert without, "the test needs clustering columns without stats"
    warned = [r.getMessage() for r in caplog.records if "get no file stats" in r.getMessage()]
    assert warned and all(", ".join(without) in w and "delta.dataSkippingStatsColumns" in w for w in warned)


def test_an_append_whose_answer_is_lost_is_found_in_the_log_and_not_committed_again(
    spark, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LAKECLUSTER_TEST_FAIL_AT", "stream_after_append_call")  # each commit lands, its call fails
    config = _generator_config(tmp_path, "t", **{"table.partition_by": "[]"})
    job = StreamJob(config, spark=spark, available_now=True)
    reports = job.run()
    assert job.restarts == 0, "the batch went on: its commit was found in the log"
    assert [r.files > 0 for r in reports] == [True, True]
    rows = read_delta(config.table.path)
    assert rows.num_rows == 6000
    assert len(set(zip(rows["lo_orderkey"].to_pylist(), rows["lo_linenumber"].to_pylist(), strict=True))) == 6000
    writes = [c for c in _commits(Path(config.table.path)) if any("txn" in a for a in c)]
    assert [next(a["txn"]["version"] for a in c if "txn" in a) for c in writes] == [r.txn_version for r in reports]


def test_a_query_above_a_files_numbers_still_reads_its_nan(spark, tmp_path: Path) -> None:
    from lakecluster.config import StorageConfig
    from lakecluster.stream.append import AppendTarget, commit_append
    from lakecluster.stream.task_files import BufferedFiles, TaskFiles

    path = str(tmp_path / "nan")
    spark.sql(f"CREATE TABLE delta.`{path}` (id BIGINT, x DOUBLE) USING delta")
    rows = pa.table({"id": pa.array([1, 2, 3], pa.int64()), "x": pa.array([1.0, float("nan"), 3.0])})
    files = TaskFiles(table_uri=path, quarantine_uri=path, partition_by=(), max_records_per_file=0,
                      buffer_bytes=1 << 20, storage=StorageConfig(), stream_id="s", batch_id=0)  # fmt: skip
    writer = BufferedFiles(path, files, rows.schema, (), None)
    writer.add(rows)
    target = AppendTarget.of(spark, LakeTable.at(path).delta, "`id` bigint, `x` double", ())
    commit_append(spark, target, list(writer.close()), app_id="s", txn_version=0, details={})
    # Spark orders NaN above every number: the file must not be skipped by its stats.
    assert [r.id for r in spark.sql(f"SELECT id FROM delta.`{path}` WHERE x > 5").collect()] == [2]
    assert spark.sql(f"SELECT count(*) AS n FROM delta.`{path}` WHERE x < 2").collect()[0].n == 1
    assert spark.sql(f"SELECT count(*) AS n FROM delta.`{path}` WHERE x = double('NaN')").collect()[0].n == 1
