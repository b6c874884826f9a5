"""The Arrow fast path and the exact single-record rules must agree on every record."""

from __future__ import annotations

import json
import math

import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from lakecluster.schema import ColumnSpec
from lakecluster.stream.parse import RecordParser, parse_one

COLUMNS = (
    ColumnSpec("id", "long", required=True),
    ColumnSpec("city", "string"),
    ColumnSpec("qty", "int"),
    ColumnSpec("price", "double"),
    ColumnSpec("amount", "decimal(10,2)"),
    ColumnSpec("flag", "boolean"),
    ColumnSpec("day", "date"),
    ColumnSpec("ts", "timestamp"),
)

# Field values of every JSON kind, valid and invalid for each column type.
field_values = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**64), max_value=2**64),
    st.floats(allow_nan=False, allow_infinity=False),
    st.sampled_from(
        [
            "",
            "UNITED KI1",
            "MFGR#1221",
            "12",
            "1.5",
            "NaN",
            "Infinity",
            "2024-02-29",
            "2024-13-45",
            "2024-1-2",
            "2024-01-02T03:04:05.123456Z",
            "2024-01-02 03:04:05+02:00",
            "yesterday",
            "3.10",
            "1e3",
            "ÉIRE",
        ]
    ),
    st.lists(st.integers(), max_size=2),
    st.dictionaries(st.sampled_from(["a", "b"]), st.integers(), max_size=2),
)
records = st.dictionaries(st.sampled_from([c.name for c in COLUMNS] + ["extra"]), field_values, max_size=9)
raw_values = st.one_of(
    records.map(lambda r: json.dumps(r).encode()),
    st.sampled_from(
        [
            b"",
            b"   ",
            b"not json {",
            b"[1, 2]",
            b"5",
            b'{"id": 1}{"id": 2}',
            b'{"id": 3,\n"city": "x"}',
            b'{"id": 4, "price": NaN}',
            b'{"id": 5, "city": "a\nb"}',
            b"\xff\xfe",
            None,
        ]
    ),
)


def _same(a: object, b: object) -> bool:
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    return a == b


@settings(max_examples=150, deadline=None)
@given(st.lists(raw_values, min_size=1, max_size=40))
def test_block_parse_equals_record_by_record_rules(values: list[bytes | None]) -> None:
    parsed = RecordParser(COLUMNS).parse(pa.array(values, pa.binary()))
    rows = parsed.table.to_pylist()
    reasons = parsed.reasons.to_pylist()
    assert len(rows) == len(reasons) == len(values)
    for value, row, reason in zip(values, rows, reasons, strict=True):
        expected_row, expected_reason = parse_one(value, COLUMNS)
        assert reason == expected_reason, value
        if expected_row is not None:
            got = row
            # from_pylist normalises the exact path's values exactly as the table will hold them
            want = pa.Table.from_pylist([expected_row], schema=parsed.table.schema).to_pylist()[0]
            assert all(_same(got[k], want[k]) for k in want), (value, got, want)
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
    reasons = RecordParser(COLUMNS).parse(pa.array(values, pa.binary())).reasons.to_pylist()
    assert reasons == [
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


def test_decimals_too_large_for_the_column_are_rejected_not_crashed_on() -> None:
    values = [b'{"id": 1, "amount": 100000000}', b'{"id": 2, "amount": 1e+98}', b'{"id": 3, "amount": 99999999.99}']
    parsed = RecordParser(COLUMNS).parse(pa.array(values, pa.binary()))
    assert parsed.reasons.to_pylist() == [
        "field amount: expected decimal(10,2), got number 100000000",
        "field amount: expected decimal(10,2), got number 1E+98",
        None,
    ]
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
        else:
            assert (ids[i], cities[i]) == (i, f"c{i}")
