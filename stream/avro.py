"""Avro records in the Confluent wire format, decoded into the table's columns inside the JVM.

A record's value is a zero byte, a 4-byte big-endian schema id, then the Avro body written with
that schema (the writer's). Each writer schema the stream knows gets a :class:`SchemaPlan`: how
each of the table's columns is read from it (docs/records.md, "Avro"), or why its records cannot
be (a field type no column can take, a required column the schema lacks). A :class:`Decoder`
turns the plans into Spark projections over the raw ``value`` (built once, applied to every
micro-batch until a plan changes): Spark's ``from_avro`` per
writer schema, chosen per record by its id in one ``CASE`` (records of several schema versions
interleave in a micro-batch), with Avro's schema resolution from the writer's schema to a reader
schema made for it, then casts to the table's types and the same per-record rules as JSON (a
required column null, a number out of its column's range, a string too long, ...). Every record
comes out with either its typed columns or a reason code and a reason; no Python sees a record.

A decoding failure in ``from_avro`` (permissive mode) gives a record of nulls; the reader schema
carries one extra field, absent from every writer schema and defaulting to true, so a record that
decoded has it true and one that failed has it null.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from lakecluster.schema import ColumnSpec, spark_sql_type
from lakecluster.stream.batch_task import DECODED_CODE, DECODED_REASON, DECODED_SCHEMA_ID, DECODED_VALUE_BYTES
from lakecluster.stream.parse import ReasonCode

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

MAGIC = 0
HEADER_BYTES = 5
_RULE = "_lc_avro_rule"
# Years 1..9999 (UTC), the range JSON records are held to: days and microseconds since the epoch.
_MIN_DAY, _MAX_DAY = -719_162, 2_932_896
_MIN_MICROS, _MAX_MICROS = -62_135_596_800_000_000, 253_402_300_799_999_999
DECODED_FLAG = "__lakecluster_decoded"
# Avro's own promotions (the specification's schema resolution) a column type accepts, by the
# writer's primitive type: read as the column's type directly.
_PROMOTED = {
    "int": {"int", "long", "float", "double"},
    "long": {"long", "float", "double"},
    "float": {"float", "double"},
    "double": {"double"},
    "boolean": {"boolean"},
    "string": {"string"},
}
# Narrowings the table takes value by value: read with the writer's type, cast, and a value the
# column cannot hold goes to quarantine (out_of_range).
_NARROWED = {("long", "int")}
_AVRO_OF_COLUMN = {"int": "int", "long": "long", "float": "float", "double": "double", "boolean": "boolean",
                   "string": "string"}  # fmt: skip


@dataclass(frozen=True)
class ColumnRead:
    """How one column is read from one writer schema: the reader field's Avro type (None: the
    writer lacks the field and the column is null), and whether the value is cast with a check."""

    column: ColumnSpec
    reader_type: Any | None
    checked_cast: bool = False


@dataclass(frozen=True)
class SchemaPlan:
    """The reading of one writer schema: its reader schema, or the reason its records are refused."""

    schema_id: int
    writer: Any
    reads: tuple[ColumnRead, ...] = ()
    refusal: tuple[ReasonCode, str] | None = None  # (reason code, reason)
    # The writer's fields that are no column, with the column type each would have ("unsupported":
    # none), in the writer's order (stream/schema_evolution.py).
    unseen: tuple[tuple[str, str], ...] = ()

    @property
    def reader(self) -> dict[str, Any]:
        """The reader schema: the writer's record with the table's columns, each typed for Avro's
        resolution from the writer's field, plus the decoded flag."""
        fields: list[dict[str, Any]] = []
        defined: set[str] = set()
        for read in self.reads:
            avro_type = read.reader_type
            if isinstance(avro_type, dict) and "name" in avro_type:  # a named type is defined once
                if avro_type["name"] in defined:
                    avro_type = avro_type["name"]
                defined.add(str(avro_type if isinstance(avro_type, str) else avro_type["name"]))
            fields.append({"name": read.column.name, "default": None,
                           "type": "null" if avro_type is None else ["null", avro_type]})  # fmt: skip
        fields.append({"name": DECODED_FLAG, "type": "boolean", "default": True})
        return {"type": "record", "name": self.writer["name"], "namespace": self.writer.get("namespace", ""),
                "fields": fields}  # fmt: skip


def plan_schema(schema_id: int, writer: Any, columns: Sequence[ColumnSpec]) -> SchemaPlan:
    """How the table's ``columns`` are read from the writer schema ``writer`` (parsed JSON)."""
    if not isinstance(writer, dict) or writer.get("type") != "record":
        not_record = f"schema {schema_id} is not an Avro record"
        return SchemaPlan(schema_id, writer, refusal=(ReasonCode.TYPE_MISMATCH, not_record))
    named = _named_types(writer, "", {})
    namespace = _namespace_of(writer, "")
    fields = {f["name"]: f["type"] for f in writer.get("fields", [])}
    if DECODED_FLAG in fields:
        return SchemaPlan(schema_id, writer, refusal=(ReasonCode.TYPE_MISMATCH, f"schema {schema_id} has a field named "
                                                                       f"{DECODED_FLAG}, which lakecluster reserves"))
    reads, problems = [], []
    for column in columns:
        if column.name not in fields:
            if column.required:
                lacks = f"schema {schema_id} lacks the required field {column.name}"
                problems.append((ReasonCode.MISSING_REQUIRED, lacks))
            reads.append(ColumnRead(column, None))
            continue
        read = _column_read(column, _defined(_optional(fields[column.name]), named, namespace))
        if read is None:
            mismatch = (f"field {column.name}: the column is {column.type}, schema {schema_id} has "
                        f"{_describe(fields[column.name])}")  # fmt: skip
            problems.append((ReasonCode.TYPE_MISMATCH, mismatch))
        else:
            reads.append(read)
    if problems:
        return SchemaPlan(schema_id, writer, refusal=(problems[0][0], "; ".join(reason for _, reason in problems)))
    names = {c.name for c in columns}
    unseen = tuple((name, column_type_of(_defined(_optional(t), named, namespace)) or "unsupported")
                   for name, t in fields.items() if name not in names)  # fmt: skip
    return SchemaPlan(schema_id, writer, tuple(reads), unseen=unseen)


def column_type_of(avro_type: Any | None) -> str | None:
    """The column type a field of ``avro_type`` (its non-null branch, named types defined) becomes
    when the table follows its producers: the mapping of docs/records.md read backwards; None for
    a type no column takes (bytes, fixed, records, arrays, maps, unions of several types)."""
    if avro_type is None:
        return None
    primitive = avro_type if isinstance(avro_type, str) else avro_type.get("type")
    logical = avro_type.get("logicalType") if isinstance(avro_type, dict) else None
    if logical == "decimal" and primitive in ("bytes", "fixed"):
        precision, scale = avro_type.get("precision"), avro_type.get("scale", 0)
        valid = isinstance(precision, int) and isinstance(scale, int) and 0 <= scale <= precision <= 38
        return f"decimal({precision},{scale})" if valid and precision >= 1 else None
    if (primitive, logical) == ("int", "date"):
        return "date"
    if primitive == "long" and logical in ("timestamp-millis", "timestamp-micros"):
        return "timestamp"
    if logical is not None and primitive != "string":
        return None
    if primitive == "enum":
        return "string"
    return primitive if primitive in _PROMOTED else None


_PRIMITIVES = {"null", "boolean", "int", "long", "float", "double", "bytes", "string"}


def _namespace_of(schema: dict[str, Any], enclosing: str) -> str:
    name = str(schema["name"])
    return name.rsplit(".", 1)[0] if "." in name else str(schema.get("namespace", enclosing))


def _full_name(name: str, namespace: str) -> str:
    return name if "." in name or not namespace else f"{namespace}.{name}"


def _named_types(schema: Any, namespace: str, found: dict[str, Any]) -> dict[str, Any]:
    """Every record, enum and fixed type defined in ``schema``, by full name, each with its full
    name as its name (so a reader schema can define it anywhere)."""
    if isinstance(schema, list):
        for branch in schema:
            _named_types(branch, namespace, found)
    elif isinstance(schema, dict):
        kind = schema.get("type")
        if kind in ("record", "enum", "fixed") and "name" in schema:
            inner = _namespace_of(schema, namespace)
            full = _full_name(str(schema["name"]), namespace)
            found[full] = {**{k: v for k, v in schema.items() if k != "namespace"}, "name": full}
            for f in schema.get("fields", []):
                _named_types(f["type"], inner, found)
        elif kind == "array":
            _named_types(schema.get("items"), namespace, found)
        elif kind == "map":
            _named_types(schema.get("values"), namespace, found)
        elif isinstance(kind, (dict, list)):
            _named_types(kind, namespace, found)
    return found


def _defined(avro_type: Any | None, named: dict[str, Any], namespace: str) -> Any | None:
    """``avro_type`` with a reference to a named type replaced by the type's definition."""
    if isinstance(avro_type, str) and avro_type not in _PRIMITIVES:
        return named.get(_full_name(avro_type, namespace), named.get(avro_type))
    if isinstance(avro_type, dict) and avro_type.get("type") in ("enum", "fixed") and "name" in avro_type:
        return named.get(_full_name(str(avro_type["name"]), namespace), avro_type)
    return avro_type


def _optional(avro_type: Any) -> Any | None:
    """The one non-null branch of ``avro_type`` (a plain type, or a union of null and one type);
    None for a union of several types."""
    if isinstance(avro_type, list):
        branches = [b for b in avro_type if b != "null"]
        return branches[0] if len(branches) == 1 else None
    return avro_type


def _describe(avro_type: Any) -> str:
    return json.dumps(avro_type, separators=(",", ":"))[:200]


def _column_read(column: ColumnSpec, writer: Any | None) -> ColumnRead | None:
    """How ``column`` is read from a writer field of type ``writer`` (its non-null branch), or
    None when the column cannot take it."""
    if writer is None:
        return None
    primitive = writer if isinstance(writer, str) else writer.get("type")
    logical = writer.get("logicalType") if isinstance(writer, dict) else None
    if column.decimal is not None:
        if logical == "decimal" and primitive in ("bytes", "fixed"):
            return ColumnRead(column, writer, checked_cast=True)
        return None
    if column.type == "date":
        return ColumnRead(column, writer) if (primitive, logical) == ("int", "date") else None
    if column.type == "timestamp":
        if primitive == "long" and logical in ("timestamp-millis", "timestamp-micros"):
            return ColumnRead(column, writer)
        return None
    if logical is not None and primitive != "string":  # a date, time or decimal for a plain column
        return None
    if column.type == "string" and primitive == "enum":
        return ColumnRead(column, writer)
    if column.type in _PROMOTED.get(primitive, set()):
        return ColumnRead(column, _AVRO_OF_COLUMN[column.type])
    if (primitive, column.type) in _NARROWED:
        return ColumnRead(column, primitive, checked_cast=True)
    return None


CODE, REASON, SCHEMA_ID, VALUE_BYTES = DECODED_CODE, DECODED_REASON, DECODED_SCHEMA_ID, DECODED_VALUE_BYTES


def decode(
    frame: DataFrame, value: str, plans: Mapping[int, SchemaPlan], columns: Sequence[ColumnSpec], *,
    max_record_bytes: int, max_string_chars: int,
) -> DataFrame:
    """``frame`` with the table's ``columns`` (typed as the table) decoded from its binary column
    ``value``, the record's reason code and reason (:data:`CODE`, :data:`REASON`: null for a
    record that becomes a row) and its schema id (:data:`SCHEMA_ID`: null without a Confluent
    header) added. Needs the spark-avro jar on the session's class path."""
    return Decoder.of(frame.columns, value, plans, columns, max_record_bytes=max_record_bytes,
                      max_string_chars=max_string_chars)(frame)  # fmt: skip


@dataclass(frozen=True)
class Decoder:
    """The projections :func:`decode` applies, built once for a set of plans and reused for every
    micro-batch with the same source columns (building them is some hundreds of calls into the JVM).

    The first projection finds the schema id; the second decodes each record once, with the plan of
    its schema id (one struct column per writer schema, null in the other rows); the third reads the
    columns and finds the first rule a record breaks from those structs (Spark does not merge it
    with the second, as that would decode again per reference); the fourth takes that rule's code
    and reason (only a broken rule's reason is built).
    """

    projections: tuple[tuple[Any, ...], ...]

    def __call__(self, frame: DataFrame) -> DataFrame:
        for projection in self.projections:
            frame = frame.select(*projection)
        return frame

    @classmethod
    def of(
        cls, source_columns: Sequence[str], value: str, plans: Mapping[int, SchemaPlan], columns: Sequence[ColumnSpec],
        *, max_record_bytes: int, max_string_chars: int,
    ) -> Decoder:  # fmt: skip
        from pyspark.sql import functions as F
        from pyspark.sql.avro.functions import from_avro

        raw = F.col(value)
        has_header = (F.length(raw) >= HEADER_BYTES) & (F.substring(raw, 1, 1) == F.lit(bytes([MAGIC])))
        schema_id = F.when(has_header & (F.length(raw) <= max_record_bytes),
                           F.conv(F.hex(F.substring(raw, 2, 4)), 16, 10).cast("long"))  # fmt: skip
        body = F.expr(f"substring(`{value}`, {HEADER_BYTES + 1})")
        decodable = {i: p for i, p in sorted(plans.items()) if p.refusal is None}
        structs = {i: f"_lc_avro_{i}" for i in decodable}
        keep = list(source_columns)
        header = (*keep, schema_id.alias(SCHEMA_ID))
        decoded = (*keep, SCHEMA_ID, *[
            F.when(F.col(SCHEMA_ID) == F.lit(i), from_avro(body, json.dumps(p.writer), {
                "avroSchema": json.dumps(p.reader), "mode": "PERMISSIVE"})).alias(structs[i])
            for i, p in decodable.items()])  # fmt: skip

        def field(i: int, name: str) -> Any:
            return F.col(structs[i])[name]

        typed = {}
        for column in columns:
            target = spark_sql_type(column)
            reads = [(i, r) for i, p in decodable.items() for r in p.reads if r.column == column and r.reader_type]
            values = [field(i, column.name).try_cast(target) for i, _ in reads]
            typed[column.name] = F.coalesce(*values, F.lit(None).cast(target)) if values else F.lit(None).cast(target)
        flags = [field(i, DECODED_FLAG) for i in decodable]
        decoded_flag = F.coalesce(*flags) if flags else F.lit(None).cast("boolean")
        cases = _rules(raw, decodable, plans, field, decoded_flag, typed, columns, max_record_bytes, max_string_chars)
        rule = F.lit(None).cast("int")
        if cases:
            rule = F.when(cases[0][0], F.lit(0))
            for k, (condition, _, _) in enumerate(cases[1:], start=1):
                rule = rule.when(condition, F.lit(k))
        checked = (*keep, SCHEMA_ID, *structs.values(), *[typed[c.name].alias(c.name) for c in columns],
                   rule.alias(_RULE))  # fmt: skip
        broken = F.col(_RULE)
        code, reason = F.lit(None).cast("string"), F.lit(None).cast("string")
        if cases:
            code = F.when(broken == 0, F.lit(cases[0][1].value))
            reason = F.when(broken == 0, cases[0][2])
            for k, (_, case_code, case_reason) in enumerate(cases[1:], start=1):
                code, reason = code.when(broken == k, F.lit(case_code.value)), reason.when(broken == k, case_reason)
        # Only a quarantined record needs its raw key and value, topic and headers downstream: the
        # others cross to the Python tasks without them (the value's length rides along, for the
        # bytes read). A quarantined record leaves without column values, as with JSON.
        raw_columns = {"key", value, "topic", "headers"}
        passed = [F.when(broken.isNotNull(), F.col(k)).alias(k) if k in raw_columns else F.col(k) for k in keep]
        result = (*passed, *[F.when(broken.isNull(), F.col(c.name)).alias(c.name) for c in columns],
                  code.alias(CODE), reason.alias(REASON), SCHEMA_ID, F.length(F.col(value)).alias(VALUE_BYTES))
        return cls((header, decoded, checked, result))


def _rules(raw, decodable, plans, field, decoded_flag, typed, columns, max_record_bytes, max_string_chars):  # type: ignore[no-untyped-def]
    """The rules a record must pass, in docs/records.md's order: (condition that breaks it, code,
    reason) expressions. Cheap tests first where a rule allows (a string's bytes bound its
    characters; dates and timestamps are compared as numbers)."""
    from pyspark.sql import functions as F

    schema_id = F.col(SCHEMA_ID)
    cases: list[tuple[Any, str, Any]] = [
        (raw.isNull(), ReasonCode.NULL_VALUE, F.lit("record has no value (null)")),
        (F.length(raw) > max_record_bytes, ReasonCode.TOO_LARGE,
         F.format_string(f"record is %d bytes, over the limit of {max_record_bytes}", F.length(raw))),
        (schema_id.isNull(), ReasonCode.NOT_AVRO,
         F.lit("not in the Confluent Avro wire format (a zero byte and a 4-byte schema id first)")),
    ]  # fmt: skip
    for refused_id, plan in sorted(plans.items()):
        if plan.refusal is not None:
            cases.append((schema_id == F.lit(refused_id), plan.refusal[0], F.lit(plan.refusal[1])))
    known = [F.lit(i) for i in sorted(plans)]
    cases.append((~schema_id.isin(*known) if known else F.lit(True), ReasonCode.UNKNOWN_SCHEMA_ID,
                  F.format_string("the schema registry has no schema with id %d", schema_id)))  # fmt: skip
    cases.append((decoded_flag.isNull(), ReasonCode.AVRO_DECODE,
                  F.format_string("the body does not decode with schema %d", schema_id)))  # fmt: skip
    for column in columns:
        if column.required:
            missing = F.lit(f"missing required field {column.name}")
            cases.append((typed[column.name].isNull(), ReasonCode.MISSING_REQUIRED, missing))
    for column in columns:
        checked = [(i, r) for i, p in decodable.items() for r in p.reads if r.column == column and r.checked_cast]
        if not checked:
            continue
        original = F.coalesce(*[field(i, column.name).cast("string") for i, _ in checked])
        lost = F.lit(False)
        for i, _ in checked:
            value = field(i, column.name)
            lost = lost | (value.isNotNull() & (typed[column.name].isNull() | (typed[column.name] != value)))
        cases.append((lost, ReasonCode.OUT_OF_RANGE,
                      F.format_string(f"field {column.name}: expected {column.type}, got %s", original)))  # fmt: skip
    for column in columns:
        value = typed[column.name]
        if column.type == "string":
            length = F.char_length(value)
            too_long = (F.octet_length(value) > max_string_chars) & (length > max_string_chars)
            cases.append((too_long, ReasonCode.STRING_TOO_LONG,
                          F.format_string(f"field {column.name}: string of %d characters, over the limit of "
                                          f"{max_string_chars}", length)))  # fmt: skip
        elif column.type in ("date", "timestamp"):
            if column.type == "date":
                number, low, high, code = F.unix_date(value), _MIN_DAY, _MAX_DAY, ReasonCode.INVALID_DATE
            else:
                number, low, high, code = F.unix_micros(value), _MIN_MICROS, _MAX_MICROS, ReasonCode.INVALID_TIMESTAMP
            cases.append(((number < low) | (number > high), code,
                          F.format_string(f"field {column.name}: %s is outside the years 1..9999",
                                          value.cast("string"))))  # fmt: skip
    return cases
