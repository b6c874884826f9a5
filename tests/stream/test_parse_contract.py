"""The record contract (docs/records.md) on the inputs that used to stop the stream: one row or one
coded quarantine entry per record, never an exception, only valid UTF-8 out, limits enforced."""

from __future__ import annotations

import datetime as dt
import json
import re
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from lakecluster.schema import ColumnSpec
from lakecluster.stream import parse as parse_module
from lakecluster.stream.parse import (
    MAX_DEPTH_DEFAULT,
    MAX_RECORD_BYTES_DEFAULT,
    MAX_STRING_CHARS_DEFAULT,
    REASON_CODES,
    ParseLimits,
    RecordParser,
    parse_one,
)

COLUMNS = (
    ColumnSpec("id", "long", required=True),
    ColumnSpec("city", "string"),
    ColumnSpec("price", "double"),
    ColumnSpec("ratio", "float"),
    ColumnSpec("amount", "decimal(10,2)"),
    ColumnSpec("day", "date"),
    ColumnSpec("ts", "timestamp"),
)
DOCS = Path(__file__).resolve().parents[2] / "docs" / "records.md"


def _parse(values: list[bytes | None], limits: ParseLimits | None = None) -> tuple[list[dict[str, Any]], list, list]:
    """Parse, check the output is well formed, and return (rows, codes, reasons)."""
    parser = RecordParser(COLUMNS) if limits is None else RecordParser(COLUMNS, limits)
    parsed = parser.parse(pa.array(values, pa.binary()))
    parsed.table.validate(full=True)  # includes UTF-8 validity of every string
    parsed.codes.validate(full=True)
    parsed.reasons.validate(full=True)
    rows, codes, reasons = parsed.table.to_pylist(), parsed.codes.to_pylist(), parsed.reasons.to_pylist()
    assert len(rows) == len(codes) == len(reasons) == len(values)
    for value, row, code, reason in zip(values, rows, codes, reasons, strict=True):
        assert (code is None) == (reason is None) == (row["id"] is not None), (row, code, reason)
        # Alone in its block, a record Arrow reads takes the fast path's checks (in a block with
        # a record Arrow rejects, it may be left to the exact path): the same fate either way.
        alone = parser.parse(pa.array([value], pa.binary()))
        assert (alone.table.to_pylist()[0], alone.codes[0].as_py(), alone.reasons[0].as_py()) == (row, code, reason)
    return rows, codes, reasons


def _nested(depth: int) -> bytes:
    """A record whose deepest value sits ``depth`` containers down (the record object is one)."""
    inner = depth - 1
    return b'{"id": 1, "extra": ' + b"[" * inner + b"]" * inner + b"}" if inner else b'{"id": 1}'


@pytest.fixture
def parsers_must_not_see(monkeypatch: pytest.MonkeyPatch) -> list[bytes]:
    """Values that Arrow's JSON reader or json.loads were handed (to assert what never reaches them)."""
    seen: list[bytes] = []
    read_json, loads = parse_module.pa_json.read_json, parse_module.json.loads

    def spy_read_json(source: Any, *args: Any, **kwargs: Any) -> Any:
        data = source.read()
        seen.append(data)
        return read_json(pa.BufferReader(data), *args, **kwargs)

    def spy_loads(text: Any, *args: Any, **kwargs: Any) -> Any:
        seen.append(text.encode("utf-8", "surrogatepass") if isinstance(text, str) else bytes(text))
        return loads(text, *args, **kwargs)

    monkeypatch.setattr(parse_module.pa_json, "read_json", spy_read_json)
    monkeypatch.setattr(parse_module.json, "loads", spy_loads)
    return seen


def test_deep_nesting_is_quarantined_as_too_deep_not_raised() -> None:
    deep = b"[" * 100_000 + b"]" * 100_000
    values = [
        b'{"id": 1, "city": ' + deep + b"}",  # in a declared column: Arrow rejects it, the exact path decides
        b'{"id": 2, "extra": ' + deep + b"}",  # in an ignored field
        b'{"id": 3,\n"extra": ' + deep + b"}",  # spans lines: the exact path only
        b'{"id": 4, "city": "' + b"[" * 1000 + b'"}',  # brackets inside a string are no nesting
    ]
    rows, codes, reasons = _parse(values)
    assert codes == ["too_deep", "too_deep", "too_deep", None]
    assert reasons[0] == f"nested 100001 levels deep, over the limit of {MAX_DEPTH_DEFAULT}"
    assert rows[3]["city"] == "[" * 1000


def test_nesting_up_to_the_limit_is_accepted_and_one_more_level_is_not() -> None:
    values = [_nested(MAX_DEPTH_DEFAULT), _nested(MAX_DEPTH_DEFAULT + 1)]
    values += [v.replace(b", ", b",\n") for v in values]  # the same through the exact path
    _rows, codes, _reasons = _parse(values)
    assert codes == [None, "too_deep", None, "too_deep"]
    _rows, codes, _reasons = _parse([_nested(3), _nested(4), b'{"id": 1, "x": [{"a": 1}, {"b": 2}, [], [3]]}'],
                                    ParseLimits(max_depth=3))  # fmt: skip
    assert codes == [None, "too_deep", None]


def test_too_deep_and_too_large_values_never_reach_a_json_parser(parsers_must_not_see: list[bytes]) -> None:
    deep = b'{"id": 1, "x": ' + b"[" * 5000 + b"]" * 5000 + b"}"
    large = b'{"id": 2, "city": "' + b"x" * MAX_RECORD_BYTES_DEFAULT + b'"}'
    _rows, codes, _reasons = _parse([deep, large, b'{"id": 3}', deep.replace(b", ", b",\n")])
    assert codes == ["too_deep", "too_large", None, "too_deep"]
    assert parsers_must_not_see, "the valid record was parsed"
    assert not any(b"[[[[" in seen or b"xxxx" in seen for seen in parsers_must_not_see)


@pytest.mark.parametrize(
    "bad",
    [
        b"\xc3\x28",  # bad continuation byte
        b"\xc0\xaf",  # overlong '/'
        b"\xe0\x80\xaf",  # overlong, three bytes
        b"\xed\xa0\x80",  # encoded surrogate U+D800 (CESU-8)
        b"\xf4\x90\x80\x80",  # above U+10FFFF
        b"\xe2\x82",  # truncated sequence
        b"\xff",
    ],
)
def test_invalid_utf8_bytes_in_a_string_are_quarantined(bad: bytes) -> None:
    values = [b'{"id": 1, "city": "a' + bad + b'b"}', b'{"id": 2, "extra": "' + bad + b'"}', b'{"id": 3, "city": "ok"}']
    rows, codes, reasons = _parse(values)
    assert codes == ["invalid_utf8", "invalid_utf8", None]
    assert reasons[0] == "not valid UTF-8 at byte 20"
    assert rows[2]["city"] == "ok"


@pytest.mark.parametrize("escape", [rb"\ud800", rb"\udc00", rb"\ud800x", rb"\ud800\ud800", rb"\udfff\ud800"])
def test_lone_surrogate_escapes_in_a_string_column_are_quarantined(escape: bytes) -> None:
    values = [b'{"id": 1, "city": "' + escape + b'"}', b'{"id": 2,\n"city": "' + escape + b'"}']
    _rows, codes, reasons = _parse(values)
    assert codes == ["invalid_utf8", "invalid_utf8"]
    assert reasons[0].startswith("field city: string holds a lone surrogate, not valid UTF-8")


def test_valid_non_ascii_strings_are_kept_exactly() -> None:
    values = [
        '{"id": 1, "city": "ÉIRE 😀 日本"}'.encode(),
        rb'{"id": 2, "city": "\u00c9IRE \ud83d\ude00"}',  # an escaped surrogate pair is one character
        b'{"id": 3, "city": "\\u0000"}',
        b'{"id": 4, "extra": "\\ud800", "city": "x"}',  # undeclared fields are ignored, whatever they hold
    ]
    rows, codes, _reasons = _parse(values)
    assert codes == [None, None, None, None]
    assert [r["city"] for r in rows] == ["ÉIRE 😀 日本", "ÉIRE 😀", "\x00", "x"]


@pytest.mark.parametrize("day", ["2023-02-30", "2023-04-31", "2023-02-29", "1900-02-29", "0000-01-01", "2024-W01-1"])
def test_impossible_dates_are_rejected_not_rolled_over(day: str) -> None:
    values = [json.dumps({"id": 1, "day": day}).encode(), json.dumps({"id": 2, "day": day}, indent=1).encode()]
    _rows, codes, reasons = _parse(values)
    assert codes == ["invalid_date", "invalid_date"]
    assert reasons[0] == f'field day: expected date, got string "{day}"'


def test_real_dates_at_the_edges_are_accepted() -> None:
    days = ["2024-02-29", "2000-02-29", "0001-01-01", "9999-12-31", "2023-12-31"]
    rows, codes, _reasons = _parse([json.dumps({"id": i, "day": d}).encode() for i, d in enumerate(days)])
    assert codes == [None] * len(days)
    assert [r["day"] for r in rows] == [dt.date.fromisoformat(d) for d in days]


@pytest.mark.parametrize(
    "ts",
    [
        "2023-02-30T00:00:00Z",
        "2023-02-29T12:00:00",
        "2024-01-02T24:00:00",
        "2024-01-02T23:59:60Z",
        "0000-01-01T00:00:00",  # year 0: no Python datetime holds it
        "0001-01-01T00:00:00+01:00",  # before year 1 in UTC
        "9999-12-31T23:59:59-01:00",  # after year 9999 in UTC
    ],
)
def test_impossible_timestamps_are_rejected(ts: str) -> None:
    values = [json.dumps({"id": 1, "ts": ts}).encode(), json.dumps({"id": 2, "ts": ts}, indent=1).encode()]
    _rows, codes, reasons = _parse(values)
    assert codes == ["invalid_timestamp", "invalid_timestamp"]
    assert reasons[0] == f'field ts: expected timestamp, got string "{ts}"'


def test_timestamps_at_the_edges_are_accepted() -> None:
    stamps = ["0001-01-01T00:00:00Z", "9999-12-31T23:59:59.999999Z", "2024-02-29T23:59:59+14:00"]
    rows, codes, _reasons = _parse([json.dumps({"id": 1, "ts": t}).encode() for t in stamps])
    assert codes == [None] * 3
    assert [r["ts"] for r in rows] == [dt.datetime.fromisoformat(t).astimezone(dt.UTC) for t in stamps]


@pytest.mark.parametrize(
    ("encoding", "reason"),
    [
        ("utf-16", "not UTF-8 JSON: starts with a UTF-16 byte order mark"),
        ("utf-16-le", "not UTF-8 JSON: holds NUL bytes (as UTF-16 and UTF-32 text do)"),
        ("utf-16-be", "not UTF-8 JSON: holds NUL bytes (as UTF-16 and UTF-32 text do)"),
        ("utf-32", "not UTF-8 JSON: starts with a UTF-32 byte order mark"),
        ("utf-32-le", "not UTF-8 JSON: holds NUL bytes (as UTF-16 and UTF-32 text do)"),
        ("utf-32-be", "not UTF-8 JSON: holds NUL bytes (as UTF-16 and UTF-32 text do)"),
        ("utf-8-sig", "not UTF-8 JSON: starts with a UTF-8 byte order mark"),
    ],
)
def test_other_encodings_and_byte_order_marks_are_quarantined(encoding: str, reason: str) -> None:
    text = json.dumps({"id": 1, "city": "x"})
    _rows, codes, reasons = _parse([text.encode(encoding), text.encode()])
    assert codes == ["bad_encoding", None]
    assert reasons[0] == reason


def test_records_over_the_size_limit_are_quarantined() -> None:
    at_limit = b'{"id": 1, "extra": "' + b"x" * (MAX_RECORD_BYTES_DEFAULT - 22) + b'"}'
    assert len(at_limit) == MAX_RECORD_BYTES_DEFAULT
    over = at_limit.replace(b'"id": 1', b'"id": 12')
    _rows, codes, reasons = _parse([at_limit, over, b'{"id": 3}'])
    assert codes == [None, "too_large", None]
    assert reasons[1] == f"record is {MAX_RECORD_BYTES_DEFAULT + 1} bytes, over the limit of {MAX_RECORD_BYTES_DEFAULT}"


def test_strings_over_the_length_limit_are_quarantined_counting_characters() -> None:
    limit = MAX_STRING_CHARS_DEFAULT
    values = [
        json.dumps({"id": 1, "city": "x" * limit}).encode(),
        json.dumps({"id": 2, "city": "x" * (limit + 1)}).encode(),
        json.dumps({"id": 3, "city": "é" * limit}, ensure_ascii=False).encode(),  # 2 bytes a character
        json.dumps({"id": 4, "city": "é" * (limit + 1)}, ensure_ascii=False).encode(),
        json.dumps({"id": 5, "city": "x" * (1 << 19)}).encode(),  # half a megabyte in a city name
        json.dumps({"id": 6, "city": "x" * (limit + 1)}, indent=1).encode(),  # the exact path
        json.dumps({"id": 7, "extra": "x" * (limit + 1)}).encode(),  # not stored: no limit
    ]
    rows, codes, reasons = _parse(values)
    assert codes == [None, "string_too_long", None, "string_too_long", "string_too_long", "string_too_long", None]
    assert reasons[1] == f"field city: string of {limit + 1} characters, over the limit of {limit}"
    assert rows[2]["city"] == "é" * limit


def test_custom_limits_are_applied() -> None:
    limits = ParseLimits(max_record_bytes=60, max_depth=2, max_string_chars=5)
    values = [b'{"id": 1, "city": "abcde", "x": [1]}', b'{"id": 2, "city": "abcdef"}', b'{"id": 3, "x": [[1]]}',
              b'{"id": 4, "city": "' + b"a" * 60 + b'"}']  # fmt: skip
    _rows, codes, _reasons = _parse(values, limits)
    assert codes == [None, "string_too_long", "too_deep", "too_large"]
    assert parse_one(values[1], COLUMNS, limits).code == "string_too_long"


def test_parse_limits_have_documented_defaults_and_reject_nonsense() -> None:
    limits = ParseLimits()
    assert (limits.max_record_bytes, limits.max_depth, limits.max_string_chars) == (1 << 20, 64, 32_768)
    assert ParseLimits(10, 3, 4) == ParseLimits(max_record_bytes=10, max_depth=3, max_string_chars=4)
    for bad in ({"max_depth": 0}, {"max_depth": 513}, {"max_record_bytes": -1}, {"max_string_chars": 1.5},
                {"max_record_bytes": True}):  # fmt: skip
        with pytest.raises(ValueError, match=next(iter(bad))):
            ParseLimits(**bad)  # type: ignore[arg-type]
    with pytest.raises(AttributeError):
        limits.max_depth = 3  # type: ignore[misc]


def test_huge_numbers_are_out_of_range_not_errors() -> None:
    values = [
        b'{"id": 1, "price": 1' + b"0" * 400 + b"}",  # Arrow reads inf; float(int) raises OverflowError
        b'{"id": 1' + b"0" * 5000 + b"}",  # int() refuses more than 4300 digits
        b'{"id": 3,\n"extra": 1' + b"0" * 5000 + b"}",  # valid JSON, in an ignored field
        b'{"id": 4, "ratio": 1e300}',  # would be float32 inf
        b'{"id": 5, "ratio": Infinity, "price": 1e308}',
    ]
    rows, codes, reasons = _parse(values)
    assert codes == ["out_of_range", "out_of_range", None, "out_of_range", None]
    assert reasons[3] == "field ratio: expected float, got number 1E+300"
    assert rows[4]["ratio"] == float("inf")


@pytest.mark.parametrize(("text", "ok"), [("+1.5", True), (".5", True), ("1e3", True), (" 1.5", False),
                                          ("1_0", False), ("1.5 ", False), ("0x10", False)])  # fmt: skip
def test_decimal_strings_follow_one_grammar_on_both_paths(text: str, ok: bool) -> None:
    values = [json.dumps({"id": 1, "amount": text}).encode(), json.dumps({"id": 2, "amount": text}, indent=1).encode()]
    _rows, codes, _reasons = _parse(values)
    assert codes == ([None, None] if ok else ["type_mismatch", "type_mismatch"])


def test_the_code_is_the_first_failing_fields_and_the_reason_names_every_field() -> None:
    values = [b'{"id": 1, "city": 5, "day": "2023-02-30", "ts": 7}', b'{"day": "2023-02-30"}']
    _rows, codes, reasons = _parse(values)
    assert codes == ["type_mismatch", "missing_required"]
    assert reasons == [
        'field city: expected string, got number 5; field day: expected date, got string "2023-02-30"; '
        "field ts: expected timestamp, got number 7",
        'missing required field id; field day: expected date, got string "2023-02-30"',
    ]


def test_a_parser_bug_costs_one_record_not_the_batch(monkeypatch: pytest.MonkeyPatch) -> None:
    convert = parse_module._convert

    def buggy(raw: Any, *args: Any) -> Any:
        if raw == "boom":
            raise KeyError("bug")
        return convert(raw, *args)

    monkeypatch.setattr(parse_module, "_convert", buggy)
    values = [b'{"id": 1,\n"city": "boom"}', b'{"id": 2,\n"city": "fine"}', b'{"id": 3, "city": "fast"}']
    rows, codes, reasons = _parse(values)
    assert codes == ["parser_error", None, None]
    assert reasons[0] == "parser error: KeyError"
    assert [r["city"] for r in rows[1:]] == ["fine", "fast"]


def test_a_row_the_table_cannot_hold_costs_one_record(monkeypatch: pytest.MonkeyPatch) -> None:
    exact = parse_module.parse_one

    def buggy(value: bytes | None, *args: Any) -> Any:
        outcome = exact(value, *args)
        if outcome.row is not None and outcome.row["city"] == "boom":
            return outcome._replace(row={**outcome.row, "city": 5})  # no string: Arrow refuses the row
        return outcome

    monkeypatch.setattr(parse_module, "parse_one", buggy)
    values = [b'{"id": 1,\n"city": "boom"}', b'{"id": 2,\n"city": "fine"}', b'{"id": 3, "city": "fast"}']
    rows, codes, reasons = _parse(values)
    assert codes == ["parser_error", None, None]
    assert reasons[0] == "parser error: ArrowTypeError"
    assert [r["city"] for r in rows[1:]] == ["fine", "fast"]


def test_a_json_null_is_not_an_object_even_without_required_columns() -> None:
    columns = (ColumnSpec("city", "string"),)
    values = [b"null", b" null ", b'{"city": "x"}', b"{}"]
    parsed = RecordParser(columns).parse(pa.array(values, pa.binary()))
    assert parsed.codes.to_pylist() == ["not_object", "not_object", None, None]
    assert parsed.table.column("city").to_pylist() == [None, None, "x", None]


def test_every_reason_code_is_documented() -> None:
    section = DOCS.read_text().split("## Reason codes", 1)[1].split("\n## ", 1)[0]
    documented = re.findall(r"^\| `([a-z0-9_]+)` \|", section, flags=re.MULTILINE)
    assert documented == list(REASON_CODES)
    assert len(set(REASON_CODES)) == len(REASON_CODES)


def test_common_valid_forms_arrow_cannot_read_cost_no_bisection(monkeypatch: pytest.MonkeyPatch) -> None:
    reads = []
    read_json = parse_module.pa_json.read_json
    monkeypatch.setattr(parse_module.pa_json, "read_json", lambda *a, **k: reads.append(1) or read_json(*a, **k))
    values = [json.dumps({"id": i, "price": "NaN" if i % 4 == 0 else 1.5}).encode() for i in range(2000)]
    values[7] = json.dumps({"id": 7, "ts": "2024-01-02T03:04:05.123456789Z"}).encode()  # nanoseconds
    parsed = RecordParser(COLUMNS).parse(pa.array(values, pa.binary()))
    assert len(reads) == 2  # the whole block, then the block without the 501 records set aside
    rows, codes = parsed.table.to_pylist(), parsed.codes.to_pylist()
    assert codes == [None] * 2000
    assert [r["id"] for r in rows] == list(range(2000))
    assert rows[7]["ts"] == dt.datetime(2024, 1, 2, 3, 4, 5, 123456, tzinfo=dt.UTC)
