"""The where-clause parser: what it accepts, how literals are typed, and errors that point."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal

import pytest

from lakecluster import predicate as P
from lakecluster.errors import PredicateError, UnknownColumnError
from lakecluster.stream.ssb import SSB_COLUMNS


def test_every_form_parses_with_typed_literals_and_conjunct_spans() -> None:
    text = (
        "s_city = 'UNITED KI1' AND d_year >= 1995 AND lo_revenue BETWEEN 1.5 AND 2 AND p_brand LIKE 'MFGR#1%' "
        "AND c_city NOT IN ('A', 'B') AND NOT (lo_discount > NaN OR lo_orderdate < '1995-01-01') "
        "AND event_time <= TIMESTAMP '2020-01-01 10:00:00.5+02:00' AND is_returned IS NOT NULL AND 5 < lo_quantity"
    )
    expr = P.parse(text, SSB_COLUMNS)
    parts = P.conjuncts(expr)
    assert [text[a:b] for a, b in (p.span for p in parts)][:2] == ["s_city = 'UNITED KI1'", "d_year >= 1995"]
    assert parts[2].low == Decimal("1.5") and parts[3].pattern == "MFGR#1%" and parts[4].negated
    inner = parts[5].item.items  # type: ignore[union-attr]
    assert inner[0].value != inner[0].value and inner[1].value == dt.date(1995, 1, 1)  # NaN, a date
    assert parts[6].value == dt.datetime(2020, 1, 1, 8, 0, 0, 500000, tzinfo=dt.UTC)
    assert isinstance(parts[7], P.IsNull) and parts[7].negated
    assert parts[8].op == ">" and parts[8].column.name == "lo_quantity"  # literal-first flipped
    assert P.columns_of(expr)[:3] == ["s_city", "d_year", "lo_revenue"]


def test_keywords_are_case_insensitive_and_columns_fold_case() -> None:
    expr = P.parse("S_CITY = 'x' and not D_Year between 1 and 2", SSB_COLUMNS)
    assert P.columns_of(expr) == ["s_city", "d_year"]


@pytest.mark.parametrize(
    ("text", "position", "words"),
    [
        ("s_city = ", 9, "expected a value after '='"),
        ("s_city = 'UNITED KI1' d_year = 1", 22, "expected AND, OR or the end"),
        ("(s_city = 'x'", 13, "expected ')'"),
        ("s_city = 5", 9, "quote string values"),
        ("d_year >= 'soon'", 10, "expected a number"),
        ("lo_orderdate = '1995-02-30'", 15, "expected yyyy-mm-dd"),
        ("s_city = 'open", 9, "unterminated string"),
        ("s_city = c_city", 9, "comparing two columns"),
        ("d_year = NULL", 9, "use IS NULL"),
        ("d_year LIKE 'x%'", 0, "LIKE needs a string column"),
        ("s_city IS 5", 10, "expected NULL after IS"),
        ("d_year IN 1995", 10, "expected '(' after IN"),
        ("s_city ~ 'x'", 7, "unexpected character '~'"),
        ("", 0, "empty where-clause"),
        ("AND d_year = 1", 0, "expected a column name, found the keyword AND"),
        ("event_time > TIMESTAMP '2020-01-01 00:00:00.1234567'", 13, "micro-second"),
    ],
)
def test_malformed_predicates_name_the_problem_and_its_position(text: str, position: int, words: str) -> None:
    with pytest.raises(PredicateError) as err:
        P.parse(text, SSB_COLUMNS)
    assert err.value.position == position
    assert words in str(err.value)
    if text:
        assert str(err.value).endswith("\n  " + " " * position + "^")  # the caret sits under the problem


def test_unknown_column_lists_the_known_ones() -> None:
    with pytest.raises(UnknownColumnError) as err:
        P.parse("d_year = 1995 AND s_cty = 'x'", SSB_COLUMNS)
    assert err.value.column == "s_cty" and err.value.position == 18
    assert "known columns: lo_orderkey, lo_linenumber" in str(err.value) and "s_city" in str(err.value)
