"""Property: prune never drops a file that holds a matching row (DuckDB over the rows decides).

Random files with nulls, NaN, ±0, ±infinity, empty, shared-prefix and long (truncatable)
strings, integer extremes, decimals, dates, timestamps and booleans; stats written by the
project's own writer (``delta_stats``), optionally degraded the way Delta-Spark writes them;
random predicates with every operator, AND / OR / NOT, parsed from text.
"""

from __future__ import annotations

import datetime as dt
from decimal import Decimal

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lakecluster.predicate import parse
from lakecluster.schema import ColumnSpec
from tests.index.oracle import candidates, files_of, index_rows_of, matching_files

COLUMNS = (
    ColumnSpec("s", "string"),
    ColumnSpec("i", "int"),
    ColumnSpec("l", "long"),
    ColumnSpec("f", "double"),
    ColumnSpec("g", "float"),
    ColumnSpec("dec", "decimal(9,2)"),
    ColumnSpec("d", "date"),
    ColumnSpec("ts", "timestamp"),
    ColumnSpec("b", "boolean"),
)
BY_NAME = {c.name: c for c in COLUMNS}
STRINGS = [
    "",
    "a",
    "ab",
    "abc",
    "abd",
    "b",
    "ba",
    "é",
    "éa",
    "\U0001f600",
    "MFGR#1",
    "MFGR#12",
    "MFGR#2",
    "a%b",
    "x" * 31,
    "x" * 32,
    "x" * 32 + "a",
    "x" * 32 + "b",
    "x" * 33,
    "x" * 31 + "y" * 9,
]
UTC = dt.UTC

VALUES = {
    "s": st.one_of(st.sampled_from(STRINGS), st.text(alphabet="ab%_é", max_size=4)),
    "i": st.one_of(st.sampled_from([-(2**31), 2**31 - 1, 0, -1]), st.integers(-5, 5)),
    "l": st.one_of(st.sampled_from([-(2**63), 2**63 - 1, 0]), st.integers(-5, 5)),
    "f": st.one_of(
        st.sampled_from([0.0, -0.0, float("nan"), float("inf"), -float("inf"), 0.1, 1e308, 5e-324]), st.floats(-10, 10)
    ),
    "g": st.one_of(st.sampled_from([0.0, -0.0, float("nan"), 0.1, 3.4e38]), st.floats(-10, 10, width=32)),
    "dec": st.one_of(
        st.sampled_from([Decimal("-9999999.99"), Decimal("9999999.99"), Decimal("0.00")]),
        st.decimals(-20, 20, places=2),
    ),
    "d": st.one_of(
        st.sampled_from([dt.date(1970, 1, 1), dt.date(1969, 12, 31)]),
        st.dates(dt.date(1960, 1, 1), dt.date(1980, 1, 1)),
    ),
    "ts": st.one_of(
        st.sampled_from(
            [
                dt.datetime(1970, 1, 1, tzinfo=UTC),
                dt.datetime(1970, 1, 1, 0, 0, 0, 999, UTC),
                dt.datetime(1969, 12, 31, 23, 59, 59, 999999, UTC),
            ]
        ),
        st.datetimes(dt.datetime(1969, 12, 31), dt.datetime(1970, 1, 2), timezones=st.just(UTC)),
    ),
    "b": st.booleans(),
}


def literal_text(col: ColumnSpec, value: object) -> str:
    """``value`` written as a literal of the where-clause language."""
    if col.type == "string":
        return "'" + str(value).replace("'", "''") + "'"
    if col.type == "boolean":
        return "TRUE" if value else "FALSE"
    if col.is_floating:
        v = float(value)  # type: ignore[arg-type]
        if v != v:
            return "NaN"
        if v in (float("inf"), float("-inf")):
            return "-Infinity" if v < 0 else "Infinity"
        return repr(v)
    if col.type == "date":
        return f"DATE '{value}'"
    if col.type == "timestamp":
        return f"TIMESTAMP '{value.strftime('%Y-%m-%d %H:%M:%S.%f')}'"  # type: ignore[attr-defined]
    return str(value)


def off_grid(col: ColumnSpec, value: object) -> object:
    """Integer/decimal literals between two representable values (exercise the snapping)."""
    if col.type in ("int", "long"):
        return Decimal(value) + Decimal("0.5")  # type: ignore[arg-type]
    if col.decimal:
        return Decimal(value) + Decimal("0.005")  # type: ignore[arg-type]
    return value


@st.composite
def tables(draw: st.DrawFn) -> list[dict[str, list]]:
    n_files = draw(st.integers(1, 5))
    out = []
    for _ in range(n_files):
        n_rows = draw(st.integers(0, 6))
        out.append(
            {
                c.name: [draw(st.none() | VALUES[c.name]) if draw(st.integers(0, 4)) else None for _ in range(n_rows)]
                for c in COLUMNS
            }
        )
    return out


@st.composite
def literal(draw: st.DrawFn, col: ColumnSpec, present: list) -> str:
    pool = [v for v in present if v is not None]
    value = draw(st.sampled_from(pool)) if pool and draw(st.booleans()) else draw(VALUES[col.name])
    if draw(st.integers(0, 5)) == 0:
        value = off_grid(col, value)
    return literal_text(col, value)


@st.composite
def atom(draw: st.DrawFn, data: list[dict[str, list]]) -> str:
    col = BY_NAME[draw(st.sampled_from(list(BY_NAME)))]
    present = [v for f in data for v in f[col.name]]
    lit = literal(col, present)
    kinds = ["cmp", "in", "not in", "between", "not between", "is null", "is not null"]
    if col.type == "string":
        kinds += ["like", "not like"]
    kind = draw(st.sampled_from(kinds))
    name = col.name
    if kind == "cmp":
        return f"{name} {draw(st.sampled_from(['=', '!=', '<>', '<', '<=', '>', '>=']))} {draw(lit)}"
    if kind in ("in", "not in"):
        items = draw(st.lists(lit, min_size=1, max_size=3))
        return f"{name} {kind.upper()} ({', '.join(items)})"
    if kind in ("between", "not between"):
        return f"{name} {kind.upper()} {draw(lit)} AND {draw(lit)}"
    if kind in ("is null", "is not null"):
        return f"{name} {kind.upper()}"
    base = draw(st.sampled_from([str(v) for v in present if v is not None] or ["a"]))
    cut = base[: draw(st.integers(0, len(base)))].replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    pattern = draw(st.sampled_from([cut + "%", cut + "_%", "%" + cut, cut, cut + "%%", cut + "%a"]))
    return f"{name} {kind.upper()} '{pattern.replace(chr(39), chr(39) * 2)}'"


def where(data: list[dict[str, list]]) -> st.SearchStrategy[str]:
    return st.recursive(
        atom(data),
        lambda inner: st.one_of(
            st.lists(inner, min_size=2, max_size=3).map(lambda xs: "(" + " AND ".join(xs) + ")"),
            st.lists(inner, min_size=2, max_size=3).map(lambda xs: "(" + " OR ".join(xs) + ")"),
            inner.map(lambda x: f"NOT ({x})"),
        ),
        max_leaves=5,
    )


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data(), files=tables(), spark=st.booleans(), scan_nans=st.booleans())
def test_prune_never_drops_a_file_with_a_matching_row(
    data: st.DataObject, files: list[dict[str, list]], spark: bool, scan_nans: bool
) -> None:
    text = data.draw(where(files), label="where")
    expr = parse(text, COLUMNS)
    arrow_files = files_of(files, COLUMNS)
    rows = index_rows_of(arrow_files, COLUMNS, spark=spark, scan_nans=scan_nans)
    kept = candidates(rows, COLUMNS, expr, len(files))
    truth = matching_files(arrow_files, COLUMNS, expr)
    assert truth <= kept, f"dropped {sorted(truth - kept)} for {text}"


def test_the_property_is_not_vacuous_files_do_get_pruned() -> None:
    """Same machinery, fixed data: the predicates drop the files they should, not only keep."""
    files = files_of(
        [
            {
                "s": ["abc", "abd"],
                "i": [1, 2],
                "l": [1, None],
                "f": [0.5, 1.5],
                "g": [1.0, 2.0],
                "dec": [Decimal("1.00"), Decimal("2.50")],
                "d": [dt.date(1970, 1, 1)] * 2,
                "ts": [dt.datetime(1970, 1, 1, tzinfo=UTC)] * 2,
                "b": [True, True],
            },
            {
                "s": ["b", None],
                "i": [10, 20],
                "l": [None, None],
                "f": [float("nan"), 7.0],
                "g": [5.0, None],
                "dec": [Decimal("7.00"), None],
                "d": [dt.date(1975, 1, 1), None],
                "ts": [dt.datetime(1975, 1, 1, tzinfo=UTC), None],
                "b": [False, None],
            },
        ],
        COLUMNS,
    )
    rows = index_rows_of(files, COLUMNS, scan_nans=True)
    expect = {
        "s LIKE 'ab%'": {"f0"},
        "s NOT LIKE 'ab%'": {"f1"},
        "i BETWEEN 3 AND 9": set(),
        "i < 2.5": {"f0"},
        "i = 1.5": set(),
        "NOT i < 5": {"f1"},
        "l IS NULL": {"f0", "f1"},
        "l IS NOT NULL": {"f0"},
        "f > 5": {"f1"},
        "f = NaN": {"f1"},
        "f < 1": {"f0"},
        "dec >= 2.505": {"f1"},
        "d > '1972-01-01'": {"f1"},
        "ts < TIMESTAMP '1971-01-01 00:00:00'": {"f0"},
        "b = FALSE": {"f1"},
        "NOT (s = 'b' OR i <= 2)": set(),
        "s IN ('zz', 'abd')": {"f0"},
        "s NOT IN ('b')": {"f0"},
        "g > 2": {"f1"},
    }
    for text, want in expect.items():
        expr = parse(text, COLUMNS)
        assert candidates(rows, COLUMNS, expr, 2) == want, text
        assert matching_files(files, COLUMNS, expr) == want, text  # the oracle agrees: the answer is exact


def test_nan_is_possible_unless_counted() -> None:
    """The Delta log has no NaN counts: a float file stays for `f > 100` (NaN > 100 holds) unless
    the sync counted NaN in the file."""
    files = files_of([{**{c.name: [None, None] for c in COLUMNS}, "f": [1.0, 2.0]}], COLUMNS)
    expr = parse("f > 100", COLUMNS)
    assert candidates(index_rows_of(files, COLUMNS), COLUMNS, expr, 1) == {"f0"}  # NaN > 100 could hold
    assert candidates(index_rows_of(files, COLUMNS, scan_nans=True), COLUMNS, expr, 1) == set()


def test_truncated_string_max_keeps_the_file() -> None:
    long = "x" * 32 + "zzz"
    files = files_of([{**{c.name: [None, None] for c in COLUMNS}, "s": ["a", long]}], COLUMNS)
    rows = index_rows_of(files, COLUMNS, spark=True)  # max stored as 32 x's: below the true max
    assert candidates(rows, COLUMNS, parse(f"s = '{long}'", COLUMNS), 1) == {"f0"}
    assert candidates(rows, COLUMNS, parse("s > 'y'", COLUMNS), 1) == set()
