"""Kafka records in Avro (the Confluent wire format) through a real broker and a real schema
registry into the table: records of three schema versions interleaved in one micro-batch, a
version the stream meets for the first time mid-batch, and every malformed record quarantined with
its reason."""

from __future__ import annotations

import datetime as dt
import decimal
import io
import json
import struct
import subprocess
import uuid
from pathlib import Path
from typing import Any

import fastavro
import pytest

from lakecluster.config import load_config
from lakecluster.stream.job import StreamJob
from lakecluster.table import LakeTable
from tests.conftest import lakecluster_cmd, read_delta, subprocess_env
from tests.services.kafka import KafkaBroker as Broker
from tests.services.kafka import Message
from tests.services.schema_registry import SchemaRegistry
from tests.stream import kafka_records as kr

pytestmark = pytest.mark.integration

DATE = {"type": "int", "logicalType": "date"}
V1 = {"type": "record", "name": "Order", "namespace": "shop", "fields": [
    {"name": "id", "type": "int"}, {"name": "city", "type": "string"}, {"name": "day", "type": DATE}]}  # fmt: skip
V2 = {**V1, "fields": [*V1["fields"], {"name": "qty", "type": ["null", "int"], "default": None}]}
V3 = {**V2, "fields": [*V2["fields"], {"name": "amount", "default": None, "type": [
    "null", {"type": "bytes", "logicalType": "decimal", "precision": 9, "scale": 2}]}]}  # fmt: skip


def wire(schema: dict[str, Any], schema_id: int, value: dict[str, Any]) -> bytes:
    body = io.BytesIO()
    fastavro.schemaless_writer(body, fastavro.parse_schema(schema), value)
    return b"\0" + struct.pack(">I", schema_id) + body.getvalue()


def test_three_schema_versions_interleaved_land_and_bad_records_are_quarantined(  # type: ignore[no-untyped-def]
    spark, broker: Broker, schema_registry: SchemaRegistry, tmp_path: Path
) -> None:
    topic = f"avro_{uuid.uuid4().hex[:8]}"
    broker.create_topic(topic, 2)
    ids = [schema_registry.register(f"{topic}-value", s) for s in (V1, V2, V3)]
    day = dt.date(2026, 5, 1)
    records, expected = [], {}
    for i in range(60):
        version = i % 3
        value: dict[str, Any] = {"id": i, "city": f"CITY{i % 7}", "day": day}
        if version >= 1:
            value["qty"] = i
        if version == 2:
            value["amount"] = decimal.Decimal(f"{i}.25")
        records.append(Message(wire((V1, V2, V3)[version], ids[version], value), partition=i % 2))
        expected[i] = (f"CITY{i % 7}", value.get("qty"), value.get("amount"))
    bad = {
        b'{"id": 1000}': "not_avro",
        wire(V1, 987_654, {"id": 1001, "city": "X", "day": day}): "unknown_schema_id",
        b"\0" + struct.pack(">I", ids[1]) + b"\x02": "avro_decode",
    }
    records[10:10] = [Message(value, partition=0) for value in bad]
    broker.produce(topic, records)
    table = tmp_path / "orders"
    extra = f'format = "avro"\n[source.kafka.schema_registry]\nurl = "{schema_registry.url}"\n'
    config = load_config(kr.write_config(tmp_path / "c.toml", bootstrap=broker.bootstrap, topic=topic, table=table,
                                         max_offsets=1000, kafka_extra=extra))  # fmt: skip

    reports = StreamJob(config, spark=spark, available_now=True).run()

    rows = read_delta(table).to_pylist()
    assert {r["id"]: (r["city"], r["qty"], r["amount"]) for r in rows} == expected
    # Every record's bytes are counted, though only quarantined ones carry theirs to the tasks.
    assert sum(r.value_bytes for r in reports) == sum(len(m.value) for m in records if m.value is not None)
    assert all(r["day"] == day for r in rows) and len(rows) == len(expected)
    quarantine = read_delta(LakeTable(config).quarantine.uri).to_pylist()
    assert {q["raw_value"]: q["reason_code"] for q in quarantine} == bad
    assert all(q["topic"] == topic and q["reason"] for q in quarantine)

    # status: the writer schemas the last batch met, with their subject versions.
    shown = subprocess.run(lakecluster_cmd("--config", str(tmp_path / "c.toml"), "--json", "status"),
                           capture_output=True, text=True, env=subprocess_env(), timeout=120)  # fmt: skip
    assert shown.returncode == 0, shown.stderr[-2000:]
    (stream,) = json.loads(shown.stdout)["streams"].values()
    schemas = stream["last_batch"]["schemas"]
    assert {k: v["records"] for k, v in schemas.items()} == {str(ids[0]): 20, str(ids[1]): 21, str(ids[2]): 20,
                                                             "987654": 1}  # fmt: skip
    assert schemas[str(ids[2])]["versions"] == [f"{topic}-value v3"] and schemas["987654"]["unknown"]
    text = subprocess.run(lakecluster_cmd("--config", str(tmp_path / "c.toml"), "status"),
                          capture_output=True, text=True, env=subprocess_env(), timeout=120).stdout  # fmt: skip
    assert f"schema     {ids[1]} ({topic}-value v2): 21 records, read" in text


def test_a_registry_out_of_reach_is_ridden_out_and_quarantines_nothing(  # type: ignore[no-untyped-def]
    spark, broker: Broker, schema_registry: SchemaRegistry, tmp_path: Path
) -> None:
    from lakecluster import metrics
    from lakecluster.errors import FatalServiceError
    from tests.services.ports import free_port

    topic = f"avro_{uuid.uuid4().hex[:8]}"
    broker.create_topic(topic, 1)
    schema_id = schema_registry.register(f"{topic}-value", V1)
    day = dt.date(2026, 5, 2)
    broker.produce(topic, [Message(wire(V1, schema_id, {"id": i, "city": "LYON", "day": day})) for i in range(20)])
    table = tmp_path / "orders"

    def config(url: str):  # type: ignore[no-untyped-def]
        extra = f'format = "avro"\n[source.kafka.schema_registry]\nurl = "{url}"\ntimeout_s = 1.0\n'
        path = kr.write_config(tmp_path / "c.toml", bootstrap=broker.bootstrap, topic=topic, table=table,
                               kafka_extra=extra)  # fmt: skip
        return load_config(path, overrides={"retry.initial_backoff_s": "0.2", "retry.max_backoff_s": "0.5",
                                            "retry.give_up_after_s": "3"}, environ={})  # fmt: skip

    dead = f"http://127.0.0.1:{free_port()}"
    down = config(dead)
    with pytest.raises(FatalServiceError, match=r"transient fault.*no schema registry answered"):
        StreamJob(down, spark=spark, available_now=True).run()
    assert metrics.REGISTRY.get_sample_value("lakecluster_schema_registry_up", {"registry": dead}) == 0
    lake = LakeTable(down)
    assert not lake.delta.exists() or read_delta(table).num_rows == 0
    assert not lake.quarantine.exists() or read_delta(lake.quarantine.uri).num_rows == 0, "nothing quarantined"

    StreamJob(config(schema_registry.url), spark=spark, available_now=True).run()
    assert sorted(read_delta(table).column("id").to_pylist()) == list(range(20))
    assert metrics.REGISTRY.get_sample_value("lakecluster_schema_registry_up", {"registry": schema_registry.url}) == 1
    assert not lake.quarantine.exists() or read_delta(lake.quarantine.uri).num_rows == 0


def test_produce_format_avro_registers_its_schema_and_the_stream_reads_the_generators_rows(  # type: ignore[no-untyped-def]
    spark, broker: Broker, schema_registry: SchemaRegistry, tmp_path: Path
) -> None:
    """``lakecluster produce --format avro``: the generator's records in the wire format, its schema
    registered under the topic's subject; streamed back, the table holds exactly the generator's rows."""
    from lakecluster.stream.generator import GeneratorSettings, generate

    topic = f"avro_{uuid.uuid4().hex[:8]}"
    broker.create_topic(topic, 2)
    settings = {"source.kind": "kafka", "source.kafka.bootstrap_servers": broker.bootstrap,
                "source.kafka.topics": f'["{topic}"]', "source.kafka.schema_registry.url": schema_registry.url,
                "table.path": str(tmp_path / "lineorder"), "table.partition_by": "[]"}  # fmt: skip
    args = [f"--set={k}={v}" for k, v in settings.items()]
    sent = subprocess.run(lakecluster_cmd(*args, "--json", "produce", "--format", "avro", "--records", "400",
                                          "--rate", "100000", "--malformed-every", "97"),
                          capture_output=True, text=True, env=subprocess_env(), timeout=120)  # fmt: skip
    assert sent.returncode == 0, sent.stderr[-2000:]
    assert '"records": 400' in sent.stdout
    latest = schema_registry.get(f"/subjects/{topic}-value/versions/latest")
    assert latest["version"] == 1

    config = load_config(overrides={**settings, "source.kafka.format": "avro"}, environ={})
    StreamJob(config, spark=spark, available_now=True).run()
    expected = generate(0, 400, GeneratorSettings(config.source.generator.seed, 0.0, 1.0), config.table.columns)
    malformed = [i for i in range(400) if i % 97 == 0]
    keep = [i for i in range(400) if i % 97]
    got = read_delta(tmp_path / "lineorder").sort_by("lo_orderkey")
    assert got.select(expected.schema.names).to_pylist() == expected.take(keep).sort_by("lo_orderkey").to_pylist()
    quarantine = read_delta(LakeTable(config).quarantine.uri).to_pylist()
    assert sorted(q["reason_code"] for q in quarantine) == ["not_avro"] * len(malformed)


def test_exactly_once_across_a_schema_change_and_a_kill_in_the_middle_of_it(  # type: ignore[no-untyped-def]
    spark, broker: Broker, schema_registry: SchemaRegistry, tmp_path: Path
) -> None:
    """Batch 0 holds version 1 only, batch 1 both versions interleaved and malformed records, batch 2
    version 2: a process killed in batch 1 between the quarantine's commit and the table's, then
    restarted, leaves every row once and every malformed record quarantined once."""
    topic = f"avro_{uuid.uuid4().hex[:8]}"
    broker.create_topic(topic, 1)
    v1, v2 = (schema_registry.register(f"{topic}-value", s) for s in (V1, V2))
    day = dt.date(2026, 5, 3)
    messages, expected, bad = [], {}, []
    for i in range(300):
        version = 0 if i < 100 else (i % 2 if i < 200 else 1)
        value: dict[str, Any] = {"id": i, "city": f"C{i % 5}", "day": day, **({"qty": i} if version else {})}
        messages.append(Message(wire((V1, V2)[version], (v1, v2)[version], value)))
        expected[i] = value.get("qty")
        if i in (120, 150):
            bad.append(b"\0" + struct.pack(">I", v2) + b"\x03")  # avro_decode, in the batch that is cut short
            messages.append(Message(bad[-1]))
    broker.produce(topic, messages)
    table = tmp_path / "orders"
    extra = f'format = "avro"\n[source.kafka.schema_registry]\nurl = "{schema_registry.url}"\n'
    cfg = kr.write_config(tmp_path / "c.toml", bootstrap=broker.bootstrap, topic=topic, table=table, max_offsets=101,
                          kafka_extra=extra)  # fmt: skip
    env = subprocess_env(LAKECLUSTER_TEST_CRASH_AT="after_quarantine_commit:1")
    with open(tmp_path / "first.log", "wb") as log:
        command = lakecluster_cmd("--config", str(cfg), "--set=metrics.port=0", "stream", "--available-now")
        died = subprocess.run(command, stdout=log, stderr=subprocess.STDOUT, env=env, timeout=300)
    assert died.returncode == 137, (tmp_path / "first.log").read_text()[-3000:]
    config = load_config(cfg, environ={})
    assert len(read_delta(LakeTable(config).quarantine.uri)) == len(bad), "batch 1's quarantine was committed"
    assert 0 < len(read_delta(table)) < len(expected), "the kill cut batch 1 off before the table's commit"

    StreamJob(config, spark=spark, available_now=True).run()
    rows = read_delta(table).to_pylist()
    assert len(rows) == len(expected) and {r["id"]: r["qty"] for r in rows} == expected
    quarantine = read_delta(LakeTable(config).quarantine.uri).to_pylist()
    assert sorted(q["raw_value"] for q in quarantine) == sorted(bad)
    assert {q["reason_code"] for q in quarantine} == {"avro_decode"}
