"""The layout loop: the compactor scores layouts on the captured workload between rounds and, in
``apply`` mode, adopts a better one within guardrails (docs/tuning.md, "The layout loop").

``compaction.auto_layout``:

* ``off``: nothing here runs;
* ``advise`` (the default): now and then the compactor scores the candidate layouts on the
  captured workload as ``tune --from-workload`` does and shows the best (metrics, one log line
  when it changes, ``recommendation.json`` for ``lakecluster status``); it changes nothing;
* ``apply``: it also adopts the best layout with the table's partitioning when (1) it reads at
  least ``auto_layout_min_gain`` fewer files per captured scan than the layout in effect, in
  ``auto_layout_confirmations`` scorings in a row (one scoring's winner can be the noise of a few
  recent queries; a layout change costs a re-cluster), (2) the
  rolling byte budget of re-clustering (``rewrite_budget_bytes_per_day`` per
  ``rewrite_budget_window_s``, default half the table's bytes per 24 h) has room for the
  re-cluster's first group, and (3) no earlier adoption still has files to re-cluster, unless the
  new layout gains at least what two adoptions in a row would (``supersede_gain``): a layout
  adopted while the workload was changing gives way to the one it changed to, without waiting
  for the re-cluster to a layout nobody queries any more. The adoption goes to
  ``_lakecluster/layout/`` (``adoptions.py``); the compactor clusters by it from then on and
  re-clusters the files written under another layout in its rounds, the files the captured
  workload reads most first, within the budget.

The captured scans are weighted by their age (``auto_layout_half_life_s``, ``captured.py``), so a
mix that changed a day ago is scored mostly as the new mix, not as a blend of both.

Scoring costs at most ``auto_layout_max_cost_share`` (5 %) of the compactor's time: it runs only
once its last wall time divided by that share has passed since it (idle waits between rounds
included), and at most every ``auto_layout_interval_s``.

The budget is counted from the table's log, so every compactor and every restart sees the same:
the bytes removed by commits whose metadata names an adoption (the re-cluster's groups) within
the last ``rewrite_budget_window_s``.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import socket
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from lakecluster import metrics
from lakecluster.clustering import layout_fingerprint
from lakecluster.config import CompactionConfig, Config
from lakecluster.layout.adoptions import AdoptionStore
from lakecluster.layout.advise import current_candidate, layout_advice
from lakecluster.layout.model import Scored, column_scalar
from lakecluster.layout.search import gain
from lakecluster.sizes import human_bytes, human_duration
from lakecluster.table import Adoption, DeltaLocation, LakeTable, TableLayout, parse_user_metadata
from lakecluster.table.live_files import off_layout
from lakecluster.workload.capture import read_capture
from lakecluster.workload.captured import captured_queries, too_little
from lakecluster.workload.queries import Predicate, Query

log = logging.getLogger(__name__)

# (live files to re-cluster, the compaction settings of its groups, each file's priority) -> the
# bytes of the re-cluster's first group: the compactor's grouping, which the policy does not own.
FirstGroupBytes = Callable[[pa.Table, CompactionConfig, Mapping[str, float]], int]

PARALLEL_READS = 16  # commit files the budget's ledger reads at once
DAY_S = 86_400.0


def fingerprint_of(config: Config) -> str:
    """The fingerprint of ``config``'s layout (``TableLayout.fingerprint``)."""
    return TableLayout.configured(config).fingerprint


def supersede_gain(min_gain: float) -> float:
    """The gain that lets a layout replace an adoption whose re-cluster is unfinished: what two
    adoptions in a row would gain at least (0.2 -> 0.36)."""
    return 1 - (1 - min_gain) ** 2


def capped(config: Config, budget: int) -> CompactionConfig:
    """The compaction settings with groups of at most the window's budget: a re-cluster group never
    needs more than that, so the budget paces the re-cluster instead of stopping it."""
    c = config.compaction
    return dataclasses.replace(c, max_group_bytes=max(1, min(c.max_group_bytes, budget)))


def pending(live: pa.Table, fingerprint: str) -> pa.Array:
    """The files the layout loop re-clusters: written by a compaction (generation >= 1) under
    another layout. The stream's new files are the tiered planner's, clustered as it rewrites them."""
    compacted = live.filter(pc.greater_equal(live["generation"], 1))
    return off_layout(compacted, fingerprint)


@dataclass
class Evaluation:
    """One scoring of the layouts on the captured workload, and what became of it."""

    time: float
    mode: str
    seconds: float = 0.0
    scans: int = 0
    queries: int = 0
    current: dict[str, Any] | None = None  # the layout in effect and its files read per scan
    recommended: dict[str, Any] | None = None  # the best layout (any partitioning allowed)
    adoptable: dict[str, Any] | None = None  # the best with the table's partitioning
    gain: float = 0.0  # 1 - adoptable / current files read per scan
    decision: str = ""
    adopted: int | None = None
    recluster_bytes: int = 0
    budget: dict[str, int] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def _describe(s: Scored) -> dict[str, Any]:
    return {**s.candidate.describe(), "files_read_per_scan": round(s.mean_files_read, 3)}


class RewriteLedger:
    """Bytes the re-clustering rewrote in a window, from the log: the removes of commits whose
    lakecluster metadata names an adoption. Each commit file is read once per process."""

    def __init__(self, location: DeltaLocation) -> None:
        self.location = location
        self._seen: dict[int, tuple[float, int]] = {}  # version -> (commit time s, re-clustered bytes)
        self._top = -1  # every version from the first one read up to this is in _seen (or out of the window)
        self._since = float("inf")  # the oldest commit time _seen covers: older ones were dropped or never read

    def used(self, latest: int, since: float) -> int:
        """Re-clustered bytes committed at or after ``since`` (epoch seconds), up to ``latest``."""
        if since < self._since:  # a wider window than the one read (the window was raised): read it again
            self._seen, self._top = {}, -1
        self._since = since
        if self._top < 0:
            version = latest
            while version >= 0:  # backwards, in parallel pages, until a commit older than the window
                page = list(range(version, max(-1, version - 4 * PARALLEL_READS), -1))
                if not self._read(page, since):
                    break
                version = page[-1] - 1
        elif latest > self._top:
            self._read(list(range(self._top + 1, latest + 1)), since)
        self._top = max(self._top, latest)
        self._seen = {v: tb for v, tb in self._seen.items() if tb[0] >= since}
        return sum(b for _, b in self._seen.values())

    def _read(self, versions: list[int], since: float) -> bool:
        """Read ``versions``; False once one is older than ``since`` or gone (nothing older counts)."""
        with ThreadPoolExecutor(PARALLEL_READS) as pool:
            commits = list(pool.map(self.location.commits_of, versions))
        more = True
        for version, actions in zip(versions, commits, strict=True):
            if actions is None:
                more = False
                continue
            info: dict[str, Any] = next((a["commitInfo"] for a in actions if "commitInfo" in a), {})
            stamp = float(info.get("timestamp") or 0) / 1000
            if stamp < since:
                more = False
                continue
            meta = parse_user_metadata(info.get("userMetadata")) or {}
            if meta.get("adoption"):  # only the re-cluster's commits are kept: the others count nothing
                removed = [int(a["remove"].get("size") or 0) for a in actions if "remove" in a]
                self._seen[version] = (stamp, sum(removed))
        return more


def file_hits(actions: pa.Table, queries: Sequence[Query]) -> dict[str, float]:
    """Per file (its log path), the captured scans whose predicates its stats can match: how much
    the captured workload reads it. A predicate on a column without stats matches every file."""
    n = actions.num_rows
    total = np.zeros(n)
    for q in queries:
        mask = np.ones(n, dtype=bool)
        for p in q.predicates:
            mask &= _may_match(actions, p)
        total += q.weight * mask
    return dict(zip(actions["path"].to_pylist(), total.tolist(), strict=True))


def _may_match(actions: pa.Table, p: Predicate) -> np.ndarray:
    n = actions.num_rows
    names = actions.column_names
    try:
        if f"partition.{p.column}" in names:
            values = actions[f"partition.{p.column}"]
            if p.kind == "eq":
                hit = pc.is_in(values, value_set=pa.array([column_scalar(v, values.type) for v in p.values]))
            else:
                hit = _between(values, values, p, values.type)
        elif f"min.{p.column}" in names and f"max.{p.column}" in names:
            low, high = actions[f"min.{p.column}"], actions[f"max.{p.column}"]
            if p.kind == "eq":
                hit = pa.array(np.zeros(n, dtype=bool))
                for v in p.values:
                    s = column_scalar(v, low.type)
                    hit = pc.or_(hit, pc.and_(pc.less_equal(low, s), pc.greater_equal(high, s)))
            else:
                hit = _between(low, high, p, low.type)
        else:
            return np.ones(n, dtype=bool)
        return np.asarray(pc.fill_null(hit, True).to_numpy(zero_copy_only=False), dtype=bool)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, TypeError):
        return np.ones(n, dtype=bool)  # stats of another type than the values: no pruning, no harm


def _between(low: Any, high: Any, p: Predicate, type_: pa.DataType) -> Any:
    hit = pa.array(np.ones(len(low), dtype=bool))
    if p.low is not None:
        hit = pc.and_(hit, pc.greater_equal(high, column_scalar(p.low, type_)))
    if p.high is not None:
        hit = pc.and_(hit, pc.less_equal(low, column_scalar(p.high, type_)))
    return hit


class AutoLayout:
    """The layout loop of one compactor: when to score, the scoring, the adoption, the budget."""

    def __init__(self, table: LakeTable, first_group_bytes: FirstGroupBytes, *,
                 store: AdoptionStore | None = None) -> None:  # fmt: skip
        """``first_group_bytes``: the bytes of the first group the compactor would re-cluster the
        given live files in (the budget must hold it for an adoption to start)."""
        self.table = table
        self.first_group_bytes = first_group_bytes
        self.store = store or AdoptionStore(table)
        self.ledger = RewriteLedger(table.delta)
        self.last_cost: float | None = None  # wall time of the last scoring
        self.last_time: float | None = None  # monotonic time of the last scoring
        self.priority: dict[str, float] = {}  # per file path: captured scans its stats can match
        self.last: Evaluation | None = None
        self._shown: tuple | None = None  # the recommendation last logged
        # The columns past the gain (and the adoption they were scored against: an adoption starts
        # a new streak) and in how many scorings in a row; any other outcome of a scoring ends it.
        self._streak: tuple[tuple, int] = ((), 0)
        self._passed = False
        self.budget_paused = False

    # -- when ------------------------------------------------------------------------------

    def due(self, config: Config, now: float | None = None) -> bool:
        """Whether to score now: the loop is on, and since the last scoring both
        ``auto_layout_interval_s`` and its cost divided by ``auto_layout_max_cost_share`` have passed.

        The cost is held against the service's time, idle waits included, not against its rounds'
        work: a compactor with little to do (short rounds a minute apart) must still follow a
        workload that changes, and scoring then costs it at most that share of its time."""
        cfg = config.compaction
        if cfg.auto_layout == "off":
            return False
        if self.last_time is None:
            return True
        now = time.monotonic() if now is None else now
        spacing = (self.last_cost or 0.0) / cfg.auto_layout_max_cost_share
        return now - self.last_time >= max(cfg.auto_layout_interval_s, spacing)

    # -- the budget ------------------------------------------------------------------------

    def budget(self, config: Config, live: pa.Table, version: int, now: float | None = None) -> dict[str, int]:
        """{limit, used, left} of the re-clustering's rolling byte budget: the bytes per day
        (``rewrite_budget_bytes_per_day``, default half the table's) times the share of a day its
        window (``rewrite_budget_window_s``) is, so a shorter window paces the same daily rate."""
        now = time.time() if now is None else now
        cfg = config.compaction
        table_bytes = int(pc.sum(live["size"]).as_py() or 0)
        per_day = cfg.rewrite_budget_bytes_per_day or table_bytes // 2
        limit = max(1, int(per_day * cfg.rewrite_budget_window_s / DAY_S))
        used = self.ledger.used(version, now - cfg.rewrite_budget_window_s)
        metrics.RELAYOUT_BUDGET_BYTES.set(limit)
        metrics.RELAYOUT_BUDGET_USED.set(used)
        return {"limit": limit, "used": used, "left": max(0, limit - used)}

    def note_budget(self, paused: bool, limit: int, used: int, window: float = DAY_S) -> None:
        """Metric and log line when the re-clustering pauses for its budget (``limit`` bytes per
        ``window`` seconds) or resumes."""
        metrics.RELAYOUT_BUDGET_EXHAUSTED.set(1 if paused else 0)
        if paused and not self.budget_paused:
            log.warning("layout loop: the re-clustering pauses: it rewrote %s of its %s per %s "
                        "(compaction.rewrite_budget_bytes_per_day, rewrite_budget_window_s); it resumes as the window "
                        "moves on", human_bytes(used), human_bytes(limit), human_duration(window))  # fmt: skip
        elif not paused and self.budget_paused:
            log.info("layout loop: the re-clustering resumes within its budget")
        self.budget_paused = paused

    # -- scoring and adopting ----------------------------------------------------------------

    def evaluate(self, config: Config, adoption: Adoption | None, live: pa.Table, version: int) -> Evaluation:
        """Score the layouts on the captured workload; in ``apply`` mode, adopt the best one past
        the guardrails. ``config`` is the one in effect (the adopted layout applied), ``live`` the
        table's live files under it."""
        started = time.monotonic()
        cfg = config.compaction
        result = Evaluation(time.time(), cfg.auto_layout)
        self._passed = False
        try:
            self._score(config, adoption, live, version, result)
        finally:
            if not self._passed:
                self._streak = ((), 0)
            result.seconds = round(time.monotonic() - started, 3)
            self.last_cost, self.last_time = result.seconds, time.monotonic()
            self.last = result
            metrics.AUTO_LAYOUT_EVALUATIONS.inc()
            metrics.AUTO_LAYOUT_EVALUATION_SECONDS.set(result.seconds)
            self._export(result)
        return result

    def _score(self, config: Config, adoption: Adoption | None, live: pa.Table, version: int,
               result: Evaluation) -> None:  # fmt: skip
        cfg, t = config.compaction, config.table
        # The recent workload only: a query mix that changed weeks ago must not outvote today's.
        capture = read_capture(self.table, config.workload, since_s=cfg.auto_layout_window_s)
        captured = captured_queries(capture.scans, [c.name for c in t.columns], half_life_s=cfg.auto_layout_half_life_s,
                                    now_ms=result.time * 1000)  # fmt: skip
        result.scans, result.queries = len(capture.scans), len(captured)
        withheld = too_little(capture, captured, cfg, now_ms=result.time * 1000)
        if withheld is not None:
            result.decision = withheld
            return
        queries = [c.query for c in captured]
        current = current_candidate(t.clustering_columns, cfg.weights(), t.partition_by)
        advice = layout_advice(self.table, queries, current=current, sample_limit=cfg.auto_layout_sample_rows,
                               partitionings=None if cfg.auto_layout_partitioning else [t.partition_by])  # fmt: skip
        self.priority = file_hits(advice.actions, queries)
        now = advice.current
        result.current = _describe(now)
        if advice.best is None:
            result.decision = f"no recommendation: {advice.withheld}"
            return
        result.recommended = _describe(advice.best)
        adoptable = next(s for s in advice.ranked if s.candidate.partition_by == tuple(t.partition_by))
        result.adoptable = _describe(adoptable)
        result.gain = gain(adoptable, now)
        result.decision = self._decide(config, adoption, live, version, adoptable, result)

    def _decide(self, config: Config, adoption: Adoption | None, live: pa.Table, version: int, best: Scored,
                result: Evaluation) -> str:  # fmt: skip
        cfg = config.compaction
        if best.candidate.current:
            return "the layout in effect is the best one for the captured workload"
        if cfg.auto_layout != "apply":
            return f"advise only (compaction.auto_layout = {cfg.auto_layout!r}): nothing adopted"
        if result.gain < cfg.auto_layout_min_gain:
            return (f"not adopted: {result.gain:.0%} fewer files read per scan, below compaction.auto_layout_min_gain "
                    f"({cfg.auto_layout_min_gain:.0%})")  # fmt: skip
        # The columns, not the weights: weights found on a sample of a changing table vary between
        # scorings of the same workload; the latest scoring's are the ones adopted.
        key = (adoption.id if adoption is not None else None, best.candidate.clustering_columns)
        seen = self._streak[1] + 1 if self._streak[0] == key else 1
        self._streak, self._passed = (key, seen), True
        if seen < cfg.auto_layout_confirmations:
            return (f"not adopted yet: {result.gain:.0%} fewer files read per scan in {seen} scoring(s) in a row, "
                    f"of the {cfg.auto_layout_confirmations} compaction.auto_layout_confirmations asks")  # fmt: skip
        left_over = pending(live, fingerprint_of(config))
        needed = supersede_gain(cfg.auto_layout_min_gain)
        if adoption is not None and len(left_over) and result.gain < needed:
            return (f"not adopted: the re-clustering to adopted layout {adoption.number} still has {len(left_over)} "
                    f"file(s) left, and {result.gain:.0%} fewer files read is below the {needed:.0%} that replaces an "
                    "unfinished adoption")  # fmt: skip
        c = best.candidate
        weights = dict(zip(c.clustering_columns, c.weights, strict=True))
        fingerprint = layout_fingerprint(c.clustering_columns, weights, cfg.curve, cfg.group_by_parents)
        todo = pending(live, fingerprint)
        rows = live.filter(pc.is_in(live["path"], value_set=todo))
        result.budget = self.budget(config, live, version)
        result.recluster_bytes = int(pc.sum(rows["size"]).as_py() or 0)
        first = self.first_group_bytes(rows, capped(config, result.budget["limit"]), self.priority)
        if first > result.budget["left"]:
            return (f"not adopted: the re-cluster's first group ({human_bytes(first)}) does not fit the "
                    f"{human_bytes(result.budget['left'])} left of compaction.rewrite_budget_bytes_per_day "
                    f"({human_bytes(result.budget['limit'])} per "
                    f"{human_duration(cfg.rewrite_budget_window_s)})")  # fmt: skip
        number = (adoption.number if adoption is not None else 0) + 1
        latest = self.store.latest()
        if latest is not None and latest.number >= number:  # another compactor adopted meanwhile
            return f"not adopted: another compactor adopted layout {latest.number} meanwhile; following it"
        mine = Adoption(number, uuid.uuid4().hex, c.clustering_columns, c.weights, fingerprint,
                        replaced=fingerprint_of(config), time=time.time(),
                        predicted={"current": result.current, "adopted": result.adoptable, "gain": result.gain,
                                   "scans": result.scans, "recluster_bytes": result.recluster_bytes},
                        by=f"{socket.gethostname()}:{os.getpid()}")  # fmt: skip
        winner, won = self.store.adopt(mine)
        if not won:
            return f"not adopted: another compactor adopted layout {winner.number} at the same moment; following it"
        result.adopted = winner.number
        metrics.AUTO_LAYOUT_ADOPTIONS.inc()
        log.warning("layout loop: adopted layout %d: clustering columns %s, weights %s (was %s); predicted files "
                    "read per captured scan %.1f -> %.1f (%.0f%% fewer); re-clustering %s within %s per %s%s",
                    winner.number, ", ".join(c.clustering_columns), ", ".join(f"{w:g}" for w in c.weights),
                    ", ".join(config.table.clustering_columns), (result.current or {}).get("files_read_per_scan", 0.0),
                    best.mean_files_read, 100 * result.gain, human_bytes(result.recluster_bytes),
                    human_bytes(result.budget["limit"]), human_duration(cfg.rewrite_budget_window_s),
                    f"; it replaces layout {adoption.number}, whose re-cluster had {len(left_over)} file(s) left"
                    if adoption is not None and len(left_over) else "")  # fmt: skip
        return f"adopted layout {winner.number}"

    def _export(self, result: Evaluation) -> None:
        """Gauges, the log line when the recommendation changes, and the file ``status`` reads."""
        metrics.AUTO_LAYOUT_GAIN.set(max(0.0, result.gain))
        shown = result.recommended or {}
        if result.current is not None:
            metrics.AUTO_LAYOUT_FILES_READ.labels("current").set(result.current["files_read_per_scan"])
        if shown:
            metrics.AUTO_LAYOUT_FILES_READ.labels("recommended").set(shown["files_read_per_scan"])
        metrics.AUTO_LAYOUT_RECOMMENDATION.info({
            "clustering_columns": ",".join(shown.get("clustering_columns", [])),
            "column_weights": ",".join(f"{w:g}" for w in shown.get("column_weights", {}).values()),
            "partition_by": ",".join(shown.get("partition_by", [])), "mode": result.mode,
        })  # fmt: skip
        key = (tuple(shown.get("clustering_columns", [])), tuple(shown.get("column_weights", {}).values()),
               tuple(shown.get("partition_by", [])), result.decision.split(":")[0])  # fmt: skip
        if key != self._shown:
            self._shown = key
            if shown:
                log.warning("layout loop: recommended clustering columns %s%s, predicted files read per captured scan "
                            "%.1f -> %.1f (%.0f%% fewer, %d scans); %s",
                            ", ".join(shown["clustering_columns"]),
                            f" partitioned by {', '.join(shown['partition_by'])}" if shown["partition_by"] else "",
                            (result.current or {}).get("files_read_per_scan", 0.0), shown["files_read_per_scan"],
                            100 * result.gain, result.scans, result.decision)  # fmt: skip
            else:
                log.info("layout loop: no recommendation: %s", result.decision)
        try:
            self.store.write_recommendation(result.as_dict())
        except OSError as e:
            log.warning("layout loop: could not write %s/recommendation.json: %s", self.store.files.folder, e)
