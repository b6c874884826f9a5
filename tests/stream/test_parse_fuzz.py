"""Property tests of the record contract (docs/records.md) on random bytes and mutated valid records.

Whatever a producer sends, ``RecordParser.parse`` yields one row or one coded quarantine entry per
record, outputs only valid UTF-8, and agrees with the exact rules of ``parse_one``.
"""

from __future__ import annotations

import datetime as dt
import decimal
import json
import math
from typing import Any
from unittest import mock

import pyarrow as pa
from hypothesis import event, given, settings
from hypothesis import strategies as st

from lakecluster.schema import ColumnSpec
from lakecluster.stream import parse as parse_module
from lakecluster.stream.parse import REASON_CODES, ParseLimits, RecordParser, parse_one

COLUMNS = (
    ColumnSpec("id", "long", required=True),
    ColumnSpec("city", "string"),
    ColumnSpec("qty", "int"),
    ColumnSpec("price", "double"),
    ColumnSpec("ratio", "float"),
    ColumnSpec("amount", "decimal(10,2)"),
    ColumnSpec("flag", "boolean"),
    ColumnSpec("day", "date"),
    ColumnSpec("ts", "timestamp"),
)
# Small limits make records at and just over each limit cheap to generate.
LIMITS = st.sampled_from([ParseLimits(), ParseLimits(max_record_bytes=300, max_depth=5, max_string_chars=10)])
# Failed blocks of up to _EXACT_BELOW records go to the exact path whole; bisecting down to single
# records instead (1) has Arrow read, alone, every record it can, so its checks meet every mutation.
EXACT_BELOW = st.sampled_from([1, parse_module._EXACT_BELOW])
OFFSETS = st.sampled_from(
    [None, dt.UTC, dt.timezone(dt.timedelta(hours=5, minutes=30)), dt.timezone(-dt.timedelta(hours=8))]
)

AMOUNT_MAX = decimal.Decimal("99999999.99")  # decimal(10,2)

valid_fields: dict[str, st.SearchStrategy[Any]] = {
    "city": st.text(max_size=12),
    "qty": st.integers(min_value=-(2**31), max_value=2**31 - 1),
    "price": st.floats(allow_nan=False),
    "ratio": st.floats(width=32, allow_nan=False),
    "amount": st.decimals(min_value=-AMOUNT_MAX, max_value=AMOUNT_MAX, places=2, allow_nan=False),
    "flag": st.booleans(),
    "day": st.dates(),
    "ts": st.datetimes(
        min_value=dt.datetime(1, 1, 2), max_value=dt.datetime(9999, 12, 30), timezones=OFFSETS
    ),  # a day from the ends: no offset moves them out of years 1..9999
}
valid_records = st.fixed_dictionaries(
    {"id": st.integers(min_value=-(2**63), max_value=2**63 - 1)},
    optional={**valid_fields, "extra": st.text(max_size=5)},
)


def _encode(record: dict[str, Any], amount_as_string: bool) -> bytes:
    """The JSON a producer would send for a record of Python values."""
    out = {}
    for key, value in record.items():
        if isinstance(value, decimal.Decimal):
            value = str(value) if amount_as_string else float(value)
        elif isinstance(value, dt.date | dt.datetime):
            value = value.isoformat()
        out[key] = value
    return json.dumps(out, ensure_ascii=False).encode()


encoded_valid = st.builds(_encode, valid_records, st.booleans())

INVALID_UTF8 = [b"\x80", b"\xc3\x28", b"\xc0\xaf", b"\xe0\x80\xaf", b"\xed\xa0\x80", b"\xed\xbf\xbf",
                b"\xf4\x90\x80\x80", b"\xf8\x88\x80\x80\x80", b"\xe2\x82", b"\xff", b"\xfe"]  # fmt: skip
BOMS = [b"\xef\xbb\xbf", b"\xff\xfe", b"\xfe\xff", b"\xff\xfe\x00\x00", b"\x00\x00\xfe\xff"]
BAD_DATES = ["2023-02-30", "2023-04-31", "2100-02-29", "0000-01-01", "2024-00-10", "2024-1-2", "2024-W01-1"]
BAD_TIMESTAMPS = ["2023-02-30T00:00:00Z", "2024-01-02T24:00:00", "0000-06-01T00:00:00", "0001-01-01T00:00:00+01:00",
                  "9999-12-31T23:59:59-01:00", "2024-01-02T03:04:61"]  # fmt: skip

WRONG_VALUES = [b'"12"', b"1.5", b"3000000000", b"1" + b"0" * 400, b"1e400", b"1e300", b"true", b"null", b"[]", b"{}",
                b'"x"', b'"NaN"', b"NaN", b"-Infinity", b'"1e3"', b'" 1.5"', b"1.234", b"100000000"]  # fmt: skip


@st.composite
def mutated(draw: st.DrawFn) -> bytes:
    """A valid record, then one of the ways a producer (or the wire) gets it wrong."""
    value = draw(encoded_valid)
    kind = draw(st.sampled_from(["flip", "truncate", "insert_utf8", "insert_bytes", "nest", "long_string", "bom",
                                 "reencode", "bad_date", "bad_ts", "retype", "surrogate_escape"]))  # fmt: skip
    at = draw(st.integers(min_value=0, max_value=len(value)))
    if kind == "flip":
        if not value:
            return value
        i = draw(st.integers(min_value=0, max_value=len(value) - 1))
        return value[:i] + bytes([value[i] ^ (1 << draw(st.integers(0, 7)))]) + value[i + 1 :]
    if kind == "truncate":
        return value[:at]
    if kind == "insert_utf8":
        return value[:at] + draw(st.sampled_from(INVALID_UTF8)) + value[at:]
    if kind == "insert_bytes":
        return value[:at] + draw(st.binary(min_size=1, max_size=4)) + value[at:]
    if kind == "nest":
        depth = draw(st.sampled_from([3, 4, 5, 6, 62, 63, 64, 65, 2000]))
        return value[:-1] + b', "deep": ' + b"[" * depth + b"]" * depth + b"}"
    if kind == "long_string":
        size = draw(st.sampled_from([9, 10, 11, 200, 32_768, 32_769]))
        char = draw(st.sampled_from(["x", "é", "😀"]))
        return value[:-1] + b', "city": ' + json.dumps(char * size, ensure_ascii=False).encode() + b"}"
    if kind == "bom":
        return draw(st.sampled_from(BOMS)) + value
    if kind == "reencode":
        encoding = draw(st.sampled_from(["utf-16", "utf-16-le", "utf-16-be", "utf-32", "utf-32-le", "utf-32-be"]))
        return value.decode().encode(encoding)
    if kind == "bad_date":
        return value[:-1] + b', "day": ' + json.dumps(draw(st.sampled_from(BAD_DATES))).encode() + b"}"
    if kind == "bad_ts":
        return value[:-1] + b', "ts": ' + json.dumps(draw(st.sampled_from(BAD_TIMESTAMPS))).encode() + b"}"
    if kind == "retype":  # a field of the wrong kind, out of range, or a required one missing or null
        name = draw(st.sampled_from([c.name for c in COLUMNS]))
        raw = draw(st.sampled_from(WRONG_VALUES))
        return value[:-1] + b", " + json.dumps(name).encode() + b": " + raw + b"}"
    escape = draw(st.sampled_from([rb"\ud800", rb"\udfff", rb"\ud800\u0041", rb"\ud83d\ude00"]))
    return value[:-1] + b', "city": "' + escape + b'"}'


any_value = st.one_of(
    st.none(),
    st.binary(max_size=40),
    encoded_valid,
    encoded_valid.map(lambda v: json.dumps(json.loads(v), indent=1).encode()),  # several lines
    mutated(),
    mutated(),
    mutated(),
)


def _same(a: object, b: object) -> bool:
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    return a == b


@settings(max_examples=300, deadline=None)
@given(st.lists(any_value, min_size=1, max_size=25), LIMITS, EXACT_BELOW, st.booleans())
def test_every_record_is_one_row_or_one_coded_quarantine_entry(
    values: list[bytes | None], limits: ParseLimits, exact_below: int, count_unseen: bool
) -> None:
    """Whether or not fields that are no column are counted (Arrow then infers them in its read)."""
    with mock.patch.object(parse_module, "_EXACT_BELOW", exact_below):
        parsed = RecordParser(COLUMNS, limits, count_unseen=count_unseen).parse(pa.array(values, pa.binary()))
    # Valid UTF-8 everywhere, and the values come back out as Python objects.
    parsed.table.validate(full=True)
    parsed.codes.validate(full=True)
    parsed.reasons.validate(full=True)
    rows, codes, reasons = parsed.table.to_pylist(), parsed.codes.to_pylist(), parsed.reasons.to_pylist()
    assert len(rows) == len(codes) == len(reasons) == len(values)
    for value, row, code, reason in zip(values, rows, codes, reasons, strict=True):
        # A row (its required id is set) or a quarantine entry (code and reason): never both, never neither.
        assert (row["id"] is not None) != (code is not None), (value, row, code)
        assert (code is None) == (reason is None), value
        assert code is None or (code in REASON_CODES and code != "parser_error"), (value, code, reason)
        event(f"code={code}")
        if code is not None:
            assert all(v is None for v in row.values()), value
        elif row["city"] is not None:
            assert len(row["city"]) <= limits.max_string_chars
            row["city"].encode("utf-8")  # no lone surrogate
        # The fast path says what the exact rules say.
        expected = parse_one(value, COLUMNS, limits)
        assert (code, reason) == (expected.code, expected.reason), value
        if expected.row is not None:
            want = pa.Table.from_pylist([expected.row], schema=parsed.table.schema).to_pylist()[0]
            assert all(_same(row[k], want[k]) for k in want), (value, row, want)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(valid_records, st.booleans()), min_size=1, max_size=40))
def test_valid_records_round_trip_to_their_values(records: list[tuple[dict[str, Any], bool]]) -> None:
    values = [_encode(record, as_string) for record, as_string in records]
    parsed = RecordParser(COLUMNS).parse(pa.array(values, pa.binary()))
    assert parsed.codes.null_count == len(values), parsed.reasons.drop_null().to_pylist()[:3]
    for (record, _), row in zip(records, parsed.table.to_pylist(), strict=True):
        for column in COLUMNS:
            want = record.get(column.name)
            if column.type == "timestamp" and want is not None:
                want = (want if want.tzinfo else want.replace(tzinfo=dt.UTC)).astimezone(dt.UTC)
            elif column.type == "float" and want is not None:
                want = float(pa.scalar(want, pa.float32()).as_py())  # as a float32 column holds it
            assert row[column.name] == want, (column.name, record, row)
