"""The captured workload as ``tune``'s queries: scans grouped by what they filter on, weighted by
how often they ran, with the files each read.

Scans whose predicates (``CapturedScan.predicates``: one per column, values included) are the same
are one query, whose weight is their number, each scan discounted by its age with a half-life
(``compaction.auto_layout_half_life_s``): the layout is scored on the files the captured workload
would read, per scan (``WorkloadModel`` with ``Query.weight``), today's queries counting more than
last week's, so that a mix that changed yesterday is scored as what it is now rather than as a
blend of the old and the new. The files a scan read
(``files_read``, counted by Spark under the layout the table had then) are not a weight of the
score, which predicts files read for every candidate layout itself: weighting by what a query
costs now would favour the queries the current layout serves badly and let a new layout break
the ones it serves well. They rank the queries by what they cost now (scans x files read per
scan) and calibrate the model: per query, the files it read against the files the model predicts
under the current layout.

Too little to decide: fewer scans than ``compaction.auto_layout_min_scans`` (or recency-weighted
scans worth fewer than half that many equally weighted ones), a capture spanning
less than ``compaction.auto_layout_min_span_s``, or no scan filtering on a column of the table.
"""

from __future__ import annotations

import datetime as dt
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

import numpy as np

from lakecluster.config import CompactionConfig
from lakecluster.sizes import human_duration

from .capture import Capture, CapturedScan
from .queries import Predicate, Query


@dataclass(frozen=True)
class CapturedQuery:
    """Every captured scan with one set of predicates: ``query`` weighs ``scans``."""

    query: Query
    scans: int
    files_read: tuple[int, ...]  # per scan that reported it
    shape: str

    @property
    def mean_files_read(self) -> float | None:
        """Files a scan of it read, on average (None: Spark reported none)."""
        return statistics.fmean(self.files_read) if self.files_read else None

    @property
    def cost(self) -> float:
        """Files its scans read in all (scans x mean; a scan without a count counts as the mean)."""
        return self.scans * (self.mean_files_read or 0.0)


def captured_queries(scans: Sequence[CapturedScan], columns: Sequence[str], *, half_life_s: float = 0.0,
                     now_ms: float | None = None) -> list[CapturedQuery]:  # fmt: skip
    """Distinct queries of the scans, the costliest now first (then the most frequent).

    Each query's weight is the sum over its scans of ``0.5 ** (age / half_life_s)``, the age
    counted back from the newest scan (only the weights' ratios matter, and the newest scan weighing
    1 keeps them from underflowing), or from ``now_ms`` when that is earlier: a reader whose clock
    runs ahead must not make the rest of the workload old; a scan "from the future" weighs 1, as
    a fresh one. ``half_life_s`` 0: every scan weighs 1. Predicates on a
    column the table does not have (renamed, dropped) are left out, as a workload file's line
    would be refused.
    """
    known = set(columns)
    groups: dict[tuple[Predicate, ...], list[CapturedScan]] = {}
    for scan in scans:
        key = tuple(sorted((p for p in scan.predicates if p.column in known), key=lambda p: p.column))
        groups.setdefault(key, []).append(scan)
    newest = _anchor(scans, now_ms)
    out = []
    for predicates, members in groups.items():
        text = describe(predicates)
        reads = tuple(s.files_read for s in members if s.files_read is not None)
        weight = float(scan_weights(members, half_life_s, newest).sum())
        out.append(CapturedQuery(Query(0, text, predicates, weight=weight), len(members), reads,
                                 members[-1].shape or "(no filter)"))  # fmt: skip
    out.sort(key=lambda q: (-q.cost, -q.scans, q.query.text))
    return [CapturedQuery(Query(i, q.query.text, q.query.predicates, q.query.weight), q.scans, q.files_read, q.shape)
            for i, q in enumerate(out, start=1)]  # fmt: skip


def _anchor(scans: Sequence[CapturedScan], now_ms: float | None) -> float:
    """The time ages are counted from: the newest scan, or ``now_ms`` when that is earlier."""
    newest: float = max((s.time_ms for s in scans), default=0)
    return newest if now_ms is None else min(newest, now_ms)


def scan_weights(scans: Sequence[CapturedScan], half_life_s: float, anchor_ms: float) -> np.ndarray:
    """Each scan's weight: ``0.5 ** (age / half_life_s)``, its age counted back from ``anchor_ms``
    (a scan after it weighs 1); all 1 when ``half_life_s`` is 0."""
    if half_life_s <= 0:
        return np.ones(len(scans))
    ages = np.maximum(0, anchor_ms - np.array([s.time_ms for s in scans], dtype=np.float64)) / 1000
    return np.exp2(-ages / half_life_s)


def effective_scans(scans: Sequence[CapturedScan], half_life_s: float, now_ms: float | None = None) -> float:
    """How many equally weighted scans the recency-weighted ones are worth: (sum w)^2 / sum w^2
    (Kish's effective sample size); the number of scans when they all weigh alike."""
    w = scan_weights(scans, half_life_s, _anchor(scans, now_ms))
    return float(w.sum() ** 2 / (w**2).sum()) if len(w) else 0.0


def too_little(capture: Capture, queries: Sequence[CapturedQuery], cfg: CompactionConfig, *,
               now_ms: float | None = None) -> str | None:  # fmt: skip
    """Why the capture is too little to choose a layout on (None: enough)."""
    scans = len(capture.scans)
    if scans < cfg.auto_layout_min_scans:
        return (f"too little captured workload: {scans:,} scan(s), fewer than compaction.auto_layout_min_scans "
                f"({cfg.auto_layout_min_scans:,}); let the readers capture more (docs/workload.md)")  # fmt: skip
    effective = effective_scans(capture.scans, cfg.auto_layout_half_life_s, now_ms)
    if effective < cfg.auto_layout_min_scans / 2:
        # A half-life short against the scans' spacing leaves a few recent scans deciding alone. (Any
        # decay makes the effective number a little smaller than the count: half is the bar.)
        return (f"too little captured workload: its {scans:,} scans weigh as {effective:,.0f} equal ones with "
                f"compaction.auto_layout_half_life_s ({human_duration(cfg.auto_layout_half_life_s)}), fewer than "
                f"half of compaction.auto_layout_min_scans ({cfg.auto_layout_min_scans:,}); let the readers capture "
                "more or lengthen the half-life")  # fmt: skip
    span = (capture.scans[-1].time_ms - capture.scans[0].time_ms) / 1000
    if span < cfg.auto_layout_min_span_s:
        return (f"too little captured workload: its {scans:,} scans span {human_duration(span)}, less than "
                f"compaction.auto_layout_min_span_s ({human_duration(cfg.auto_layout_min_span_s)}): one burst of "
                "queries is not the workload")  # fmt: skip
    if not any(q.query.predicates for q in queries):
        return (f"no captured scan (of {scans:,}) filters on a column of the table with a predicate data skipping "
                "can use: every layout reads the same files")  # fmt: skip
    return None


def describe(predicates: Sequence[Predicate]) -> str:
    """The predicates as a WHERE clause (``c_city IN ('A', 'B') AND lo_quantity BETWEEN 1 AND 5``)."""
    terms = []
    for p in predicates:
        if p.kind == "eq":
            values = ", ".join(_literal(v) for v in p.values)
            terms.append(f"{p.column} = {values}" if len(p.values) == 1 else f"{p.column} IN ({values})")
        elif p.low is not None and p.high is not None:
            terms.append(f"{p.column} BETWEEN {_literal(p.low)} AND {_literal(p.high)}")
        elif p.low is not None:
            terms.append(f"{p.column} >= {_literal(p.low)}")
        elif p.high is not None:
            terms.append(f"{p.column} <= {_literal(p.high)}")
    return " AND ".join(terms) or "(no filter a layout can use)"


def _literal(value: Any) -> str:
    if isinstance(value, str):
        value = value.replace("\U0010ffff", "~")  # the top of a LIKE prefix's range
        return "'" + value.replace("'", "''") + "'"
    if isinstance(value, Decimal):
        return format(value, "f")
    if isinstance(value, dt.datetime | dt.date):
        return f"'{value.isoformat()}'"
    return str(value)
