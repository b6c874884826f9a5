"""Avro records in the Confluent wire format decoded into the table's columns by Spark, with
records of three writer schemas interleaved in one frame, and every malformed record given its
reason code (docs/records.md)."""

from __future__ import annotations

import datetime as dt
import decimal
import io
import struct
from typing import Any

import fastavro

from lakecluster.schema import ColumnSpec
from lakecluster.stream.avro import CODE, REASON, SCHEMA_ID, decode, plan_schema

COLUMNS = (
    ColumnSpec("id", "long", required=True),
    ColumnSpec("qty", "int"),
    ColumnSpec("city", "string"),
    ColumnSpec("day", "date"),
    ColumnSpec("ts", "timestamp"),
    ColumnSpec("price", "decimal(8,2)"),
    ColumnSpec("ratio", "double"),
    ColumnSpec("ok", "boolean"),
)


def record(name: str, *fields: tuple[str, Any]) -> dict[str, Any]:
    return {"type": "record", "name": name, "namespace": "shop", "fields": [{"name": n, "type": t} for n, t in fields]}


DATE = {"type": "int", "logicalType": "date"}
MILLIS = {"type": "long", "logicalType": "timestamp-millis"}
MICROS = {"type": "long", "logicalType": "timestamp-micros"}
# Version 1: the first fields, ints, an enum for the city.
V1 = record("Order", ("id", "int"), ("qty", "int"),
            ("city", {"type": "enum", "name": "City", "symbols": ["PARIS", "LYON"]}), ("ts", MILLIS))
# Version 2: id widened to long, city a nullable string, a date and a price with a wider scale.
V2 = record("Order", ("id", "long"), ("qty", ["null", "long"]), ("city", ["null", "string"]), ("day", DATE),
            ("ts", MICROS), ("price", {"type": "bytes", "logicalType": "decimal", "precision": 10, "scale": 3}),
            ("note", {"type": "array", "items": "string"}))
# Version 3: a float ratio (promoted to the double column), a boolean, a map the table does not declare.
V3 = record("Order", ("id", "long"), ("ratio", "float"), ("ok", "boolean"), ("tags", {"type": "map", "values": "int"}),
            ("price", {"type": "fixed", "name": "P", "size": 8, "logicalType": "decimal", "precision": 12, "scale": 2}))


def wire(schema: dict[str, Any], schema_id: int, value: dict[str, Any]) -> bytes:
    body = io.BytesIO()
    fastavro.schemaless_writer(body, fastavro.parse_schema(schema), value)
    return b"\0" + struct.pack(">I", schema_id) + body.getvalue()


def test_the_mapping_of_avro_types_to_columns() -> None:
    """Avro's promotions are read as the column's type; narrowings are read with a check; what no
    column can take refuses the schema, naming each field."""
    plan = plan_schema(2, V2, COLUMNS)
    assert plan.refusal is None
    reads = {r.column.name: r for r in plan.reads}
    assert reads["qty"].checked_cast and reads["qty"].reader_type == "long"  # long -> int: value by value
    assert reads["id"].reader_type == "long" and not reads["id"].checked_cast
    assert reads["ratio"].reader_type is None  # absent from the writer: null
    assert plan_schema(1, V1, COLUMNS).refusal is None
    assert {r.column.name: r.reader_type for r in plan_schema(3, V3, COLUMNS).reads}["ratio"] == "double"
    refused = plan_schema(7, record("Order", ("id", "string"), ("qty", ["int", "string"]), ("ts", "long"),
                                    ("day", {"type": "int", "logicalType": "time-millis"})), COLUMNS)  # fmt: skip
    assert refused.refusal is not None and refused.refusal[0] == "type_mismatch"
    for name in ("id", "qty", "ts", "day"):
        assert f"field {name}:" in refused.refusal[1]
    assert plan_schema(8, record("Order", ("qty", "int")), COLUMNS).refusal == (
        "missing_required", "schema 8 lacks the required field id")
    assert plan_schema(9, "string", COLUMNS).refusal == ("type_mismatch", "schema 9 is not an Avro record")


def test_three_schema_versions_interleaved_and_every_bad_record_coded(spark) -> None:  # type: ignore[no-untyped-def]
    ts = dt.datetime(2026, 3, 4, 5, 6, 7, 123456, tzinfo=dt.UTC)
    good = [
        (wire(V1, 11, {"id": 1, "qty": 5, "city": "LYON", "ts": ts}), {"id": 1, "qty": 5, "city": "LYON",
                                                                         "ts": ts.replace(microsecond=123000)}),
        (wire(V2, 12, {"id": 2, "qty": None, "city": None, "day": dt.date(2026, 1, 31), "ts": ts,
                       "price": decimal.Decimal("12.340"), "note": ["x"]}),
         {"id": 2, "day": dt.date(2026, 1, 31), "ts": ts, "price": decimal.Decimal("12.34")}),
        (wire(V3, 13, {"id": 3, "ratio": 0.5, "ok": True, "tags": {"a": 1}, "price": decimal.Decimal("-3.25")}),
         {"id": 3, "ratio": 0.5, "ok": True, "price": decimal.Decimal("-3.25")}),
        (wire(V1, 11, {"id": 4, "qty": -1, "city": "PARIS", "ts": ts}), {"id": 4, "qty": -1, "city": "PARIS",
                                                                           "ts": ts.replace(microsecond=123000)}),
    ]  # fmt: skip
    bad = [
        ("null_value", None),
        ("too_large", wire(V2, 12, {"id": 5, "qty": 1, "city": "x" * 3000, "day": dt.date(2026, 1, 1), "ts": ts,
                                   "price": decimal.Decimal("1.000"), "note": []})),
        ("not_avro", b'{"id": 6}'),
        ("not_avro", b"\0\0\0"),
        ("unknown_schema_id", wire(V1, 99, {"id": 7, "qty": 1, "city": "LYON", "ts": ts})),
        ("avro_decode", b"\0" + struct.pack(">I", 12) + b"\x02"),
        ("out_of_range", wire(V2, 12, {"id": 8, "qty": 3_000_000_000, "city": "a", "day": dt.date(2026, 1, 1), "ts": ts,
                                      "price": decimal.Decimal("1.000"), "note": []})),
        ("out_of_range", wire(V2, 12, {"id": 9, "qty": 1, "city": "a", "day": dt.date(2026, 1, 1), "ts": ts,
                                       "price": decimal.Decimal("1.005"), "note": []})),  # would round
        ("string_too_long", wire(V2, 12, {"id": 10, "qty": 1, "city": "é" * 200, "day": dt.date(2026, 1, 1), "ts": ts,
                                         "price": decimal.Decimal("1.000"), "note": []})),
        ("type_mismatch", wire(record("Order", ("id", "string")), 14, {"id": "eleven"})),
        # A day and an instant past the year 9999, as the int and long Avro allows.
        ("invalid_date", wire(V2, 12, {"id": 12, "qty": 1, "city": "a", "day": 2_932_897, "ts": ts,
                                       "price": decimal.Decimal("1.000"), "note": []})),
        ("invalid_timestamp", wire(V1, 11, {"id": 13, "qty": 1, "city": "LYON", "ts": 253_402_300_800_000})),
    ]  # fmt: skip
    values = [v for v, _ in good[:2]] + [v for _, v in bad] + [v for v, _ in good[2:]]
    frame = spark.createDataFrame([(v, i) for i, v in enumerate(values)], "value binary, position int")
    plans = {i: plan_schema(i, s, COLUMNS) for i, s in ((11, V1), (12, V2), (13, V3),
                                                        (14, record("Order", ("id", "string"))))}  # fmt: skip
    out = decode(frame, "value", plans, COLUMNS, max_record_bytes=2_000, max_string_chars=100)
    rows = {r["position"]: r.asDict() for r in out.collect()}
    assert [n for n in out.columns if not n.startswith("_lc")] == ["value", "position", *[c.name for c in COLUMNS]]
    for position, (_, expected) in zip([0, 1, len(values) - 2, len(values) - 1], good, strict=True):
        row = rows[position]
        assert row[CODE] is None and row[REASON] is None, row
        for column in COLUMNS:
            got = row[column.name]
            if isinstance(got, dt.datetime):
                got = got.astimezone(dt.UTC)
            assert got == expected.get(column.name), (position, column.name, got)
    for position, (code, _) in enumerate(bad, start=2):
        row = rows[position]
        assert row[CODE] == code and row[REASON], (code, row)
        assert all(row[c.name] is None for c in COLUMNS), "a quarantined record has no column values"
    assert rows[6][SCHEMA_ID] == 99 and "99" in rows[6][REASON]
    assert "field qty" in rows[8][REASON] and "3000000000" in rows[8][REASON]
    assert "schema 14" in rows[11][REASON] and "field id" in rows[11][REASON]
    assert "field day" in rows[12][REASON] and "field ts" in rows[13][REASON]


def test_a_required_column_null_in_a_record_is_missing_required(spark) -> None:  # type: ignore[no-untyped-def]
    schema = record("Order", ("id", ["null", "long"]))
    frame = spark.createDataFrame([(wire(schema, 21, {"id": None}),), (wire(schema, 21, {"id": 5}),)], "value binary")
    rows = decode(frame, "value", {21: plan_schema(21, schema, COLUMNS)}, COLUMNS, max_record_bytes=1000,
                  max_string_chars=10).collect()  # fmt: skip
    assert [(r[CODE], r["id"]) for r in rows] == [("missing_required", None), (None, 5)]


def test_named_types_referenced_by_name_are_read_wherever_they_were_defined(spark) -> None:  # type: ignore[no-untyped-def]
    """An enum defined in a field the table does not declare, then used by name (short and full)
    in two columns: the reader schema defines it once, where the table needs it."""
    columns = (ColumnSpec("a", "string"), ColumnSpec("b", "string"))
    city = {"type": "enum", "name": "City", "symbols": ["PARIS", "LYON"]}
    schema = record("Trip", ("from", city), ("a", "City"), ("b", ["null", "shop.City"]))
    frame = spark.createDataFrame([(wire(schema, 31, {"from": "PARIS", "a": "LYON", "b": None}),),
                                   (wire(schema, 31, {"from": "LYON", "a": "PARIS", "b": "LYON"}),)], "value binary")
    plan = plan_schema(31, schema, columns)
    assert plan.refusal is None
    rows = decode(frame, "value", {31: plan}, columns, max_record_bytes=1000, max_string_chars=10).collect()
    assert [(r[CODE], r["a"], r["b"]) for r in rows] == [(None, "LYON", None), (None, "PARIS", "LYON")]
