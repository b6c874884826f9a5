"""Delta's rules for per-file stats, applied to the data files lakecluster writes itself.

Delta-Spark collects ``minValues``/``maxValues``/``nullCount`` for the first
``delta.dataSkippingNumIndexedCols`` data columns of the schema (default 32, partition columns not
counted, negative: all), or for exactly the columns ``delta.dataSkippingStatsColumns`` lists when
that is set; string bounds keep a prefix of 32 characters. lakecluster follows the same table
properties, so a wide table or a column of long text does not bloat every add action in the log,
and every reader (delta-rs too, which reads stats only for those columns) sees the same stats.
A clustering or indexed column left out gets no stats, and nothing skips files by it: the services
warn (:func:`without_stats`).

String bounds are cut at code points (Python ``str``), so UTF-8 byte order, the order Spark,
delta-rs and DuckDB compare strings in, is preserved: a prefix is a lower bound of the minimum, and
a prefix followed by a character above the first one cut off is an upper bound of the maximum.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence

log = logging.getLogger(__name__)

NUM_INDEXED_COLS = "delta.dataSkippingNumIndexedCols"
STATS_COLUMNS = "delta.dataSkippingStatsColumns"
DEFAULT_NUM_INDEXED_COLS = 32
STRING_PREFIX = 32  # characters of a string bound (Delta's ``stats.skipping.strings.prefixLength``)

_ASCII_ABOVE = "\x7f"  # above every other ASCII character, and still one byte of UTF-8
_MAX_CHAR = "\U0010ffff"  # above every other code point


def stats_columns(data_columns: Sequence[str], configuration: Mapping[str, str]) -> tuple[str, ...]:
    """The columns of ``data_columns`` (the file's columns, in schema order) that get stats, as the
    table properties in ``configuration`` choose them. A value Delta would refuse means all
    columns (stats on more columns are always valid), with a warning."""
    listed = configuration.get(STATS_COLUMNS)
    if listed is not None:
        names = _identifiers(listed)
        if names is None:
            log.warning("table property %s=%r cannot be parsed; files get stats for every column", STATS_COLUMNS,
                        listed)  # fmt: skip
            return tuple(data_columns)
        # Nested names ("a.b") pick a struct's fields; the columns lakecluster writes are flat.
        wanted = {parts[0].lower() for parts in names if len(parts) == 1}
        return tuple(c for c in data_columns if c.lower() in wanted)
    raw = configuration.get(NUM_INDEXED_COLS, str(DEFAULT_NUM_INDEXED_COLS))
    try:
        n = int(raw)
    except ValueError:
        log.warning("table property %s=%r is not an integer; files get stats for every column", NUM_INDEXED_COLS, raw)
        return tuple(data_columns)
    return tuple(data_columns if n < 0 else data_columns[:n])


def without_stats(columns: Sequence[str], data_columns: Sequence[str], configuration: Mapping[str, str]) -> list[str]:
    """Which of ``columns`` (data columns the layout or the index skip files by) the table's
    properties leave without stats."""
    chosen = set(stats_columns(data_columns, configuration))
    return [c for c in columns if c in data_columns and c not in chosen]


class WithoutStatsWarning:
    """Logs, once per change, which of ``columns`` (the ones the layout and the index skip files
    by) a table's properties give no stats, with the property to set."""

    def __init__(self, table_uri: str, columns: Sequence[str]) -> None:
        self.table_uri = table_uri
        self.columns = tuple(columns)
        self.missing: list[str] = []

    def check(self, data_columns: Sequence[str], configuration: Mapping[str, str]) -> None:
        missing = without_stats(self.columns, data_columns, configuration)
        if missing and missing != self.missing:
            log.warning(
                "%s: columns %s get no file stats under the table's %s / %s properties, so no reader skips "
                "files by them; list them in %s (ALTER TABLE ... SET TBLPROPERTIES)", self.table_uri,
                ", ".join(missing), NUM_INDEXED_COLS, STATS_COLUMNS, STATS_COLUMNS,
            )  # fmt: skip
        self.missing = missing


def _identifiers(text: str) -> list[list[str]] | None:
    """A comma-separated list of (possibly dotted, possibly back-quoted) column names, as Spark's
    ``multipartIdentifierList`` reads it; None when it cannot be read."""
    out: list[list[str]] = []
    parts: list[str] = []
    current: list[str] = []
    quoted = False
    i = 0
    while i < len(text):
        ch = text[i]
        if quoted:
            if ch == "`" and text[i + 1 : i + 2] == "`":
                current.append("`")
                i += 1
            elif ch == "`":
                quoted = False
            else:
                current.append(ch)
        elif ch == "`":
            quoted = True
        elif ch.isspace():
            pass  # between names; an unquoted name holds none
        elif ch in ".,":
            parts.append("".join(current))
            current = []
            if ch == ",":
                out.append(parts)
                parts = []
        else:
            current.append(ch)
        i += 1
    if quoted:
        return None
    parts.append("".join(current))
    out.append(parts)
    return [p for p in out if any(p)]


def string_min(value: str, prefix: int = STRING_PREFIX) -> str:
    """A lower bound of ``value`` at most ``prefix`` characters long."""
    return value[:prefix]


def string_max(value: str, prefix: int = STRING_PREFIX) -> str | None:
    """An upper bound of ``value``: itself when short, else its prefix and one character above the
    first one cut off (U+007F when that is ASCII, else U+10FFFF; the prefix grows past U+10FFFF,
    which nothing is above, up to twice its length: past that, None, no bound).

    As Delta-Spark cuts it, to the same text: the prefix is measured in UTF-16 code units (Java's
    string length; a character above U+FFFF counts two and is never split), where the minimum's is
    measured in characters (Spark's ``substring``).
    """
    units, cut = 0, len(value)
    for i, ch in enumerate(value):
        units += 2 if ch > "\uffff" else 1
        if units >= prefix:
            cut = i + 1
            break
    while cut < len(value) and value[cut] == _MAX_CHAR:
        cut += 1
        units += 2
        if units > 2 * prefix:
            return None
    if cut == len(value):
        return value
    return value[:cut] + (_ASCII_ABOVE if value[cut] < _ASCII_ABOVE else _MAX_CHAR)
