"""A scan's filters as Spark prints them in a plan, read back into capture filters (docs/workload.md).

An event log carries no expressions, only their text: a ``FileSourceScanExec``'s ``DataFilters``
and ``PartitionFilters`` are printed as ``[isnotnull(city#12), (city#12 = UNITED KI1), (qty#5 >=
10), part#3 IN (1,2), StartsWith(brand#7, MFGR#2)]``. Column references carry their expression
id (``#12``, and ``L`` for a bigint); constants are printed bare: a string constant has no quotes
and may hold commas, parentheses and spaces. So the text is read conservatively:

- The list is cut into terms at every way its ``", "`` separators allow; where the terms are not
  the same in every reading, that stretch of the list becomes one ``other`` filter.
- A string constant that holds a column reference of the scan (``name#id``) is refused: it could
  be plan syntax.
- The items of an ``IN`` list of strings cannot be told apart when there are several (``IN (a,b)``
  is printed alike for ``'a', 'b'`` and ``'a,b'``): such a list is recorded as the range every
  reading lies in (``count`` null, ``min`` the least item, ``max`` the greatest tail of the list).
- Constants are typed by the column's type (the scan's read schema, the table's schema for
  partition columns); a constant that does not read as its column's type, and any other
  expression, becomes ``{"op": "other", "columns": [...], "sql": ...}`` with the text, ``#ids``
  removed, cut at 200 characters.
"""

from __future__ import annotations

import datetime as dt
import functools
import itertools
import re
import zoneinfo
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from typing import Any

from lakecluster import literals

MAX_STRING_CHARS = 1024  # as the listener: a longer constant makes its filter "other"
MAX_SQL_CHARS = 200
_COMPARISONS = ("<=>", "<=", ">=", "=", "<", ">")
_FLIPPED = {"=": "=", "<=>": "<=>", "<": ">", "<=": ">=", ">": "<", ">=": "<="}
_TIMESTAMP = re.compile(r"(\d{4})-(\d\d)-(\d\d) (\d\d):(\d\d):(\d\d)(?:\.(\d{1,6}))?")
_FLOAT = re.compile(r"-?(?:\d+(?:\.\d+)?(?:[eE][+-]?\d+)?|NaN|Infinity)")
_DECIMAL = re.compile(r"-?\d+(?:\.\d+)?")
_INTEGER = re.compile(r"-?\d+")
_OFFSET = re.compile(r"(?:GMT|UTC)?([+-])(\d{1,2})(?::?(\d\d))?")


@dataclass(frozen=True)
class Columns:
    """What the filter text is read with: the scan's columns and their Spark types (``int``,
    ``decimal(18,2)``, ...), the session's time zone (timestamps are printed in it; None: unknown,
    timestamp constants are not read) and ``workload.max_in_values``."""

    types: Mapping[str, str]
    time_zone: str | None = None
    max_in_values: int = 32

    @functools.cached_property
    def attribute(self) -> re.Pattern[str]:
        """A column reference: ``name#id``, with ``L`` after the id of a bigint."""
        names = sorted(self.types, key=len, reverse=True) or ["\x00"]
        return re.compile("(?:" + "|".join(re.escape(n) for n in names) + r")#\d+L?")

    @functools.cached_property
    def zone(self) -> dt.tzinfo | None:
        return _zone(self.time_zone)


def parse_filters(text: str | None, columns: Columns) -> list[dict[str, Any]]:
    """The filters of a plan's ``[..., ...]`` list, one per top-level term, as the listener records
    them; an ``IS NOT NULL`` beside another filter on the same column left out."""
    if text is None:
        return []
    text = text.strip()
    if not (text.startswith("[") and text.endswith("]")):
        return [_other(text, columns)] if text else []
    inner = text[1:-1]
    if not inner:
        return []
    terms = list(_terms(inner, columns))
    constrained = {c for t in terms if t.get("op") != "is_not_null" for c in _columns_of(t)}
    return [t for t in terms if not (t.get("op") == "is_not_null" and t["column"] in constrained)]


def _columns_of(term: dict[str, Any]) -> list[str]:
    return term["columns"] if term.get("op") == "other" else [term["column"]]


# -- cutting the list into terms -------------------------------------------------------------------


def _terms(inner: str, columns: Columns) -> Iterator[dict[str, Any]]:
    """Every reading of ``inner`` as terms joined by ", "; the terms all readings share, and an
    ``other`` for each stretch where they differ."""
    n = len(inner)
    ends = [m.start() for m in re.finditer(", ", inner)] + [n]
    starts = [0] + [e + 2 for e in ends[:-1]]
    spans: dict[int, list[tuple[int, dict[str, Any]]]] = {}  # start -> [(next start, term)]
    for s in starts:
        found = []
        for e in ends:
            if e < s:
                continue
            term = _term(inner[s:e], columns)
            if term is not None:
                found.append((e + 2 if e < n else n, term))
            if not (_may_extend(inner[s:e], columns) or _depth(inner[s:e]) > 0):
                break
        spans[s] = found
    # Ways from each start to the end, and from the beginning to each start.
    to_end: dict[int, int] = {n: 1}
    for s in reversed(starts):
        to_end[s] = sum(to_end.get(nxt, 0) for nxt, _ in spans[s])
    total = to_end[0]
    if total == 0:
        yield _other(inner, columns)
        return
    from_start: dict[int, int] = dict.fromkeys([*starts, n], 0)
    from_start[0] = 1
    for s in starts:
        for nxt, _ in spans[s]:
            from_start[nxt] += from_start[s]
    common = [p for p in [*starts, n] if from_start[p] and to_end.get(p, 0) and from_start[p] * to_end[p] == total]
    for a, b in itertools.pairwise(common):
        way = [(nxt, t) for nxt, t in spans[a] if nxt == b]
        if len(way) == 1 and _ways(spans, a, b) == 1:
            yield way[0][1]
        else:  # several readings of this stretch: none is trusted
            yield _other(inner[a:b].removesuffix(", "), columns)


def _ways(spans: dict[int, list[tuple[int, dict[str, Any]]]], a: int, b: int) -> int:
    """Readings from start ``a`` to start ``b``."""
    counts = {a: 1}
    for s in sorted(p for p in spans if a <= p < b):
        for nxt, _ in spans[s]:
            if nxt <= b:
                counts[nxt] = counts.get(nxt, 0) + counts.get(s, 0)
    return counts.get(b, 0)


def _may_extend(span: str, columns: Columns) -> bool:
    """Whether a term starting as ``span`` may go on past the next ", ": only one whose form holds
    free text (a string constant, an INSET's items) may; any other term ends at the first ", "
    outside parentheses."""
    if span.startswith(("(", "NOT ", "StartsWith(")):
        return True
    m = columns.attribute.match(span)
    return m is not None and span[m.end():].startswith((" IN (", " INSET "))  # fmt: skip


def _term(t: str, columns: Columns) -> dict[str, Any] | None:
    """One term's filter; None when ``t`` cannot be a whole term."""
    specific = _specific(t, columns)
    if specific is not None:
        return specific
    if _balanced(t) and columns.attribute.search(t) and not _separated(t):
        return _other(t, columns)
    return None


def _balanced(t: str) -> bool:
    depth = 0
    for ch in t:
        depth += (ch == "(") - (ch == ")")
        if depth < 0:
            return False
    return depth == 0


def _depth(t: str) -> int:
    """Parentheses ``t`` leaves open."""
    return t.count("(") - t.count(")")


def _separated(t: str) -> bool:
    """Whether ``t`` has a ", " outside parentheses (then it is two terms, not one)."""
    depth = 0
    for i, ch in enumerate(t):
        depth += (ch == "(") - (ch == ")")
        if depth == 0 and t.startswith(", ", i):
            return True
    return False


# -- one term --------------------------------------------------------------------------------------


def _specific(t: str, columns: Columns) -> dict[str, Any] | None:
    """A term of a form the listener records: None when ``t`` has none of them (then it may still
    be a term of another form); an ``other`` when it has one but its constant does not read."""
    attr = columns.attribute.pattern
    for op in ("isnotnull", "isnull"):
        m = re.fullmatch(rf"{op}\(({attr})\)", t, re.DOTALL)
        if m:
            return {"column": _name(m.group(1)), "op": "is_not_null" if op == "isnotnull" else "is_null"}
    if t.startswith("NOT "):
        inner = _specific(t[4:], columns)
        if inner is None:
            return None
        if inner.get("op") == "=":
            return {**inner, "op": "!="}
        if inner.get("op") == "in":
            return {**inner, "op": "not_in"}
        return _other(t, columns)
    m = re.fullmatch(rf"StartsWith\(({attr}), (.*)\)", t, re.DOTALL)
    if m:
        return _compare(t, m.group(1), "starts_with", m.group(2), columns, strings_only=True)
    m = re.fullmatch(rf"({attr}) (IN \((.*)\)|INSET (.*))", t, re.DOTALL)
    if m:
        items = m.group(3) if m.group(3) is not None else m.group(4)
        return _in(t, m.group(1), items, "," if m.group(3) is not None else ", ", columns)
    if t.startswith("(") and t.endswith(")"):
        return _comparison(t, columns)
    return None


def _comparison(t: str, columns: Columns) -> dict[str, Any] | None:
    attr = columns.attribute.pattern
    ops = "|".join(re.escape(o) for o in _COMPARISONS)
    readings = []
    m = re.fullmatch(rf"\(({attr}) ({ops}) (.*)\)", t, re.DOTALL)
    if m and not columns.attribute.search(m.group(3)):
        readings.append((m.group(1), m.group(2), m.group(3)))
    m = re.fullmatch(rf"\((.*) ({ops}) ({attr})\)", t, re.DOTALL)
    if m and not columns.attribute.search(m.group(1)):
        readings.append((m.group(3), _FLIPPED[m.group(2)], m.group(1)))
    if len(readings) != 1:  # none, or a comparison of two columns: or a string that reads both ways
        ors = _or_of_equalities(t, columns)
        if ors is not None:
            return ors
        return None if not readings else _other(t, columns)
    column, op, literal = readings[0]
    return _compare(t, column, op, literal, columns)


def _compare(t: str, attribute: str, op: str, literal: str, columns: Columns, *,
             strings_only: bool = False) -> dict[str, Any] | None:  # fmt: skip
    name = _name(attribute)
    kind = columns.types.get(name)
    if kind is None or (strings_only and kind != "string"):
        return _other(t, columns)
    if columns.attribute.search(literal):
        return None  # plan syntax, not a constant
    ok, value = _value(literal, kind, columns)
    if not ok:
        return _other(t, columns) if kind == "string" else None
    return {"column": name, "type": kind, "op": op, "value": value}


def _in(t: str, attribute: str, items: str, sep: str, columns: Columns) -> dict[str, Any] | None:
    name = _name(attribute)
    kind = columns.types.get(name)
    if columns.attribute.search(items):
        return None
    if kind is None:
        return _other(t, columns)
    pieces = items.split(sep)
    if kind == "string" and len(pieces) > 1:
        return _string_items(t, name, pieces, sep, columns)
    values = []
    for piece in pieces:
        ok, value = _value(piece, kind, columns)
        if not ok:
            return _other(t, columns) if kind == "string" else None
        values.append(value)
    return _listed(name, kind, "in", values, columns)


def _string_items(t: str, name: str, pieces: list[str], sep: str, columns: Columns) -> dict[str, Any]:
    """An IN list of strings whose items cannot be told apart: each item is one or more pieces
    joined by ``sep``, so it is at least the least piece and at most the greatest tail."""
    tails = [sep.join(pieces[i:]) for i in range(len(pieces))]
    low, high = min(pieces), max(tails)
    if len(high) > MAX_STRING_CHARS:
        return _other(t, columns)
    return {"column": name, "type": "string", "op": "in", "count": None, "min": low, "max": high}


def _listed(name: str, kind: str, op: str, values: list[Any], columns: Columns) -> dict[str, Any]:
    """A list as the listener records it: sorted distinct values, or beyond ``max_in_values`` their
    count, smallest and largest."""
    distinct = sorted(set(values), key=_order(kind))
    if len(distinct) <= columns.max_in_values:
        return {"column": name, "type": kind, "op": op, "values": distinct}
    return {"column": name, "type": kind, "op": op, "count": len(distinct), "min": distinct[0], "max": distinct[-1]}


def _order(kind: str) -> Any:
    if kind.startswith("decimal("):
        return Decimal
    if kind in ("timestamp", "timestamp_ntz"):
        return lambda v: dt.datetime.fromisoformat(v.removesuffix("Z"))
    if kind in ("float", "double"):
        return lambda v: float(str(v).lower().replace("infinity", "inf")) if isinstance(v, str) else v
    return lambda v: v


def _or_of_equalities(t: str, columns: Columns) -> dict[str, Any] | None:
    """``((c = a) OR c IN (b, d))``: one ``in`` of the column; None for any other OR or when the
    OR splits into equalities in more than one way."""
    if not (t.startswith("(") and t.endswith(")")):
        return None
    inner = t[1:-1]
    found = None
    for m in re.finditer(" OR ", inner):
        left, right = _equalities(inner[: m.start()], columns), _equalities(inner[m.end():], columns)
        if left is None or right is None or left[0] != right[0]:
            continue
        if found is not None:
            return None  # two readings
        found = (left[0], left[1] + right[1])
    if found is None:
        return None
    name, values = found
    return _listed(name, columns.types[name], "in", values, columns)


def _equalities(t: str, columns: Columns) -> tuple[str, list[Any]] | None:
    term = _specific(t, columns)
    if term is None or "column" not in term:
        return None
    if term["op"] == "=":
        return term["column"], [term["value"]]
    if term["op"] == "in" and "values" in term:
        return term["column"], list(term["values"])
    return None


def _name(attribute: str) -> str:
    return attribute[: attribute.rindex("#")]


def _other(t: str, columns: Columns) -> dict[str, Any]:
    found = [_name(m.group(0)) for m in columns.attribute.finditer(t)]
    sql = columns.attribute.sub(lambda m: _name(m.group(0)), t)
    return {"op": "other", "columns": list(dict.fromkeys(found)),
            "sql": sql if len(sql) <= MAX_SQL_CHARS else sql[:MAX_SQL_CHARS] + "..."}  # fmt: skip


# -- constants -------------------------------------------------------------------------------------


def _value(text: str, kind: str, columns: Columns) -> tuple[bool, Any]:
    """The constant printed as ``text`` for a column of Spark type ``kind``, as the listener writes
    it: (False, None) when the text does not read as that type or the type is not recorded."""
    if kind == "string":
        return (len(text) <= MAX_STRING_CHARS, text)
    if kind in literals.INTEGERS:
        return (True, literals.encode(kind, int(text))) if _INTEGER.fullmatch(text) else (False, None)
    if kind in ("float", "double"):
        return (True, literals.encode(kind, float(text))) if _FLOAT.fullmatch(text) else (False, None)
    if kind.startswith("decimal("):
        if not _DECIMAL.fullmatch(text):
            return False, None
        try:
            return True, literals.encode(kind, Decimal(text))
        except InvalidOperation:
            return False, None
    if kind == "boolean":
        return (True, text == "true") if text in ("true", "false") else (False, None)
    if kind == "date":
        try:
            return (True, literals.encode(kind, dt.date.fromisoformat(text))) if len(text) == 10 else (False, None)
        except ValueError:
            return False, None
    if kind in ("timestamp", "timestamp_ntz"):
        return _timestamp(text, kind, columns.zone)
    return False, None


def _timestamp(text: str, kind: str, zone: dt.tzinfo | None) -> tuple[bool, Any]:
    m = _TIMESTAMP.fullmatch(text)
    if m is None:
        return False, None
    fraction = (m.group(7) or "").ljust(6, "0")
    try:
        y, mo, d, h, mi, sec = (int(g) for g in m.groups()[:6])
        local = dt.datetime(y, mo, d, h, mi, sec, int(fraction))
    except ValueError:
        return False, None
    if kind == "timestamp_ntz":
        return True, literals.encode(kind, local)
    if zone is None:
        return False, None  # printed in a time zone the log does not name
    early, late = local.replace(tzinfo=zone, fold=0), local.replace(tzinfo=zone, fold=1)
    if early.utcoffset() != late.utcoffset():
        return False, None  # a wall-clock time the zone passes twice (or skips): not one instant
    return True, literals.encode(kind, early.astimezone(dt.UTC))


def _zone(name: str | None) -> dt.tzinfo | None:
    """A Spark session time zone (``spark.sql.session.timeZone``: a region or an offset) as a tzinfo."""
    if not name:
        return None
    if name in ("UTC", "Z", "GMT", "UT"):
        return dt.UTC
    m = _OFFSET.fullmatch(name)
    if m:
        sign = 1 if m.group(1) == "+" else -1
        return dt.timezone(sign * dt.timedelta(hours=int(m.group(2)), minutes=int(m.group(3) or 0)))
    try:
        return zoneinfo.ZoneInfo(name)
    except (zoneinfo.ZoneInfoNotFoundError, ValueError):
        return None
