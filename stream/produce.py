"""``lakecluster produce``: the built-in generator's records, as JSON or Avro, into the configured
Kafka topic.

For demos (the compose deployment's producer) and load tests: the same records ``source.kind =
"generator"`` yields, serialised the way a producer of the table's schema would, at a steady rate.
In Avro (the Confluent wire format), the table's columns become a record schema
(:func:`avro_schema`) registered in the schema registry under the subject the configured naming
strategy gives. ``malformed_every`` turns every n-th record into bytes that are neither JSON nor
Avro's wire format, to see the quarantine work.
"""

from __future__ import annotations

import io
import logging
import struct
import threading
import time
from collections.abc import Callable
from typing import Any

import pyarrow as pa

from lakecluster.config import Config
from lakecluster.schema import ColumnSpec
from lakecluster.stream.generator import GeneratorSettings, generate

log = logging.getLogger(__name__)

MALFORMED = b"{not json"


_AVRO_TYPES: dict[str, Any] = {
    "int": "int", "long": "long", "float": "float", "double": "double", "boolean": "boolean", "string": "string",
    "date": {"type": "int", "logicalType": "date"}, "timestamp": {"type": "long", "logicalType": "timestamp-micros"},
}  # fmt: skip


def avro_schema(columns: tuple[ColumnSpec, ...], name: str = "Row", namespace: str = "lakecluster") -> dict[str, Any]:
    """The Avro record schema a producer of the table's ``columns`` writes: each column a field of
    the matching type (docs/records.md, "Avro records"), a union with null unless required."""
    fields = []
    for column in columns:
        decimal = column.decimal
        avro: Any = _AVRO_TYPES[column.type] if decimal is None else {
            "type": "bytes", "logicalType": "decimal", "precision": decimal[0], "scale": decimal[1]}
        fields.append({"name": column.name, "type": avro} if column.required else
                      {"name": column.name, "type": ["null", avro], "default": None})  # fmt: skip
    return {"type": "record", "name": name, "namespace": namespace, "fields": fields}


def avro_values(config: Config, start: int, n: int, schema_id: int, malformed_every: int = 0) -> list[bytes]:
    """Records ``start .. start+n`` of the generator in the Confluent wire format with ``schema_id``."""
    import fastavro

    g = config.source.generator
    batch = generate(start, start + n, GeneratorSettings(g.seed, g.brand_skew, g.scale_factor), config.table.columns)
    parsed = fastavro.parse_schema(avro_schema(config.table.columns))
    header = b"\0" + struct.pack(">I", schema_id)
    out = []
    for i, row in enumerate(batch.to_pylist()):
        if malformed_every > 0 and (start + i) % malformed_every == 0:
            out.append(MALFORMED)
            continue
        body = io.BytesIO()
        body.write(header)
        fastavro.schemaless_writer(body, parsed, row)
        out.append(body.getvalue())
    return out


def json_values(config: Config, start: int, n: int, malformed_every: int = 0) -> list[bytes]:
    """Records ``start .. start+n`` of the generator as JSON lines (vectorised through pandas)."""
    g = config.source.generator
    batch = generate(start, start + n, GeneratorSettings(g.seed, g.brand_skew, g.scale_factor), config.table.columns)
    frame = batch.to_pandas()
    for field in batch.schema:
        name = field.name
        if pa.types.is_decimal(field.type) or pa.types.is_date(field.type):
            frame[name] = frame[name].astype(str)  # exact decimals and ISO dates, as strings
        elif pa.types.is_timestamp(field.type):
            frame[name] = frame[name].dt.strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    lines = frame.to_json(orient="records", lines=True).splitlines()
    if malformed_every <= 0:
        return [line.encode() for line in lines]
    return [MALFORMED if (start + i) % malformed_every == 0 else line.encode() for i, line in enumerate(lines)]


def produce(config: Config, *, rate: int, records: int = 0, malformed_every: int = 0,
            stop: threading.Event | None = None, start: int = 0, avro: bool | None = None) -> int:  # fmt: skip
    """Send records to the first configured topic at ``rate`` per second until ``records`` are sent
    (0: until ``stop`` is set), in Avro when ``avro`` (None: as ``source.kafka.format`` says).
    Returns how many were sent; every one is acknowledged by then."""
    from kafka import KafkaProducer

    from lakecluster.stream.kafka import client_kwargs

    k = config.source.kafka
    topic = k.topics[0]
    values: Callable[[Config, int, int, int], list[bytes]] = json_values
    if avro if avro is not None else k.format == "avro":
        schema_id = register_schema(config, topic)
        values = lambda c, s, n, m: avro_values(c, s, n, schema_id, m)  # noqa: E731
    producer = KafkaProducer(**client_kwargs(k), linger_ms=50, acks="all",
                             retries=2**31 - 1, max_in_flight_requests_per_connection=1)  # fmt: skip
    stop = stop or threading.Event()
    sent = start
    chunk = max(1, rate // 4)  # four sends a second keep the rate smooth
    try:
        while not stop.is_set() and (records <= 0 or sent - start < records):
            began = time.monotonic()
            n = chunk if records <= 0 else min(chunk, records - (sent - start))
            for value in values(config, sent, n, malformed_every):
                producer.send(topic, value=value)
            producer.flush()
            sent += n
            stop.wait(max(0.0, n / rate - (time.monotonic() - began)))
    finally:
        producer.close()
    return sent - start


def register_schema(config: Config, topic: str) -> int:
    """Registers :func:`avro_schema` of the table's columns under ``topic``'s subject; its id."""
    from lakecluster.stream.schema_registry import SchemaRegistryClient, subject_name

    sr = config.source.kafka.schema_registry
    client = SchemaRegistryClient(sr.urls, user=sr.basic_auth_user, password=sr.basic_auth_password,
                                  ca_file=sr.ca_file, cert_file=sr.cert_file, key_file=sr.key_file,
                                  timeout_s=sr.timeout_s)  # fmt: skip
    schema = avro_schema(config.table.columns)
    return client.register(subject_name(sr.subject_strategy, topic, "lakecluster.Row"), schema)
