"""The Arrow fast path and the exact single-record rules must agree on every record."""

from __future__ import annotations

import datetime as dt
import decimal
import json
import math
from unittest import mock

import pyarrow as pa
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from lakecluster.schema import ColumnSpec
from lakecluster.stream import parse as parse_module
from lakecluster.stream.parse import ParseLimits, RecordParser, parse_one

COLUMNS = (
    ColumnSpec("id", "long", required=True),
    ColumnSpec("city", "string"),
    ColumnSpec("qty", "int"),
    ColumnSpec("price", "double"),
    ColumnSpec("amount", "decimal(10,2)"),
    ColumnSpec("flag", "boolean"),
    ColumnSpec("day", "date"),
    ColumnSpec("ts", "timestamp"),
    ColumnSpec("ratio", "float"),
)
# Failed blocks of up to _EXACT_BELOW records go to the exact path whole; bisecting down to single
# records instead (1) has Arrow read, alone, every record it can, so that the fast path's own checks
# meet every kind of record.
EXACT_BELOW = st.sampled_from([1, parse_module._EXACT_BELOW])
# Without a required column, nothing but the exact rules tells an empty row from a JSON null.
NONE_REQUIRED = tuple(ColumnSpec(c.name, c.type) for c in COLUMNS)
# Small limits, so that records at and over each of them are common in generated examples.
SMALL = ParseLimits(max_record_bytes=400, max_depth=4, max_string_chars=12)

# Field values of every JSON kind, valid and invalid for each column type.
field_values = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**64), max_value=2**64),
    st.sampled_from([10**400, -(10**1200), 3 * 10**38]),
    st.floats(allow_nan=False, allow_infinity=False),
    st.sampled_from(
        [
            "",
            "UNITED KI1",
            "MFGR#1221",
            "12",
            "1.5",
            "+1.5",
            ".5",
            " 1.5",
            "1_0",
            "NaN",
            "Infinity",
            "2024-02-29",
            "2023-02-29",
            "2023-02-30",
            "0000-01-01",
            "0001-01-01",
            "9999-12-31",
            "2024-W01-1",
            "2024-13-45",
            "2024-1-2",
            "2024-01-02T03:04:05.123456Z",
            "2024-01-02T03:04:05.123456789Z",
            "2024-01-02 03:04:05+02:00",
            "2023-02-30T00:00:00Z",
            "0000-01-01T00:00:00",
            "0001-01-01T00:00:00+01:00",
            "9999-12-31T23:59:59-01:00",
            "20240102T030405",
            "yesterday",
            "3.10",
            "1e3",
            "ÉIRE",
            "\ud800",
            "\udc00x",
            "😀",
            "x" * 13,
            "é" * 12,
            "[[[[[[[[",
        ]
    ),
    st.lists(st.integers(), max_size=2),
    st.dictionaries(st.sampled_from(["a", "b"]), st.integers(), max_size=2),
    st.integers(min_value=1, max_value=6).map(lambda d: json.loads("[" * d + "]" * d)),  # nested arrays
)
AMOUNT_MAX = decimal.Decimal("99999999.99")  # decimal(10,2)

# Values each column accepts, so that many generated records are valid (and the fast path has to
# agree on the values, not only on the rejection).
valid_values = {
    "id": st.integers(min_value=-(2**63), max_value=2**63 - 1),
    "city": st.text(max_size=16),
    "qty": st.integers(min_value=-(2**31), max_value=2**31 - 1),
    "price": st.floats(),
    "amount": st.decimals(min_value=-AMOUNT_MAX, max_value=AMOUNT_MAX, places=2).map(lambda d: float(d)),
    "flag": st.booleans(),
    "day": st.dates().map(dt.date.isoformat),
    "ts": st.datetimes(timezones=st.sampled_from([None, dt.UTC, dt.timezone(dt.timedelta(hours=-5, minutes=-30))])).map(
        dt.datetime.isoformat
    ),
    "ratio": st.floats(width=32),
    "extra": field_values,
}
mostly_valid = st.fixed_dictionaries(
    {"id": valid_values["id"]},
    optional={
        name: st.one_of(values, values, values, field_values) for name, values in valid_values.items() if name != "id"
    },
)
records = st.one_of(
    mostly_valid,
    st.dictionaries(st.sampled_from([c.name for c in COLUMNS] + ["extra"]), field_values, max_size=10),
)
# Values every run checks (as one block, see @example), and that generated blocks mix in.
SPECIAL_VALUES: list[bytes | None] = [
    b"",
    b"   ",
    b"not json {",
    b"[1, 2]",
    b"5",
    b'{"id": 1}{"id": 2}',
    b"null",
    b"{}",
    b'{"id": 3,\n"city": "x"}',
    b'{"id": 4, "price": NaN}',
    b'{"id": 5, "city": "a\nb"}',
    b'{"id": 6, "city": "a\tb"}',
    b'{"id": 7, "id": 8}',
    b'{"id": 9, "ratio": 1e300}',
    b'{"id": 10, "ratio": Infinity}',
    b'{"id": 11, "city": "\xed\xa0\x80"}',
    b'{"id": 12, "extra": "\xed\xa0\x80"}',
    b'{"id": 13, "extra": [[[[[[1]]]]]]}',  # too deep for the small limits only
    b'{"id": 14, "extra": "[[[[[[[[", "city": "{{{{{{"}',
    b'{"id": 17, "day": "0000-01-01"}',
    b'{"id": 17, "ts": "0000-01-01T00:00:00"}',
    b'{"id": 18, "day": "2023-02-30"}',
    b'{"id": 19, "price": 1' + b"0" * 400 + b"}",
    b'{"id": 20, "city": "' + "é".encode() * 13 + b'"}',  # too long for the small limits only
    rb'{"id": 21, "city": "\ud800"}',
    b'\xef\xbb\xbf{"id": 15}',
    '{"id": 16}'.encode("utf-16"),
    b"\xff\xfe",
    None,
]
raw_values = st.one_of(
    records.map(lambda r: json.dumps(r).encode()),
    records.map(lambda r: json.dumps(r, ensure_ascii=False).encode("utf-8", "surrogatepass")),
    records.map(lambda r: json.dumps(r, indent=1).encode()),  # several lines: the exact path
    st.sampled_from(SPECIAL_VALUES),
)


def _same(a: object, b: object) -> bool:
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    return a == b


@settings(max_examples=100, deadline=None)
@given(st.lists(raw_values, min_size=1, max_size=40), st.sampled_from([ParseLimits(), SMALL]), EXACT_BELOW)
@example(SPECIAL_VALUES, ParseLimits(), 1)
@example(SPECIAL_VALUES, SMALL, 1)
@pytest.mark.parametrize("columns", [COLUMNS, NONE_REQUIRED], ids=["id_required", "none_required"])
def test_block_parse_equals_record_by_record_rules(
    columns: tuple[ColumnSpec, ...], values: list[bytes | None], limits: ParseLimits, exact_below: int
) -> None:
    with mock.patch.object(parse_module, "_EXACT_BELOW", exact_below):
        parsed = RecordParser(columns, limits).parse(pa.array(values, pa.binary()))
    rows = parsed.table.to_pylist()
    codes = parsed.codes.to_pylist()
    reasons = parsed.reasons.to_pylist()
    assert len(rows) == len(codes) == len(reasons) == len(values)
    for value, row, code, reason in zip(values, rows, codes, reasons, strict=True):
        expected = parse_one(value, columns, limits)
        assert (code, reason) == (expected.code, expected.reason), value
        if expected.row is not None:
            # from_pylist normalises the exact path's values exactly as the table will hold them
            want = pa.Table.from_pylist([expected.row], schema=parsed.table.schema).to_pylist()[0]
            assert all(_same(row[k], want[k]) for k in want), (value, row, want)
        else:
            assert all(v is None for v in row.values()), value


def test_reasons_name_the_problem() -> None:
    values = [
        None,
        b"not json {",
        b"[1, 2]",
        b'{"city": "X"}',
        b'{"id": null}',
        b'{"id": "12"}',
        b'{"id": 1, "qty": 3000000000, "day": "2024-13-45"}',
        b'{"id": 1, "amount": 1.234}',
        b'{"id": 1, "city": 42}',
    ]
    parsed = RecordParser(COLUMNS).parse(pa.array(values, pa.binary()))
    assert parsed.reasons.to_pylist() == [
        "record has no value (null)",
        "not valid JSON",
        "JSON value is not an object",
        "missing required field id",
        "required field id is null",
        'field id: expected long, got string "12"',
        'field qty: expected int, got number 3000000000; field day: expected date, got string "2024-13-45"',
        "field amount: expected decimal(10,2), got number 1.234",
        "field city: expected string, got number 42",
    ]
    assert parsed.codes.to_pylist() == [
        "null_value",
        "not_json",
        "not_object",
        "missing_required",
        "missing_required",
        "type_mismatch",
        "out_of_range",  # the first failing field's code
        "out_of_range",
        "type_mismatch",
    ]


def test_decimals_too_large_for_the_column_are_rejected_not_crashed_on() -> None:
    values = [b'{"id": 1, "amount": 100000000}', b'{"id": 2, "amount": 1e+98}', b'{"id": 3, "amount": 99999999.99}']
    parsed = RecordParser(COLUMNS).parse(pa.array(values, pa.binary()))
    assert parsed.reasons.to_pylist() == [
        "field amount: expected decimal(10,2), got number 100000000",
        "field amount: expected decimal(10,2), got number 1E+98",
        None,
    ]
    assert parsed.codes.to_pylist() == ["out_of_range", "out_of_range", None]
    assert str(parsed.table.column("amount")[2].as_py()) == "99999999.99"


def test_rows_stay_aligned_with_their_records_around_malformed_ones() -> None:
    values = [json.dumps({"id": i, "city": f"c{i}"}).encode() for i in range(1000)]
    values[10] = b'{"id": 10}{"id": 11}'  # two objects in one value
    values[500] = b""  # empty value
    values[700] = b'{"id": 700,\n"city": "c700"}'  # valid, spans two lines
    parsed = RecordParser(COLUMNS).parse(pa.array(values, pa.binary()))
    ids = parsed.table.column("id").to_pylist()
    cities = parsed.table.column("city").to_pylist()
    for i in range(1000):
        if i in (10, 500):
            assert ids[i] is None and parsed.reasons[i].as_py() == "not valid JSON"
            assert parsed.codes[i].as_py() == "not_json"
        else:
            assert (ids[i], cities[i]) == (i, f"c{i}")
