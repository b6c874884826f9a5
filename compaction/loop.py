"""``lakecluster compact``: plan, rewrite and commit groups, forever or once.

A stop request (SIGTERM, Ctrl-C) lets the group in flight finish and commit, then exits; a group
that cannot commit is abandoned and its output files deleted. Leftovers of a compactor that died
(``part-g*`` files no commit references, older than ``compaction.orphan_min_age_s``) are deleted
at the start of every round.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from dataclasses import dataclass

import pyarrow as pa
from pyspark.sql import SparkSession

from lakecluster import metrics
from lakecluster.compaction.commit import commit_rewrite, delete_files
from lakecluster.compaction.planner import Group, Plan, clustering_depth, plan, snapshot_files
from lakecluster.compaction.rewrite import RewriteSpec, rewrite
from lakecluster.config import Config
from lakecluster.errors import CompactionConflictError, LakeclusterError, NoBoundariesError
from lakecluster.faults import crash_point
from lakecluster.index.ranges import clustering_ranges
from lakecluster.index.spec import IndexSpec
from lakecluster.index.sync import sync as sync_index
from lakecluster.layout import ClusteringLayout
from lakecluster.schema import arrow_schema
from lakecluster.sketch_store import SketchStore
from lakecluster.sketches import BoundarySketches
from lakecluster.spark import get_session
from lakecluster.table import TableSpec, open_or_create, remove_orphans

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class GroupResult:
    group: Group
    result: str  # committed | conflict
    files_out: int
    bytes_out: int
    seconds: float
    version: int | None
    scanned_before: float
    scanned_after: float
    message: str = ""


class Compactor:
    def __init__(self, config: Config, *, spark: SparkSession | None = None) -> None:
        self.config = config
        t = config.table
        self.spec = TableSpec(t.path, arrow_schema(t.columns), tuple(t.partition_by))
        self.table = open_or_create(self.spec)
        self.store = SketchStore(t.path)
        self.index_spec = IndexSpec.from_config(config)
        self._spark = spark
        self._stop = threading.Event()

    @property
    def spark(self) -> SparkSession:
        if self._spark is None:
            self._spark = get_session(self.config.spark)
        return self._spark

    def request_stop(self) -> None:
        self._stop.set()

    @property
    def stopping(self) -> bool:
        return self._stop.is_set()

    def sketches(self) -> BoundarySketches:
        latest = self.store.latest()
        cols = self.config.table.clustering_columns
        if latest is None or any(latest.sketches.get(c) is None or latest.sketches[c].n == 0 for c in cols):
            raise NoBoundariesError(
                f"no boundary sketches for {', '.join(cols)} under {self.store.directory}; the stream writes them "
                "with every micro-batch (run `lakecluster stream` first)"
            )
        return latest

    def plan(self) -> Plan:
        self.table.update_incremental()
        return plan(self.table, self.spec.partition_by, self.config.compaction)

    def clean_leftovers(self) -> list[str]:
        removed = remove_orphans(self.table, self.spec.uri, name_prefix="g",
                                 min_age_s=self.config.compaction.orphan_min_age_s)  # fmt: skip
        if removed:
            log.info("deleted %d leftover file(s) of abandoned rewrites", len(removed))
            metrics.COMPACTION_LEFTOVERS.inc(len(removed))
        return removed

    def sync_index(self) -> None:
        """Bring the column-stats index up to date; a failure is logged, never fails compaction
        (the index can always be rebuilt from the log)."""
        idx = self.config.index
        if not (idx.enabled and idx.sync_after_compaction):
            return
        try:
            sync_index(self.index_spec)
        except Exception:
            log.warning("column-stats index sync failed (it is rebuilt on the next sync)", exc_info=True)

    def ranges(self) -> pa.Table:
        """path, min.<c>, max.<c> per live file of the clustering columns: from the index when it
        is at the table's version (reads only those columns), else from the Delta log."""
        if self.config.index.enabled:
            try:
                found = clustering_ranges(self.index_spec, self.config.table.clustering_columns, self.table.version())
                if found is not None:
                    return found
            except (LakeclusterError, OSError) as e:
                log.info("reading ranges from the Delta log: index unusable (%s)", e)
        return snapshot_files(self.table, self.spec.partition_by)[1]

    def run_once(self) -> list[GroupResult]:
        metrics.COMPACTION_RUNS.inc()
        self.clean_leftovers()
        self.table.update_incremental()
        self.sync_index()
        the_plan = self.plan()
        metrics.PENDING_GROUPS.set(len(the_plan.groups))
        sketches = self.sketches() if the_plan.groups else None
        results = []
        for group in the_plan.groups:
            if self.stopping:
                break
            assert sketches is not None
            results.append(self.compact_group(group, sketches))
        self.observe_table(sketches)
        return results

    def compact_group(self, group: Group, sketches: BoundarySketches) -> GroupResult:
        cfg = self.config.compaction
        started = time.monotonic()
        n_out = group.expected_files(cfg.target_file_bytes)
        layout = ClusteringLayout.build(
            sketches, self.config.table.clustering_columns, curve=cfg.curve, target_cells=n_out,
            k=self.config.sketches.boundaries, weights=cfg.weights(),
        )  # fmt: skip
        run_id = uuid.uuid4().hex[:12]
        spec = RewriteSpec(self.spec.uri, self.config.table.columns, self.spec.partition_by, layout,
                           target_rows=max(1, -(-group.rows // n_out)),
                           file_prefix=f"g{group.generation:02d}-{run_id}")  # fmt: skip
        written = rewrite(self.spark, group, spec)
        crash_point("compaction_before_commit")
        self.table.update_incremental()
        before = self._scanned(self.ranges(), [f.path for f in group.files], sketches)
        meta = {
            "lakecluster.operation": "compaction", "lakecluster.curve": cfg.curve,
            "lakecluster.columns": ",".join(layout.columns), "lakecluster.levels": ",".join(map(str, layout.levels)),
            "lakecluster.boundary_version": str(sketches.delta_version),
            "lakecluster.generation": str(group.generation),
            "lakecluster.run": run_id, "lakecluster.reason": group.reason,
        }  # fmt: skip
        try:
            version = commit_rewrite(self.table, self.spec, group, written, metadata=meta, attempts=cfg.commit_attempts)
        except CompactionConflictError as e:
            delete_files(self.spec.uri, written)
            metrics.COMPACTION_GROUPS.labels("conflict").inc()
            log.warning("group in %s abandoned: %s", dict(group.partition), e)
            return GroupResult(group, "conflict", 0, 0, time.monotonic() - started, None, before, before, str(e))
        self.sync_index()
        after = self._scanned(self.ranges(), [f.path for f in written], sketches)
        seconds = time.monotonic() - started
        bytes_out = sum(f.size for f in written)
        metrics.COMPACTION_GROUPS.labels("committed").inc()
        metrics.COMPACTION_FILES_IN.inc(len(group.files))
        metrics.COMPACTION_FILES_OUT.inc(len(written))
        metrics.COMPACTION_BYTES_IN.inc(group.bytes)
        metrics.COMPACTION_BYTES_OUT.inc(bytes_out)
        metrics.COMPACTION_GROUP_SECONDS.observe(seconds)
        log.info(
            "compacted %s: %d files (%.1f MB) -> %d files (%.1f MB) in %.1fs, generation %d, levels %s; "
            "files a point query reads here: %.1f -> %.1f (version %d; %s)",
            dict(group.partition) or "table", len(group.files), group.bytes / 1e6, len(written), bytes_out / 1e6,
            seconds, group.generation, layout.levels, before, after, version, group.reason,
        )  # fmt: skip
        return GroupResult(group, "committed", len(written), bytes_out, seconds, version, before, after)

    def _scanned(self, actions, paths: list[str], sketches: BoundarySketches) -> float:  # type: ignore[no-untyped-def]
        cols = self.config.table.clustering_columns
        k = self.config.sketches.boundaries
        return sum(clustering_depth(actions, paths, sketches, c, k) for c in cols) / len(cols)

    def observe_table(self, sketches: BoundarySketches | None) -> None:
        files, _ = snapshot_files(self.table, self.spec.partition_by)
        metrics.TABLE_VERSION.set(self.table.version())
        metrics.TABLE_FILES.set(len(files))
        metrics.TABLE_BYTES.set(sum(f.size for f in files))
        if sketches is None:
            try:
                sketches = self.sketches()
            except NoBoundariesError:
                return
        paths = [f.path for f in files]
        ranges = self.ranges()
        for c in self.config.table.clustering_columns:
            metrics.FILES_SCANNED.labels(c).set(clustering_depth(ranges, paths, sketches, c,
                                                                 self.config.sketches.boundaries))  # fmt: skip

    def run_forever(self) -> None:
        interval = self.config.compaction.interval_s
        while not self.stopping:
            try:
                self.run_once()
            except NoBoundariesError as e:
                log.info("waiting: %s", e)
            if self._stop.wait(interval):
                break


def describe_plan(the_plan: Plan, target_file_bytes: int) -> str:
    lines = [f"table version {the_plan.table_version}: {the_plan.files_total} files, "
             f"{the_plan.bytes_total / 1e6:.1f} MB; {len(the_plan.groups)} group(s) to rewrite"]  # fmt: skip
    for i, g in enumerate(the_plan.groups, 1):
        lines.append(
            f"  {i}. partition {dict(g.partition) or '-'}: {len(g.files)} files, {g.bytes / 1e6:.1f} MB, "
            f"{g.rows} rows -> ~{g.expected_files(target_file_bytes)} file(s) of generation {g.generation}; "
            f"why: {g.reason}"
        )
    return "\n".join(lines)
