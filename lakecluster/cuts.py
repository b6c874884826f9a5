"""Where a clustering column's coarse levels are cut: equal depth, moved to the roundest value nearby.

Equal-depth cuts split a column's rows evenly but land on arbitrary values (1993-12-17, 4711,
``"MFGR#2217"``), so a query on a whole natural unit (a year, a month, a thousand, a brand prefix)
straddles two levels and reads the files of both. Here each cut may move up to ``SLACK`` of a
level's depth either way, to the roundest value within reach:

* dates: a year start before a month start before any day;
* timestamps: year, month, day, hour, minute, second starts, in that order;
* other numbers: the multiple of the largest power of ten (19940000 before 19931300 before
  19931231, so ``yyyymmdd`` integers cut at years, then months);
* strings: the shortest string (``"MFGR#2"`` before ``"MFGR#22"``), a boundary of the widest prefix.

Among the equally round values the one nearest the equal-depth position wins, and every level
keeps at least ``MIN_GAP`` of its depth: a level holds between a quarter and twice its equal
share of the rows.
"""

from __future__ import annotations

import math
from typing import Literal

import numpy as np

Unit = Literal["number", "date", "timestamp", "string"]

SLACK = 0.5
MIN_GAP = 0.25
_MAX_CANDIDATES = 4096
_DATE_STEPS = ("Y", "M", "D")
_TIMESTAMP_STEPS = ("Y", "M", "D", "h", "m", "s", "us")


def unit_of(column_type: str) -> Unit:
    """The roundness a declared column type (``lakecluster.schema``) is cut by."""
    if column_type == "string":
        return "string"
    if column_type == "date":
        return "date"
    if column_type.startswith("timestamp"):
        return "timestamp"
    return "number"


def _spread(values: np.ndarray) -> np.ndarray:
    if len(values) <= _MAX_CANDIDATES:
        return values
    return values[np.linspace(0, len(values) - 1, _MAX_CANDIDATES).astype(np.int64)]


def _decimal(lo: float, hi: float) -> np.ndarray:
    if lo == hi or not (math.isfinite(lo) and math.isfinite(hi)):
        return np.asarray([lo], dtype=np.float64)
    top = min(math.floor(math.log10(max(abs(lo), abs(hi), 1e-300))) + 1, 308)
    for exponent in range(top, -13, -1):
        # Multiples of a negative power are divided, not multiplied: 3 / 10 is 0.3, 3 * 0.1 is not.
        step = 10.0**exponent if exponent >= 0 else 10.0**-exponent
        scaled_lo, scaled_hi = (lo / step, hi / step) if exponent >= 0 else (lo * step, hi * step)
        if not (math.isfinite(scaled_lo) and math.isfinite(scaled_hi)):
            continue
        first, last = math.ceil(scaled_lo), math.floor(scaled_hi)
        if first <= last:
            counts = np.arange(first, min(last, first + 10 * _MAX_CANDIDATES) + 1, dtype=np.float64)
            multiples = counts * step if exponent >= 0 else counts / step
            multiples = multiples[(multiples >= lo) & (multiples <= hi)]
            if len(multiples):
                return _spread(multiples)
    return np.asarray([hi], dtype=np.float64)


def _calendar(lo: float, hi: float, unit: Literal["D", "us"], steps: tuple[str, ...]) -> np.ndarray:
    start, end = np.datetime64(math.ceil(lo), unit), np.datetime64(math.floor(hi), unit)
    if start > end:
        return np.asarray([hi], dtype=np.float64)
    for step in steps:
        first = start.astype(f"M8[{step}]")
        if first.astype(f"M8[{unit}]") < start:
            first += 1
        last = end.astype(f"M8[{step}]")
        if first <= last:
            starts = np.arange(first, last + 1).astype(f"M8[{unit}]").astype(np.int64).astype(np.float64)
            return _spread(starts)
    return np.asarray([float(math.ceil(lo))], dtype=np.float64)


def _shortest_strings(lo: str, hi: str) -> np.ndarray:
    common = 0
    for a, b in zip(lo, hi, strict=False):
        if a != b:
            break
        common += 1
    if common == len(lo):  # lo is a prefix of hi: nothing in between is shorter
        return np.asarray([lo])
    prefix = lo[:common]
    chars = np.arange(ord(lo[common]) + 1, ord(hi[common]) + 1)
    return np.asarray([prefix + chr(int(c)) for c in _spread(chars)])


def roundest(lo: float | str, hi: float | str, unit: Unit) -> np.ndarray:
    """The roundest values ``v`` with ``lo <= v <= hi`` (all equally round, sorted).

    Numbers are the column's float form (``sketches.numeric_values``: dates as days since the
    epoch, timestamps as microseconds).
    """
    if unit == "string":
        return _shortest_strings(str(lo), str(hi))
    if unit == "date":
        return _calendar(float(lo), float(hi), "D", _DATE_STEPS)
    if unit == "timestamp":
        return _calendar(float(lo), float(hi), "us", _TIMESTAMP_STEPS)
    return _decimal(float(lo), float(hi))


def mass_below(edges: np.ndarray, starts: np.ndarray, values: np.ndarray, unit: Unit) -> np.ndarray:
    """Estimated fraction of the rows below each of ``values`` (linear inside a range for numbers)."""
    if unit != "string":
        return np.interp(values.astype(np.float64), edges.astype(np.float64), starts)
    ends = np.append(starts, 1.0)
    i = np.searchsorted(edges, values, side="left")
    exact = (i < len(edges)) & (edges[np.minimum(i, len(edges) - 1)] == values)
    return np.where(exact, ends[i], (ends[np.maximum(i - 1, 0)] + ends[i]) / 2)


def level_cuts(edges: np.ndarray, starts: np.ndarray, levels: int, unit: Unit) -> np.ndarray:
    """Values that cut a column into ``levels`` levels of about equal depth at round values.

    ``edges`` are the column's sorted boundaries and ``starts`` the fraction of rows below each
    (``sketches.Boundaries``). A row with value ``v`` is in level ``j`` when ``j`` cuts are
    ``<= v``. Returns at most ``levels - 1`` increasing values; fewer when a heavy value spans
    several levels' depth.
    """
    cuts: list[float | str] = []
    if levels <= 1 or len(edges) < 2:
        return np.asarray(cuts, dtype=edges.dtype)
    depth, previous = 1.0 / levels, 0.0
    inner = np.arange(1, len(edges))  # a cut at edges[0] would leave the first level empty
    for j in range(1, levels):
        ideal = j * depth
        low = max(ideal - SLACK * depth, previous + MIN_GAP * depth)
        high = min(ideal + SLACK * depth, 1.0 - MIN_GAP * depth)
        reach = inner[(starts[inner] >= low) & (starts[inner] <= high)]
        if len(reach) == 0:  # a heavy value spans the window: the nearest edge after the last cut
            later = inner[starts[inner] > previous]
            if len(later) == 0:
                break
            nearest = later[np.argmin(np.abs(starts[later] - ideal))]
            candidates = np.asarray([edges[nearest]], dtype=edges.dtype)
        else:
            candidates = roundest(edges[reach[0]], edges[reach[-1]], unit).astype(edges.dtype)
        masses = mass_below(edges, starts, candidates, unit)
        best = int(np.argmin(np.abs(masses - ideal)))
        if cuts and not candidates[best] > cuts[-1]:
            continue
        cuts.append(candidates[best])
        previous = float(masses[best])
    return np.asarray(cuts, dtype=edges.dtype)
