"""JSON records -> typed columns, with a reason for every record that does not fit the schema.

Runs as Spark SQL expressions over the VARIANT type (``try_parse_json``/``try_variant_get``), so
parsing is vectorised in the JVM. Typing is strict: a field must carry the JSON kind its column
declares (an integer column does not take ``"12"`` or ``1.5``; a string column does not take
``12``). Fields not declared in the schema are ignored. The rules are documented in
``docs/records.md``.
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from lakecluster.schema import ColumnSpec, spark_sql_type

REASON = "_lc_reason"
RAW_COLUMNS = ("key", "value", "topic", "partition", "offset", "timestamp")


def _sql_string(text: str) -> str:
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def _accepted(col: ColumnSpec, kind: str) -> str:
    """SQL condition on ``kind`` (the field's ``schema_of_variant``) for JSON kinds the column takes."""
    if col.type == "string" or col.type in ("date", "timestamp"):
        return f"{kind} = 'STRING'"
    if col.type in ("int", "long"):
        return f"{kind} = 'BIGINT'"
    if col.type == "boolean":
        return f"{kind} = 'BOOLEAN'"
    # float, double, decimal: any JSON number
    return f"({kind} = 'BIGINT' OR {kind} = 'DOUBLE' OR {kind} LIKE 'DECIMAL(%')"


def _field_checks(col: ColumnSpec) -> tuple[Column, Column]:
    """(typed value, error message or null) for one declared column."""
    path = _sql_string(f'$["{col.name}"]')
    raw = f"try_variant_get(_lc_v, {path}, 'variant')"
    kind = f"schema_of_variant({raw})"
    sql_type = spark_sql_type(col)
    typed = f"try_variant_get(_lc_v, {path}, '{sql_type}')"
    exact = "TRUE"
    if col.decimal:
        # Reject values that would be rounded to fit the declared scale.
        exact = f"try_variant_get(_lc_v, {path}, 'decimal(38,18)') = CAST({typed} AS decimal(38,18))"
    special_float = ""
    if col.is_floating:
        special_float = (
            f" OR ({kind} = 'STRING' AND try_variant_get({raw}, '$', 'string') IN ('NaN', 'Infinity', '-Infinity'))"
        )
    ok = f"(({_accepted(col, kind)}){special_float}) AND {typed} IS NOT NULL AND {exact}"
    name = col.name.replace("'", "")
    error = f"""CASE
        WHEN {raw} IS NULL THEN {"'missing required field " + name + "'" if col.required else "NULL"}
        WHEN is_variant_null({raw}) THEN {"'required field " + name + " is null'" if col.required else "NULL"}
        WHEN NOT ({ok}) THEN concat('field {name}: expected {col.type}, got ',
                                     lower(regexp_extract({kind}, '^[A-Z]+', 0)), ' ',
                                     substr(to_json({raw}), 1, 80))
    END"""
    value = f"CASE WHEN {ok} THEN {typed} END"
    return F.expr(value).cast(sql_type).alias(col.name), F.expr(error)


def parse_records(raw: DataFrame, columns: tuple[ColumnSpec, ...]) -> DataFrame:
    """Typed columns + ``_lc_reason`` (null when the record is valid) + the raw Kafka columns."""
    value_text = "CAST(value AS STRING)"
    with_variant = raw.select(
        *[F.col(c) for c in RAW_COLUMNS],
        F.expr(f"try_parse_json({value_text})").alias("_lc_v"),
        F.expr(f"ltrim({value_text})").alias("_lc_text"),
    )
    typed, errors = zip(*(_field_checks(c) for c in columns), strict=True)
    record_error = F.expr(
        """CASE
            WHEN value IS NULL THEN 'record has no value (null)'
            WHEN _lc_v IS NULL THEN 'not valid JSON'
            WHEN NOT startswith(_lc_text, '{') THEN 'JSON value is not an object'
        END"""
    )
    field_errors = F.concat_ws("; ", *errors)
    reason = F.coalesce(record_error, F.when(field_errors != "", field_errors))
    return with_variant.select(*typed, reason.alias(REASON), *[F.col(c) for c in RAW_COLUMNS])
