"""The table follows its producers (``stream.schema_evolution``): fields of the records that are no
column are counted, reported and, with ``add_columns``, added to the table as nullable columns
before the rows that carry them; a change that is not additive quarantines and is named."""

from __future__ import annotations

import datetime as dt
import json
import logging
import subprocess
import uuid
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from deltalake import DeltaTable

from lakecluster import metrics
from lakecluster.config import load_config
from lakecluster.index.prune import prune
from lakecluster.index.reader import read_candidates
from lakecluster.index.spec import IndexSpec
from lakecluster.index.sync import sync
from lakecluster.schema import ColumnSpec
from lakecluster.stream.avro import column_type_of, plan_schema
from lakecluster.stream.job import StreamJob
from lakecluster.stream.parse import RecordParser
from lakecluster.stream.schema_evolution import MAX_FIELDS_EXPORTED, SchemaFollower, column_of_field, one_type
from lakecluster.table import LakeTable
from tests.conftest import duckdb_connection, lakecluster_cmd, read_delta, subprocess_env
from tests.services.kafka import KafkaBroker as Broker
from tests.services.kafka import Message
from tests.services.schema_registry import SchemaRegistry
from tests.stream import kafka_records as kr
from tests.stream.test_avro_stream import DATE, wire

DECLARED = (ColumnSpec("id", "long", True), ColumnSpec("qty", "int"))


def unseen_records(field: str) -> float:
    return metrics.REGISTRY.get_sample_value("lakecluster_stream_unseen_field_records_total", {"field": field}) or 0


# -- the rules, without Spark ----------------------------------------------------------------------


def test_a_field_gets_the_one_type_that_holds_all_its_values() -> None:
    assert one_type(["long"]) == "long" and one_type(["string"]) == "string"
    assert one_type(["long", "double"]) == "double" and one_type(["int", "long"]) == "long"
    assert one_type(["int", "float"]) == "double"
    for kinds in (["long", "string"], ["object"], ["array"], ["unsupported"], ["boolean", "long"]):
        assert one_type(kinds) is None, kinds


def test_json_values_of_unknown_keys_are_counted_by_kind_in_the_same_read() -> None:
    parser = RecordParser(DECLARED, count_unseen=True)
    values = [json.dumps({"id": i, "qty": 1, "discount": i, "note": "n", "tags": [1], "meta": {"a": 1},
                          "gone": None}).encode() for i in range(40)]  # fmt: skip
    values += [json.dumps({"id": 100, "discount": 2.5}).encode()]
    parsed = RecordParser(DECLARED, count_unseen=True).parse(pa.array(values, pa.binary()))
    assert parsed.unseen == {("discount", "double"): 41, ("note", "string"): 40, ("tags", "array"): 40,
                             ("meta", "object"): 40}  # fmt: skip
    assert parsed.codes.null_count == len(values)  # every record valid: an unknown key changes no row
    assert parsed.table.to_pylist() == RecordParser(DECLARED).parse(pa.array(values, pa.binary())).table.to_pylist()
    # Keys whose values change kind inside a block are not counted there; the block is still read.
    mixed = [json.dumps({"id": i, "x": i if i % 2 else "s"}).encode() for i in range(40)]
    again = parser.parse(pa.array(mixed, pa.binary()))
    assert again.unseen == {} and again.codes.null_count == 40


def test_a_field_becomes_a_column_once_typed_named_and_seen_often_enough(caplog: pytest.LogCaptureFixture) -> None:
    follower = SchemaFollower(DECLARED, "add_columns", 50)
    caplog.set_level(logging.WARNING)
    assert follower.met({("discount", "long"): 30, ("a b", "long"): 80, ("QTY", "long"): 90, ("_lc_kind", "long"): 60},
                        0) == []  # fmt: skip
    assert "becomes a column once 50 records carry it" in caplog.text
    assert "not a name a column can have" in caplog.text and "differs from the column qty only in case" in caplog.text
    assert "starts as lakecluster's working columns do" in caplog.text
    # The same batch read again (a second pass) is not counted twice.
    assert follower.met({("discount", "long"): 30}, 0) == []
    assert follower.met({("discount", "double"): 20, ("meta", "object"): 99, ("s", "string"): 1}, 1) == [
        ColumnSpec("discount", "double")]  # fmt: skip
    assert follower.met({("s", "long"): 60}, 2) == []  # a string and a number: no one type
    assert "no one column type takes (long, string)" in caplog.text
    assert follower.seen()["meta"] == {"records": 99, "kinds": ["object"]}


def test_with_none_a_field_is_reported_once_and_counted_under_a_bounded_set_of_labels(
    caplog: pytest.LogCaptureFixture,
) -> None:
    follower = SchemaFollower(DECLARED, "none", 1)
    before, other = unseen_records("evolution_none_x"), unseen_records("_other")
    caplog.set_level(logging.WARNING)
    assert follower.met({("evolution_none_x", "long"): 500}, 0) == []
    assert follower.met({("evolution_none_x", "long"): 5}, 1) == []
    assert caplog.text.count("'evolution_none_x'") == 1 and 'stream.schema_evolution = "add_columns"' in caplog.text
    assert unseen_records("evolution_none_x") - before == 505
    follower.met({(f"id_{i}", "long"): 1 for i in range(MAX_FIELDS_EXPORTED + 10)}, 2)
    assert unseen_records("_other") - other >= 10  # ids as keys make no series per id


def test_the_table_s_columns_are_read_with_the_declared_ones_first() -> None:
    follower = SchemaFollower(DECLARED, "add_columns", 1)
    fields = [{"name": "id", "type": "long"}, {"name": "qty", "type": "integer"}, {"name": "d", "type": "decimal(9,2)"},
              {"name": "n", "type": {"type": "struct", "fields": []}}, {"name": "t", "type": "timestamp"}]  # fmt: skip
    assert follower.follow_table(fields) and not follower.follow_table(fields)
    assert follower.columns == (*DECLARED, ColumnSpec("d", "decimal(9,2)"), ColumnSpec("t", "timestamp"))
    assert column_of_field({"name": "b", "type": "binary"}) is None
    assert not SchemaFollower(DECLARED, "none", 1).follow_table(fields)


def test_avro_fields_map_to_column_types_by_the_documented_table() -> None:
    assert column_type_of("long") == "long"
    assert column_type_of({"type": "enum", "name": "E", "symbols": ["A"]}) == "string"
    assert column_type_of({"type": "bytes", "logicalType": "decimal", "precision": 9, "scale": 2}) == "decimal(9,2)"
    assert column_type_of(DATE) == "date"
    assert column_type_of({"type": "long", "logicalType": "timestamp-micros"}) == "timestamp"
    for other in ("bytes", {"type": "array", "items": "int"}, {"type": "long", "logicalType": "time-micros"},
                  {"type": "bytes", "logicalType": "decimal", "precision": 40, "scale": 2}):
        assert column_type_of(other) is None, other
    writer = {"type": "record", "name": "R", "fields": [{"name": "id", "type": "long"},
              {"name": "channel", "type": ["null", {"type": "enum", "name": "C", "symbols": ["WEB"]}]},
              {"name": "blob", "type": "bytes"}]}  # fmt: skip
    assert plan_schema(1, writer, DECLARED).unseen == (("channel", "string"), ("blob", "unsupported"))


# -- the stream, on a real broker ------------------------------------------------------------------


def _config(tmp_path: Path, broker: Broker, topic: str, mode: str, *, kafka_extra: str = "", min_records: int = 50):
    path = kr.write_config(tmp_path / "c.toml", bootstrap=broker.bootstrap, topic=topic, table=tmp_path / "orders",
                           max_offsets=1000, kafka_extra=kafka_extra)  # fmt: skip
    with path.open("a") as f:
        f.write(f'schema_evolution = "{mode}"\nschema_evolution_min_records = {min_records}\n')
    return load_config(path, overrides={"compaction.min_input_files": "2"}, environ={})


def _status(tmp_path: Path) -> tuple[dict[str, Any], str]:
    args = ("--config", str(tmp_path / "c.toml"))
    shown = subprocess.run(lakecluster_cmd(*args, "--json", "status"), capture_output=True, text=True,
                           env=subprocess_env(), timeout=120)  # fmt: skip
    assert shown.returncode == 0, shown.stderr[-2000:]
    text = subprocess.run(lakecluster_cmd(*args, "status"), capture_output=True, text=True, env=subprocess_env(),
                          timeout=120).stdout  # fmt: skip
    (stream,) = json.loads(shown.stdout)["streams"].values()
    return stream["last_batch"], text


@pytest.mark.integration
def test_a_json_key_seen_often_enough_becomes_a_column_that_compaction_keeps(  # type: ignore[no-untyped-def]
    spark, broker: Broker, tmp_path: Path
) -> None:
    from lakecluster.compaction import Compactor

    topic = f"evolve_{uuid.uuid4().hex[:8]}"
    broker.create_topic(topic, 2)
    config = _config(tmp_path, broker, topic, "add_columns")

    def send(ids: range, **extra: Any) -> None:
        broker.produce(topic, [Message(json.dumps({"id": i, "city": "LYON", "day": "2026-05-01", **extra,
                                                   **({"discount": i} if "discount" not in extra else {})}).encode(),
                                       partition=i % 2) for i in ids])  # fmt: skip

    send(range(30), meta={"a": 1})  # 30 records carry discount: below 50, not a column yet
    StreamJob(config, spark=spark, available_now=True).run()
    assert "discount" not in DeltaTable(str(tmp_path / "orders")).schema().to_arrow().names
    last, _ = _status(tmp_path)  # the count is kept in the commit: the next run counts on from it
    assert last["fields"]["counted"] == {"discount": {"long": 30}, "meta": {"object": 30}}
    send(range(30, 70), note="n")  # 70 records over two runs: discount becomes a column before these rows land
    StreamJob(config, spark=spark, available_now=True).run()

    table = DeltaTable(str(tmp_path / "orders"))
    schema = table.schema().to_arrow()
    assert schema.field("discount").type == pa.int64() and schema.field("discount").nullable
    assert "note" not in schema.names and "meta" not in schema.names  # 40 records; nested values
    expected = {i: (i if i >= 30 else None) for i in range(70)}
    assert {r["id"]: r["discount"] for r in read_delta(tmp_path / "orders").to_pylist()} == expected
    duck = duckdb_connection().execute(
        f"SELECT id, discount FROM delta_scan('{tmp_path / 'orders'}')").fetchall()  # fmt: skip
    assert dict(duck) == expected
    last, text = _status(tmp_path)
    assert last["fields"]["added"] == ["discount"] and last["fields"]["unseen"] == {"note": 40}
    assert "field      discount: added to the table as a column before this batch's rows" in text

    # A value of another type in the new column is quarantined and named; the stream goes on.
    send(range(70, 80), discount="ten")
    StreamJob(config, spark=spark, available_now=True).run()
    quarantine = read_delta(LakeTable(config).quarantine.uri).to_pylist()
    assert sorted(q["reason_code"] for q in quarantine) == ["type_mismatch"] * 10
    last, text = _status(tmp_path)
    assert last["fields"]["mismatched"] == {"discount": 10}
    assert "field      discount: 10 records quarantined, the value of another type" in text

    # The compactor rewrites the stream's files on the table's schema: the new column's values stay.
    files_before = len(DeltaTable(str(tmp_path / "orders")).file_uris())
    compactor = Compactor(config, spark=spark)
    for _ in range(4):
        if not compactor.run_once():
            break
    assert len(DeltaTable(str(tmp_path / "orders")).file_uris()) < files_before
    assert {r["id"]: r["discount"] for r in read_delta(tmp_path / "orders").to_pylist()} == expected
    # The column-stats index syncs over the new schema, and a query on the new column reads its rows.
    spec = IndexSpec.for_location(LakeTable(config))
    sync(spec)
    where = "discount >= 50 AND city = 'LYON'"
    assert read_candidates(spark, spec, prune(spec, where, index="stored")).where(where).count() == 20


@pytest.mark.integration
def test_with_none_an_unseen_key_is_counted_and_the_table_keeps_its_schema(  # type: ignore[no-untyped-def]
    spark, broker: Broker, tmp_path: Path
) -> None:
    topic = f"evolve_{uuid.uuid4().hex[:8]}"
    broker.create_topic(topic, 1)
    config = _config(tmp_path, broker, topic, "none", min_records=1)
    field = f"extra_{uuid.uuid4().hex[:6]}"
    broker.produce(topic, [Message(json.dumps({"id": i, "city": "X", "day": "2026-05-01", field: i}).encode())
                           for i in range(25)])  # fmt: skip
    before = unseen_records(field)
    StreamJob(config, spark=spark, available_now=True).run()
    assert field not in DeltaTable(str(tmp_path / "orders")).schema().to_arrow().names
    assert read_delta(tmp_path / "orders").num_rows == 25
    assert unseen_records(field) - before == 25
    last, text = _status(tmp_path)
    assert last["fields"]["unseen"] == {field: 25}
    assert f"field      {field}: in 25 records, no column of the table" in text


V1 = {"type": "record", "name": "Order", "namespace": "shop", "fields": [
    {"name": "id", "type": "long"}, {"name": "city", "type": "string"}, {"name": "day", "type": DATE}]}  # fmt: skip
V2 = {**V1, "fields": [*V1["fields"], {"name": "discount", "type": ["null", "int"], "default": None}]}
CHANNEL = {"type": "enum", "name": "Channel", "symbols": ["WEB", "SHOP"]}
V3 = {**V2, "fields": [*V2["fields"], {"name": "channel", "type": ["null", CHANNEL], "default": None}]}
# Not additive: qty, an int column, written as a string.
V4 = {**V1, "fields": [*V1["fields"], {"name": "qty", "type": "string"}]}


@pytest.mark.integration
def test_three_avro_versions_interleaved_add_their_fields_and_a_type_change_is_quarantined_and_named(  # type: ignore[no-untyped-def]
    spark, broker: Broker, schema_registry: SchemaRegistry, tmp_path: Path
) -> None:
    topic = f"evolve_avro_{uuid.uuid4().hex[:8]}"
    broker.create_topic(topic, 2)
    subject = f"{topic}-value"
    ids = [schema_registry.register(subject, s) for s in (V1, V2, V3)]
    day = dt.date(2026, 5, 3)
    records, expected = [], {}
    for i in range(90):
        version = i % 3
        value: dict[str, Any] = {"id": i, "city": "NICE", "day": day}
        if version >= 1:
            value["discount"] = i
        if version == 2:
            value["channel"] = "SHOP" if i % 2 else "WEB"
        records.append(Message(wire((V1, V2, V3)[version], ids[version], value), partition=i % 2))
        expected[i] = (value.get("discount"), value.get("channel"))
    broker.produce(topic, records)
    extra = f'format = "avro"\n[source.kafka.schema_registry]\nurl = "{schema_registry.url}"\n'
    config = _config(tmp_path, broker, topic, "add_columns", kafka_extra=extra, min_records=1000)

    StreamJob(config, spark=spark, available_now=True).run()

    schema = DeltaTable(str(tmp_path / "orders")).schema().to_arrow()
    assert schema.field("discount").type == pa.int32() and schema.field("channel").type == pa.string()
    rows = read_delta(tmp_path / "orders").to_pylist()
    assert {r["id"]: (r["discount"], r["channel"]) for r in rows} == expected
    assert not LakeTable(config).quarantine.exists() or read_delta(LakeTable(config).quarantine.uri).num_rows == 0

    # A version that changes a column's type: its records go to quarantine, status names the change.
    v4 = schema_registry.register(subject, V4)
    broker.produce(topic, [Message(wire(V4, v4, {"id": 100 + i, "city": "NICE", "day": day, "qty": "many"}))
                           for i in range(5)])  # fmt: skip
    StreamJob(config, spark=spark, available_now=True).run()
    quarantine = read_delta(LakeTable(config).quarantine.uri).to_pylist()
    assert [q["reason_code"] for q in quarantine] == ["type_mismatch"] * 5
    assert read_delta(tmp_path / "orders").num_rows == 90
    last, text = _status(tmp_path)
    assert last["schemas"][str(v4)]["refused"] == "type_mismatch"
    named = f"schema     {v4} ({subject} v4): 5 records, quarantined (type_mismatch: field qty: the column is int"
    assert named in text


@pytest.mark.integration
def test_a_kill_between_adding_a_column_and_committing_its_batch_loses_and_repeats_nothing(  # type: ignore[no-untyped-def]
    spark, broker: Broker, tmp_path: Path
) -> None:
    """Batch 0 has no new field; in batch 1 ``discount`` becomes a column, and the process is killed
    after that commit and before the batch's; the restarted stream lands every row once, with the
    new column's values from batch 1 on."""
    topic = f"evolve_{uuid.uuid4().hex[:8]}"
    broker.create_topic(topic, 1)
    broker.produce(topic, [Message(json.dumps({"id": i, "city": "X", "day": "2026-05-04",
                                               **({"discount": i} if i >= 100 else {})}).encode())
                           for i in range(300)])  # fmt: skip
    config = _config(tmp_path, broker, topic, "add_columns", min_records=10)
    text = (tmp_path / "c.toml").read_text().replace("max_offsets_per_trigger = 1000", "max_offsets_per_trigger = 100")
    (tmp_path / "c.toml").write_text(text)
    env = subprocess_env(LAKECLUSTER_TEST_CRASH_AT="before_commit:1")
    with open(tmp_path / "first.log", "wb") as log:
        died = subprocess.run(lakecluster_cmd("--config", str(tmp_path / "c.toml"), "--set=metrics.port=0", "stream",
                                              "--available-now"),
                              stdout=log, stderr=subprocess.STDOUT, env=env, timeout=300)  # fmt: skip
    assert died.returncode == 137, (tmp_path / "first.log").read_text()[-3000:]
    assert "discount" in DeltaTable(str(tmp_path / "orders")).schema().to_arrow().names, "added before the kill"
    assert read_delta(tmp_path / "orders").num_rows == 100, "the kill cut batch 1 off before its commit"

    config = load_config(tmp_path / "c.toml", environ={})
    StreamJob(config, spark=spark, available_now=True).run()
    rows = read_delta(tmp_path / "orders").to_pylist()
    assert len(rows) == 300 and {r["id"]: r["discount"] for r in rows} == {i: i if i >= 100 else None
                                                                            for i in range(300)}  # fmt: skip


@pytest.mark.integration
def test_columns_another_writer_added_are_written_as_null_by_a_stream_whose_rows_lack_them(  # type: ignore[no-untyped-def]
    spark, tmp_path: Path
) -> None:
    """add_columns reads and writes the table's columns, whoever added them: the generator's typed
    rows lack a column another writer added, and the stream writes it as null beside them."""
    from tests.generated_tables import fill, generator_config

    path = tmp_path / "lineorder"
    fill(spark, generator_config(path, rows=2_000, per_batch=1_000))
    spark.sql(f"ALTER TABLE delta.`{path}` ADD COLUMNS (note STRING, score DOUBLE)")
    config = generator_config(path, rows=4_000, per_batch=1_000, **{"stream.schema_evolution": '"add_columns"'})
    fill(spark, config)
    table = read_delta(path)
    assert table.num_rows == 4_000 and {"note", "score"} <= set(table.column_names)
    assert table["note"].null_count == table["score"].null_count == 4_000
