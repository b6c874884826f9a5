"""Reading a scan's filters from a plan's text (``workload.plan_filters``): the forms Spark prints
(tests/workload/test_eventlog.py reads them from real logs), tricky constants, and the rule that
a value is never guessed: a string constant of any text reads back as itself or as ``other``."""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from lakecluster.workload.plan_filters import Columns, parse_filters

TYPES = {"city": "string", "qty": "int", "id": "bigint", "ratio": "double", "rev": "decimal(18,2)", "day": "date",
         "ts": "timestamp", "ntz": "timestamp_ntz", "ok": "boolean", "blob": "binary", "a b": "string"}  # fmt: skip
UTC = Columns(TYPES, "UTC")


def one(text: str, columns: Columns = UTC) -> dict[str, Any]:
    (f,) = parse_filters(text, columns)
    return f


def test_comparisons_lists_and_nulls_as_the_listener_records_them() -> None:
    assert parse_filters("[isnotnull(city#12), (city#12 = UNITED KI1)]", UTC) == [
        {"column": "city", "type": "string", "op": "=", "value": "UNITED KI1"}]
    assert one("[(qty#5 >= -10)]") == {"column": "qty", "type": "int", "op": ">=", "value": -10}
    assert one("[(10 < qty#5)]")["op"] == ">"  # the constant's side normalised to the right
    assert one("[(id#1L <=> 9223372036854775807)]")["value"] == 9223372036854775807
    assert one("[(ratio#2 < -1.5E-7)]")["value"] == -1.5e-07
    assert one("[(ratio#2 = NaN)]")["value"] == "NaN"
    assert one("[(rev#3 <= -0.50)]")["value"] == "-0.50"
    assert one("[(day#4 > 1995-06-01)]")["value"] == "1995-06-01"
    assert one("[(ok#9 = true)]")["value"] is True
    assert one("[NOT (qty#5 = 3)]") == {"column": "qty", "type": "int", "op": "!=", "value": 3}
    assert one("[qty#5 IN (3,1,2,1)]") == {"column": "qty", "type": "int", "op": "in", "values": [1, 2, 3]}
    assert one("[NOT qty#5 IN (3,1)]")["op"] == "not_in"
    assert one("[rev#3 IN (10.00,-2.50,3.10)]")["values"] == ["-2.50", "3.10", "10.00"]
    assert one("[qty#5 INSET " + ", ".join(str(v) for v in range(40, 0, -1)) + "]") == {
        "column": "qty", "type": "int", "op": "in", "count": 40, "min": 1, "max": 40}
    assert one("[qty#5 INSET 1, 2]", Columns(TYPES, "UTC", max_in_values=1))["count"] == 2
    assert one("[((qty#5 = 1) OR (qty#5 = 4))]") == {"column": "qty", "type": "int", "op": "in", "values": [1, 4]}
    assert one("[StartsWith(city#12, MFGR#2)]") == {"column": "city", "type": "string", "op": "starts_with",
                                                    "value": "MFGR#2"}  # fmt: skip
    assert one("[isnull(city#12)]") == {"column": "city", "op": "is_null"}
    # IS NOT NULL is kept only where nothing else constrains the column.
    assert parse_filters("[isnotnull(qty#5), isnotnull(id#1L), (qty#5 = 1)]", UTC) == [
        {"column": "id", "op": "is_not_null"}, {"column": "qty", "type": "int", "op": "=", "value": 1}]
    assert one("[(a b#7 = x)]") == {"column": "a b", "type": "string", "op": "=", "value": "x"}
    assert parse_filters("[]", UTC) == [] and parse_filters(None, UTC) == []


def test_timestamps_are_read_in_the_sessions_time_zone_and_written_in_utc() -> None:
    paris = Columns(TYPES, "Europe/Paris")
    assert one("[(ts#8 >= 2026-01-01 00:30:00)]", paris)["value"] == "2025-12-31T23:30:00Z"
    assert one("[(ts#8 >= 2026-07-01 00:30:00.5)]", paris)["value"] == "2026-06-30T22:30:00.500Z"
    assert one("[(ts#8 >= 2026-01-01 00:30:00.000001)]", Columns(TYPES, "+05:30"))["value"] == (
        "2025-12-31T19:00:00.000001Z")
    # 02:30 on the last Sunday of October happens twice in Paris: no one instant, so no value.
    assert one("[(ts#8 = 2026-10-25 02:30:00)]", paris)["op"] == "other"
    assert one("[(ts#8 = 2026-01-01 00:30:00)]", Columns(TYPES, None))["op"] == "other"  # zone unknown
    assert one("[(ntz#10 = 2026-01-01 00:30:00)]", Columns(TYPES, None))["value"] == "2026-01-01T00:30"


def test_strings_with_commas_parentheses_and_quotes() -> None:
    assert one("[(city#12 = A, B (x) 'q' ü)]")["value"] == "A, B (x) 'q' ü"
    assert one("[(city#12 = )]")["value"] == ""
    assert one("[(city#12 =  x )]")["value"] == " x "
    assert parse_filters("[(city#12 = a, b), (qty#5 = 1)]", UTC) == [
        {"column": "city", "type": "string", "op": "=", "value": "a, b"},
        {"column": "qty", "type": "int", "op": "=", "value": 1}]
    # Items of an IN list of strings cannot be told apart ('a,b' or 'a' and 'b'): the range every reading lies in.
    assert one("[city#12 IN (CITY3,CITY1,CITY2)]") == {"column": "city", "type": "string", "op": "in",
                                                       "count": None, "min": "CITY1", "max": "CITY3,CITY1,CITY2"}
    assert one("[city#12 IN (solo)]")["values"] == ["solo"]
    # Anything else is "other" with its columns and text.
    assert one("[(upper(city#12) = X)]") == {"op": "other", "columns": ["city"], "sql": "(upper(city) = X)"}
    assert one("[((qty#5 = 1) OR (city#12 = x))]")["columns"] == ["qty", "city"]
    assert one("[(blob#11 = 0x0A)]")["op"] == "other"  # no order statistics can use
    assert one("[(qty#5 = id#1L)]")["op"] == "other"  # two columns
    assert one("[(qty#5 = " + "x" * 300 + ")]")["op"] == "other"
    assert one("[(city#12 = " + "x" * 2000 + ")]")["sql"].endswith("...")


_TEXT = st.text(st.characters(codec="utf-8", exclude_characters="\n"), max_size=30)


@given(value=_TEXT, other=_TEXT)
def test_a_string_constant_of_any_text_reads_back_as_itself_or_as_other(value: str, other: str) -> None:
    filters = parse_filters(f"[isnotnull(city#12), (city#12 = {value}), (qty#5 >= 3), StartsWith(city#12, {other})]",
                            UTC)  # fmt: skip
    for f in filters:
        if f["op"] == "=":
            assert f["value"] == value
        elif f["op"] == "starts_with":
            assert f["value"] == other
        elif f["op"] == ">=":
            assert f["value"] == 3
        else:
            assert f["op"] == "other", f


@given(values=st.lists(_TEXT, min_size=1, max_size=6))
def test_an_in_list_of_any_strings_holds_every_value(values: list[str]) -> None:
    (f,) = parse_filters(f"[city#12 IN ({','.join(values)})]", UTC) or [{"op": "other"}]
    if f["op"] == "other":
        return
    if "values" in f:
        assert f["values"] == sorted(set(values))
    else:
        assert all(f["min"] <= v <= f["max"] for v in values)


@given(st.lists(st.integers(-(2**40), 2**40), min_size=1, max_size=50))
def test_numbers_in_lists_are_exact(values: list[int]) -> None:
    f = one(f"[id#1L INSET {', '.join(str(v) for v in values)}]")
    distinct = sorted(set(values))
    assert f.get("values", distinct) == distinct
    assert (f.get("min", distinct[0]), f.get("max", distinct[-1])) == (distinct[0], distinct[-1])
