"""``lakecluster compact``: plan, rewrite and commit groups, forever or once; vacuum on a schedule.

Each round syncs the column-stats index, plans groups (``planner``), and for each group re-reads
the table (a group whose inputs another compactor already rewrote is dropped before any work),
rewrites it with Spark (``rewrite``) and commits it through Delta (``commit``). Transient faults
are retried with capped backoff; a fault retrying cannot fix stops the loop with
:class:`FatalServiceError`. A stop request lets the group in flight finish for up to
``compaction.stop_timeout_s``, then cancels its Spark jobs: an abandoned rewrite commits nothing,
and its output files, referenced by no table version, are deleted by vacuum after the retention
period. A vacuum in flight is cancelled at once. Besides, with each vacuum, it deletes the workload
capture files past their retention or size bound (``lakecluster.workload.expire``, inside
``_lakecluster/workload/`` only). Nothing else in the compactor deletes files.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import threading
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import SparkSession

from lakecluster import metrics, progress
from lakecluster.clustering import ClusteringLayout, clustering_depth
from lakecluster.compaction.commit import commit_rewrite
from lakecluster.compaction.erasure import Erasure, ForgetPass, expire_quarantine
from lakecluster.compaction.monitor import TableMonitor
from lakecluster.compaction.planner import Group, Plan, plan_live
from lakecluster.compaction.relayout import first_group_bytes, still_pending, with_relayout, within_budget
from lakecluster.compaction.reload import ThresholdReloader
from lakecluster.compaction.rewrite import RewriteSpec, rewrite
from lakecluster.compaction.rewrite_local import RewriteStopped, rewrite_local
from lakecluster.compaction.rewrite_tasks import rewrite_in_tasks
from lakecluster.compaction.table_sketches import build_missing, lacking, table_parents
from lakecluster.compaction.vacuum import vacuum_all
from lakecluster.config import Config
from lakecluster.errors import (
    CompactionConflictError,
    FatalServiceError,
    NoBoundariesError,
    TableError,
    TableNotFoundError,
    UnsupportedTableError,
)
from lakecluster.faults import crash_point, pause_point
from lakecluster.health import HEALTH
from lakecluster.hierarchy import Parent
from lakecluster.index.sync import rebuild as rebuild_index
from lakecluster.index.sync import sync as sync_index
from lakecluster.layout.adoptions import AdoptionStore
from lakecluster.layout.auto_layout import AutoLayout, capped, fingerprint_of, pending
from lakecluster.parquet_files import WrittenFile
from lakecluster.retry import FAULT_KINDS, Backoff, classify, first_line
from lakecluster.sizes import human_bytes
from lakecluster.sketches import BoundarySketches
from lakecluster.spark import get_session
from lakecluster.stats_columns import WithoutStatsWarning, stats_columns
from lakecluster.table import Adoption, LakeTable, TableLayout
from lakecluster.table.deletion_vectors import file_keys
from lakecluster.table.delta_schema import DeltaSchema
from lakecluster.table.file_rows import RowTracking
from lakecluster.table.layout_record import clusters_data_columns
from lakecluster.table.live_files import off_layout
from lakecluster.table.snapshot import physical_names
from lakecluster.workload import expire

log = logging.getLogger(__name__)

# Writer features a rewrite keeps as they are: it changes no row (the same values, in other
# files: constraints, generated and identity columns hold), writes dataChange=false (no change
# data), purges deletion vectors, and commits through Delta's own transaction (in-commit
# timestamps, checkpoints), moves each row's id with it under row tracking, and leaves the
# domain metadata of Delta's own clustering as it is. Iceberg compatibility (its own file rules)
# and any feature newer than this list are not kept.
REWRITE_FEATURES = frozenset({
    "appendOnly", "invariants", "checkConstraints", "changeDataFeed", "generatedColumns", "allowColumnDefaults",
    "identityColumns", "columnMapping", "deletionVectors", "domainMetadata", "v2Checkpoint", "vacuumProtocolCheck",
    "timestampNtz", "typeWidening", "typeWidening-preview", "inCommitTimestamp", "checkpointProtection",
    "rowTracking",  # each row's id and commit version written into the new files (RowTracking)
    "clustering",  # Delta's own clustering: kept when the configured columns are the table's
})  # fmt: skip
ROW_ID_COLUMN = "delta.rowTracking.materializedRowIdColumnName"
ROW_VERSION_COLUMN = "delta.rowTracking.materializedRowCommitVersionColumnName"


@dataclass(frozen=True)
class GroupResult:
    group: Group
    result: str  # committed | conflict | skipped | abandoned
    files_out: int
    bytes_out: int
    seconds: float
    version: int | None
    scanned_before: float
    scanned_after: float
    message: str = ""

    def describe(self) -> str:
        if self.result != "committed":
            return f"{self.result}: {len(self.group.files)} files" + (f" ({self.message})" if self.message else "")
        return (f"committed: {len(self.group.files)} files ({human_bytes(self.group.bytes)}) -> {self.files_out} "
                f"in {self.seconds:.1f}s, point-query files {self.scanned_before:.1f} -> {self.scanned_after:.1f}")


class _Stopped(Exception):
    """The rewrite in flight was cancelled by a stop request."""


HEALTH_NAME = "compactor"
PARENTS_REFRESH_S = 3600.0  # how long the parents found in a sample of the table are used
GROUP_RESULTS = ("committed", "conflict", "skipped", "abandoned", "failed")  # lakecluster_compaction_groups_total


SparkRewrite = Callable[[SparkSession, Group, RewriteSpec], list[WrittenFile]]


def _pyarrow_error(error: Exception) -> str | None:
    """Why pyarrow could not read or convert the files, when that is why a rewrite failed (in a
    Spark task, the task's Python error is a line of the message); None for any other failure."""
    if isinstance(error, pa.ArrowException):
        return first_line(str(error))
    return next((line.strip() for line in str(error).splitlines() if "pyarrow.lib.Arrow" in line), None)


def thresholds(config: Config) -> dict[str, str]:
    """The compaction settings a user tunes, as the labels of ``lakecluster_compaction_thresholds_info``."""
    c = config.compaction
    return {"target_file_bytes": str(c.target_file_bytes), "min_file_bytes": str(c.min_file_bytes),
            "max_group_bytes": str(c.max_group_bytes), "merge_fanout": str(c.merge_fanout),
            "max_generation": str(c.max_generation), "max_groups_per_run": str(c.max_groups_per_run),
            "min_input_files": str(c.min_input_files), "main_run_merge_ratio": f"{c.main_run_merge_ratio:g}",
            "curve": c.curve, "interval_s": f"{c.interval_s:g}"}  # fmt: skip


class Compactor:
    """The compaction service of one table: rounds of plan, rewrite and commit, vacuum on a schedule."""

    def __init__(self, config: Config, *, table: LakeTable | None = None, spark: SparkSession | None = None,
                 scope: Callable[[], Sequence[str]] | None = None, full: bool = False) -> None:  # fmt: skip
        """A compactor of ``config``'s table.

        Args:
            config: the validated configuration (its ``compaction`` and ``vacuum`` sections may be
                reloaded later, see ``reload.py``).
            table: the table's handle (default: one built from ``config``).
            spark: a session whose SparkContext the compactor shares (default: its own, started on
                first use).
            scope: called at every planning, the paths of the files that may be rewritten (``compact
                --where``: the files whose partition values and stats can match the predicate);
                None: every file.
            full: re-cluster every file not clustered under the current layout (``compact --full``,
                ``relayout.py``); :meth:`run_forever` then ends when none is left.

        Raises:
            TableNotFoundError: there is no table (the compactor never creates one).
        """
        self.base_config = config  # as loaded (and reloaded); ``config`` is it with the adopted layout applied
        self.config = config
        self.table = table = table or LakeTable(config)
        if not table.delta.exists():  # read-only: a missing table is an error, never created here
            raise TableNotFoundError(table.uri)
        grouping = functools.partial(first_group_bytes, partition_by=table.config.table.partition_by)
        self.auto = AutoLayout(table, grouping, store=AdoptionStore(table, spark=lambda: self.spark))
        self.adoption: Adoption | None = None  # the adopted layout in effect (compaction.auto_layout = apply)
        self._relayout_left = (0, 0)  # files, bytes the layout loop has left to re-cluster (as last planned)
        self._refused: str | None = None  # an adoption this configuration cannot take (logged once)
        self.spec = table.spec
        self.live = table.live_files()
        self._without_stats = WithoutStatsWarning(table.uri, config.skipping_columns)
        self.store = table.sketches()
        index_rebuild = (lambda: rebuild_index(self.table, "rows were deleted: stale bounds dropped")) \
            if config.index.enabled else None  # fmt: skip
        self.erasure = Erasure(config, table, index_rebuild)
        self.scope = scope
        self.full = full
        self._pending: pa.Array | None = None  # --full: the files off the layout when the pass started
        # (when found, for which clustering columns, what) for the layout
        self._parents: tuple[float, tuple[str, ...], dict[str, Parent]] | None = None
        self._shared_spark = spark
        self._spark: SparkSession | None = None
        self._stop = threading.Event()
        self._wake = threading.Event()  # ends the wait between rounds early: a stop or a reload
        self.reloader: ThresholdReloader | None = None
        self.on_progress: Callable[[str], None] | None = None  # a line per round with work, and per group
        self._busy = threading.Event()
        self._job_group: str | None = None
        self._cancelled = threading.Event()  # the stop timeout passed mid-rewrite: abandon it, whatever Spark did
        self.last_vacuum: float | None = None  # the first round vacuums
        self._vacuum_group: str | None = None  # the Spark job group of the vacuum in flight
        # Vacuum only once this says yes: ``run`` holds it until the stream has started for real.
        self.vacuum_allowed: Callable[[], bool] = lambda: True
        self.monitor = TableMonitor(config, table)
        HEALTH.register(HEALTH_NAME)
        metrics.COMPACTION_THRESHOLDS.info(thresholds(config))
        # Every labelled series exists from the start, so rates and sums over them work at 0.
        for result in GROUP_RESULTS:
            metrics.COMPACTION_GROUPS.labels(result)
        for kind in FAULT_KINDS:
            metrics.SERVICE_FAILURES.labels(HEALTH_NAME, kind)
        metrics.SERVICE_RESTARTS.labels(HEALTH_NAME)
        self.follow_adoption()  # a layout adopted before this start is in effect from the first round

    @property
    def spark(self) -> SparkSession:
        """The compactor's own session (shares the SparkContext of ``lakecluster run``): its SQL
        settings (a commit's userMetadata, vacuum's retention check) never reach the stream's."""
        if self._spark is None:
            base = self._shared_spark or get_session(self.config.spark, self.config.storage, s3=self.table.uses_s3)
            self._spark = base.newSession()
        return self._spark

    # -- stopping -------------------------------------------------------------------------

    def request_stop(self) -> None:
        """Stop after the group in flight, or cancel it after ``compaction.stop_timeout_s``; a
        vacuum in flight is cancelled at once (what it has not deleted yet, the next one will)."""
        self._stop.set()
        self._wake.set()
        if self._vacuum_group is not None:
            log.warning("stop: cancelling the vacuum in flight")
        threading.Thread(target=self._cancel_vacuum, daemon=True, name="lakecluster-vacuum-stop").start()
        threading.Thread(target=self._cancel_after_timeout, daemon=True, name="lakecluster-compact-stop").start()

    def _cancel_after_timeout(self) -> None:
        time.sleep(self.config.compaction.stop_timeout_s)
        # Set whatever the compactor does now (a rewrite, or the planning of one): the rewrite
        # checks it before it starts, when it returns and before the commit, and abandons the
        # group; its files, if any, are orphaned (vacuum's). Set before cancelling: a job
        # submitted after cancelJobGroup is not cancelled.
        self._cancelled.set()
        group = self._job_group
        if self._busy.is_set():
            log.warning("stop: cancelling the rewrite in flight (nothing of it is committed)")
        if group is not None and self._spark is not None:
            self._spark.sparkContext.cancelJobGroup(group)

    def _cancel_vacuum(self) -> None:
        """Cancel the vacuum's Spark jobs until it ends: cancelJobGroup reaches only the jobs running
        at that moment, and Delta's VACUUM runs many, one after another."""
        while (group := self._vacuum_group) is not None and self._spark is not None:
            self._spark.sparkContext.cancelJobGroup(group)
            time.sleep(0.2)

    @property
    def stopping(self) -> bool:
        return self._stop.is_set()

    def request_reload(self) -> None:
        """Re-read the configuration before the next round, starting it now if idle (SIGHUP)."""
        if self.reloader is not None:
            self.reloader.request()
            self._wake.set()

    def _maybe_reload(self) -> None:
        if self.reloader is None or not self.reloader.due():
            return
        self.base_config = self.reloader.reload(self.base_config)
        self.follow_adoption()
        self._apply_layout()
        metrics.COMPACTION_THRESHOLDS.info(thresholds(self.config))

    # -- the layout loop (auto_layout.py) ---------------------------------------------------

    def follow_adoption(self) -> None:
        """Take the table's layout in effect (``LakeTable.layout``): the newest adopted one, another
        compactor's too, when ``auto_layout = apply``; the configured one otherwise. An adoption
        only its file has (an earlier version adopted it) is recorded in the log first."""
        base = self.base_config
        if base.compaction.auto_layout == "apply":
            self.auto.store.record_pending()
            latest = self.table.adoption()[0]
            if latest is not None and not clusters_data_columns(base, latest) and self._refused != latest.id:
                self._refused = latest.id
                log.warning("layout loop: adopted layout %d clusters by %s, which are not data columns of the table as "
                            "configured; the configured layout stays in effect", latest.number,
                            ", ".join(latest.clustering_columns))  # fmt: skip
        layout = self.table.layout(base)
        adopted = layout.adoption
        metrics.AUTO_LAYOUT_ADOPTION.set(adopted.number if adopted is not None else 0)
        if (adopted.id if adopted else None) == (self.adoption.id if self.adoption else None):
            return
        self.adoption = adopted
        if adopted is not None:
            log.info("layout loop: clustering by adopted layout %d: %s (weights %s)", adopted.number,
                     ", ".join(adopted.clustering_columns), ", ".join(f"{w:g}" for w in adopted.weights))  # fmt: skip
        self._apply_layout(layout)

    def _apply_layout(self, layout: TableLayout | None = None) -> None:
        """``config`` = the loaded one with the layout in effect (default: the table's now; the
        table's live files keep its columns' min and max: ``LakeTable.layout``)."""
        config = (layout or self.table.layout(self.base_config)).applied_to(self.base_config)
        if config.skipping_columns != self.config.skipping_columns:
            self._without_stats = WithoutStatsWarning(self.table.uri, config.skipping_columns)
        if fingerprint_of(config) != fingerprint_of(self.config):
            self._pending = None  # a --full pass re-clusters to the new layout from the files off it now
        self.config = self.monitor.config = config

    def layout_loop(self) -> None:
        """Between rounds: score layouts on the captured workload when due (``auto_layout.py``). A
        failure is logged: the layout loop is never worth a round."""
        if self.full or self.stopping or not self.auto.due(self.config):
            return
        try:
            version, files = self.live.snapshot()
            result = self.auto.evaluate(self.config, self.adoption, files, version)
        except Exception as e:
            log.warning("layout loop: scoring layouts on the captured workload failed (compaction goes on): %s",
                        first_line(f"{type(e).__name__}: {e}"))  # fmt: skip
            return
        if result.adopted is not None or "following it" in result.decision:
            self.follow_adoption()

    def _auto_relayout(self, the_plan: Plan, files: pa.Table) -> Plan:
        """The round's plan with groups re-clustering the files left on another layout in front, the
        files the captured workload reads most first, as many as the budget's window allows."""
        assert self.adoption is not None
        todo = pending(files, self.fingerprint)
        if not len(todo):
            self._relayout_left = (0, 0)
            metrics.RELAYOUT_PENDING_FILES.set(0)
            metrics.RELAYOUT_PENDING_BYTES.set(0)
            self.auto.note_budget(False, 0, 0)
            return the_plan
        budget = self.auto.budget(self.config, files, the_plan.table_version)
        cfg = capped(self.config, budget["limit"])
        relaid = with_relayout(the_plan, files, todo, self.fingerprint, self.spec.partition_by, cfg,
                               priority=self.auto.priority, why=f"layout adoption {self.adoption.number}")  # fmt: skip
        self._relayout_left = (relaid.relayout_files, relaid.relayout_bytes)
        metrics.RELAYOUT_PENDING_FILES.set(relaid.relayout_files)
        metrics.RELAYOUT_PENDING_BYTES.set(relaid.relayout_bytes)
        groups, cut = within_budget(relaid.groups, budget["left"])
        self.auto.note_budget(cut and not any(g.relayout for g in groups), budget["limit"], budget["used"],
                              self.config.compaction.rewrite_budget_window_s)  # fmt: skip
        return dataclasses.replace(relaid, groups=groups)

    # -- inputs ---------------------------------------------------------------------------

    @property
    def fingerprint(self) -> str:
        """The current layout's fingerprint (columns, weights, curve, parents on or off), as rewritten
        files carry it."""
        return fingerprint_of(self.config)

    def sketches(self) -> BoundarySketches:
        """The boundary sketches of the clustering columns; those the stream never sketched (after a
        layout change, or on a table another writer filled) are built from the table first, once
        (``table_sketches.py``)."""
        cols = self.config.table.clustering_columns
        version, files = self.live.snapshot()
        physical = physical_names(self.live.metadata)  # a column renamed since keeps its sketch
        latest = self.store.latest(physical)
        missing = lacking(latest, cols, files)
        if missing:
            build_missing(self.config, self.table, files, version, [self.config.table.column(c) for c in missing],
                          physical=physical)  # fmt: skip
            latest = self.store.latest(physical)
        # A column that is null in every row has an empty sketch but counts its nulls: it ranks
        # every row 0, and compaction goes on with the other columns.
        if latest is None or any(c not in latest.sketches for c in cols) or all(
            latest.sketches[c].n + latest.sketches[c].nulls + latest.sketches[c].nans == 0 for c in cols
        ):
            raise NoBoundariesError(
                f"no boundary sketches for {', '.join(cols)} under {self.store.directory}; the stream writes them "
                "with every micro-batch (run `lakecluster stream` first)"
            )
        return latest

    def plan(self) -> Plan:
        """This round's groups: the planner's, within the scope; with ``full``, the files still off
        the current layout in front of them."""
        version, files = self.in_scope()
        cfg = self.config.compaction
        if self.scope is not None:  # only some files of a partition: merging them would split its main run
            cfg = dataclasses.replace(cfg, main_run_merge_ratio=0.0)
        the_plan = plan_live(files, version, self.spec.partition_by, cfg)
        if not self.full:
            if self.adoption is not None and self.config.compaction.auto_layout == "apply":
                return self._auto_relayout(the_plan, files)
            return the_plan
        return with_relayout(the_plan, files, self._pass(files), self.fingerprint, self.spec.partition_by,
                             self.config.compaction)  # fmt: skip

    def in_scope(self) -> tuple[int, pa.Table]:
        """(latest version, the live files the scope lets this compactor rewrite)."""
        version, files = self.live.snapshot()
        if self.scope is not None:
            files = files.filter(pc.is_in(files["path"], value_set=pa.array(list(self.scope()), pa.string())))
        return version, files

    def _pass(self, files: pa.Table) -> pa.Array:
        """``--full``: the files off the current layout when the pass started (taken from ``files``
        the first time)."""
        if self._pending is None:
            self._pending = off_layout(files, self.fingerprint)
        return self._pending

    def relayout_left(self) -> tuple[int, int]:
        """``--full``: (files, bytes) of the pass still off the current layout."""
        _, files = self.in_scope()
        left = still_pending(files, self._pass(files), self.fingerprint)
        return left.num_rows, int(pc.sum(left["size"]).as_py() or 0)

    def sync_index(self) -> None:
        """Bring the column-stats index up to date; a failure is logged, never fails compaction
        (the index can always be rebuilt from the log)."""
        idx = self.config.index
        if not (idx.enabled and idx.sync_after_compaction):
            return
        try:
            with progress.phase("syncing the column-stats index", announce=False):
                sync_index(self.table)
        except Exception:
            log.warning("column-stats index sync failed (it is rebuilt on the next sync)", exc_info=True)

    def ranges(self) -> pa.Table:
        """path, min.<c>, max.<c> of the clustering columns per live file, at the latest version."""
        return self.live.snapshot()[1]

    # -- one round --------------------------------------------------------------------------

    def run_once(self) -> list[GroupResult]:
        """One round: sync the index, plan, and rewrite and commit each planned group.

        Returns:
            What became of each group (committed, conflict, skipped, abandoned).

        Raises:
            NoBoundariesError: there are groups but no boundary sketches yet.
            LakeclusterError: a fault of storage, Spark or the commit (the service retries).
        """
        metrics.COMPACTION_RUNS.inc()
        self.follow_adoption()  # one another compactor adopted since the last round
        self.sync_index()
        self.live.refresh()
        self.table_schema()  # a table the rewrites cannot keep as it is is refused before any work
        self.row_tracking()
        the_plan = self.plan()
        metrics.PENDING_GROUPS.set(len(the_plan.groups))
        metrics.PENDING_BYTES.set(sum(g.bytes for g in the_plan.groups))
        metrics.COMPACTION_GROUPS_PLANNED.inc(len(the_plan.groups))
        sketches = self.sketches() if the_plan.groups else None
        results = []
        total = len(the_plan.groups)
        left_bytes = sum(g.bytes for g in the_plan.groups)
        if total:
            self._progress(f"compaction: version {the_plan.table_version}, {total} group(s), "
                           f"{human_bytes(left_bytes)} to rewrite")  # fmt: skip
        for done, group in enumerate(the_plan.groups, start=1):
            if self.stopping:
                break
            assert sketches is not None
            try:
                with progress.phase(f"compaction: group {done}/{total} ({len(group.files)} files, "
                                    f"{human_bytes(group.bytes)})", announce=False):  # fmt: skip
                    result = self.compact_group(group, sketches)
            except Exception:
                metrics.COMPACTION_GROUPS.labels("failed").inc()
                raise
            results.append(result)
            left_bytes -= group.bytes
            self._progress(f"compaction: group {done}/{total} {result.describe()}; "
                           f"left {total - done} group(s), {human_bytes(left_bytes)}")  # fmt: skip
        if not self.stopping:
            self.forget_deleted_rows()
        self.monitor.observe()
        metrics.COMPACTION_LAST_SUCCESS.set(time.time())
        return results

    def forget_deleted_rows(self) -> ForgetPass | None:
        """After another writer deleted rows: the sketches and the index rebuilt from the live
        data, at most every ``compaction.forget_interval_s`` (compaction/erasure.py)."""
        self.erasure.verify()
        self.erasure.watch()
        if not self.erasure.due():
            return None
        version, files = self.live.snapshot()
        return self.erasure.forget(files, version)

    def _progress(self, line: str) -> None:
        if self.on_progress is not None:
            self.on_progress(line)

    def _inputs_live(self, group: Group) -> bool:
        return not self._gone_since(-1, [f.key for f in group.files])

    def _gone_since(self, version: int, keys: Sequence[str]) -> list[str]:
        """Which file ``keys`` (``DataFile.key``: path and deletion vector) are not live at the
        latest version (which is at least ``version``)."""
        latest, files = self.live.snapshot()
        if latest < version:
            raise TableError(f"the log of {self.table.uri} is at version {latest}, behind {version}")
        wanted = pa.array(list(keys), pa.string())
        live = pc.is_in(wanted, value_set=file_keys(files["path"], files["deletion_vector"]))
        return [k for k, ok in zip(keys, live.to_numpy(zero_copy_only=False), strict=True) if not ok]

    def _stats_columns(self, schema: DeltaSchema) -> tuple[str, ...]:
        """The columns rewritten files carry stats for, as the table's properties choose them now
        (by physical name)."""
        data_columns = [c.name for c in schema.columns if c.name not in schema.partition_by]
        configuration = self.live.configuration
        self._without_stats.check(data_columns, configuration)
        return tuple(schema.physical(c) for c in stats_columns(data_columns, configuration))

    def table_schema(self) -> DeltaSchema:
        """The table's schema as the live files last read it: what groups are rewritten in.

        Raises:
            UnsupportedTableError: the table is partitioned otherwise than configured, lacks a
                clustering column, maps columns by id, or has a column type lakecluster does not
                rewrite.
        """
        meta = self.live.metadata
        schema = DeltaSchema.of(meta.schema_string, meta.partition_columns, meta.configuration)
        t = self.config.table
        if tuple(schema.partition_by) != tuple(t.partition_by):
            raise UnsupportedTableError(f"{self.table.uri} is partitioned by {list(schema.partition_by)}, the "
                                        f"configuration says {list(t.partition_by)}: set table.partition_by")
        clustered = meta.clustering_columns()
        if clustered is not None and set(clustered) != set(t.clustering_columns):
            raise UnsupportedTableError(
                f"{self.table.uri} is clustered by Delta on {', '.join(clustered)} (CLUSTER BY), "
                f"table.clustering_columns says {', '.join(t.clustering_columns)}: set it to the table's columns, or "
                "leave it unset to take them")  # fmt: skip
        if missing := [c for c in t.clustering_columns if c not in schema.names]:
            raise UnsupportedTableError(f"clustering column {missing[0]} is not a column of {self.table.uri} "
                                        f"(renamed or dropped?); its columns: {', '.join(schema.names)}; "
                                        "set table.clustering_columns")  # fmt: skip
        if schema.mapping == "id":
            raise UnsupportedTableError(f"{self.table.uri} maps columns by id (delta.columnMapping.mode = id), "
                                        "which the compactor does not rewrite; use mode 'name'")  # fmt: skip
        if unhandled := sorted(meta.writer_features - REWRITE_FEATURES):
            raise UnsupportedTableError(
                f"{self.table.uri} uses the Delta writer feature(s) {', '.join(unhandled)}, which the compactor's "
                "rewrites do not keep; `lakecluster compact` refuses the table (the stream, status, explain and "
                "vacuum still work on it)")  # fmt: skip
        return schema

    def row_tracking(self) -> RowTracking | None:
        """Where the rewrites keep each row's id and commit version (None: the table tracks none).

        Raises:
            UnsupportedTableError: the table supports row tracking but names no columns for them.
        """
        meta = self.live.metadata
        if "rowTracking" not in meta.writer_features:
            return None
        names = meta.configuration.get(ROW_ID_COLUMN), meta.configuration.get(ROW_VERSION_COLUMN)
        if names[0] is None or names[1] is None:
            raise UnsupportedTableError(f"{self.table.uri} supports row tracking but its properties name no "
                                        f"materialized columns ({ROW_ID_COLUMN}): a rewrite could not keep its rows' "
                                        "ids; enable row tracking (delta.enableRowTracking = true) first")  # fmt: skip
        return RowTracking(names[0], names[1])

    def parents(self) -> dict[str, Parent]:
        """The parents of the string clustering columns (``lakecluster.hierarchy``), found in rows
        spread over the table's files (``table_sketches.spread_rows``) among the columns rewritten
        files carry stats for; found again after ``PARENTS_REFRESH_S`` or when the clustering
        columns change. None when ``compaction.group_by_parents`` is off; none, with a warning,
        when the sample cannot be read (the layout goes on without)."""
        if not self.config.compaction.group_by_parents:
            return {}
        now = time.monotonic()
        columns = self.config.table.clustering_columns  # an adopted layout changes them
        if self._parents is not None and now - self._parents[0] < PARENTS_REFRESH_S and self._parents[1] == columns:
            return self._parents[2]
        found: dict[str, Parent] = {}
        try:
            version, live = self.live.snapshot()
            found = table_parents(self.config, self.table, live, version, self.live.configuration)
        except (OSError, pa.ArrowException) as e:
            log.warning("no parent columns for the layout this time: the table's sample could not be read: %s", e)
        if found:
            log.info("layout: %s", ", ".join(f"{c} also cut by its parent {p.parent}" for c, p in found.items()))
        self._parents = (now, columns, found)
        return found

    def compacted_bytes_per_row(self, partition: Mapping[str, str | None] | None = None) -> float | None:
        """Bytes per row of the live files compaction wrote (generation 1 and up) in ``partition``,
        or in the whole table when that partition has none; None before the first: how the output
        of the next group will compress (``Group.expected_files``)."""
        _, files = self.live.snapshot()
        compacted = pc.and_(pc.greater_equal(files["generation"], 1), pc.greater(files["rows"], 0))
        if partition:
            inside = compacted
            for name, value in partition.items():
                column = files[f"partition.{name}"]
                inside = pc.and_(inside, pc.is_null(column) if value is None else pc.equal(column, value))
            if (per_row := _bytes_per_row(files, inside)) is not None:
                return per_row
        return _bytes_per_row(files, compacted)

    def compact_group(self, group: Group, sketches: BoundarySketches) -> GroupResult:
        cfg = self.config.compaction
        started = time.monotonic()
        fingerprint = self.fingerprint
        if not self._inputs_live(group):
            metrics.COMPACTION_GROUPS.labels("skipped").inc()
            return GroupResult(group, "skipped", 0, 0, 0.0, None, 0.0, 0.0,
                               "inputs already rewritten by another compactor")  # fmt: skip
        n_out = group.expected_files(cfg.target_file_bytes, self.compacted_bytes_per_row(group.partition_values))
        layout = ClusteringLayout.build(
            sketches, self.config.table.clustering_columns, curve=cfg.curve, target_cells=n_out,
            k=self.config.sketches.boundaries, weights=cfg.weights(),
            column_types=self.config.table.clustering_types(), round_cuts=cfg.round_cuts, parents=self.parents(),
        )  # fmt: skip
        run_id = uuid.uuid4().hex[:12]
        schema = self.table_schema()
        spec = RewriteSpec(self.table.uri, schema, layout, target_files=n_out,
                           file_prefix=f"g{group.generation:02d}-{run_id}-l{fingerprint}",
                           storage=self.table.storage_for_tasks(),
                           stats_columns=self._stats_columns(schema), row_tracking=self.row_tracking())  # fmt: skip
        try:
            if self._cancelled.is_set():  # the stop timeout passed while the group was planned
                raise _Stopped
            written, engine = self._rewrite(group, spec)  # each engine's path checks the flag as it returns
        except _Stopped:
            metrics.COMPACTION_GROUPS.labels("abandoned").inc()
            return GroupResult(group, "abandoned", 0, 0, time.monotonic() - started, None, 0.0, 0.0, "stopped")
        crash_point("compaction_before_commit")
        pause_point("compaction_before_commit")
        before = self._scanned(self.ranges(), [f.path for f in group.files], sketches)
        meta = {
            "operation": "compaction", "curve": cfg.curve, "columns": ",".join(layout.columns),
            "weights": ",".join(f"{cfg.weights().get(c, 1.0):g}" for c in layout.columns), "layout": fingerprint,
            "levels": ",".join(map(str, layout.levels)), "grouped_by": layout.grouped_by(),
            "boundary_version": str(sketches.delta_version),
            "generation": str(group.generation), "run": run_id, "reason": group.reason,
            "seconds": f"{time.monotonic() - started:.1f}",  # planning to commit, for `lakecluster history`
            "rewrite": engine,
        }  # fmt: skip
        if group.relayout and self.adoption is not None:  # a step of the re-clustering to an adopted layout
            meta.update(adoption=str(self.adoption.number), adoption_id=self.adoption.id,
                        relayout_files_left=str(self._relayout_left[0]),
                        relayout_bytes_left=str(self._relayout_left[1]))  # fmt: skip
        metrics.COMPACTION_COMMIT_ATTEMPTS.inc()
        try:
            result = commit_rewrite(self.spark, self.table.delta, group, written, details=meta,
                                    zorder_by=self.config.table.clustering_columns,
                                    gone_since=self._gone_since)  # fmt: skip
        except CompactionConflictError as e:
            metrics.COMPACTION_GROUPS.labels("conflict").inc()
            log.warning("group in %s abandoned: %s", dict(group.partition) or "table", e)
            return GroupResult(group, "conflict", 0, 0, time.monotonic() - started, None, before, before, str(e))
        crash_point("compaction_after_commit")
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
            "compacted %s: %d files (%s) -> %d files (%s) in %.1fs, generation %d, levels %s; "
            "files a point query reads here: %.1f -> %.1f (version %d; %s)",
            dict(group.partition) or "table", len(group.files), human_bytes(group.bytes), len(written),
            human_bytes(bytes_out), seconds, group.generation, layout.levels, before, after,
            result.version, group.reason,
        )  # fmt: skip
        return GroupResult(group, "committed", len(written), bytes_out, seconds, result.version, before, after)

    def _rewrite(self, group: Group, spec: RewriteSpec) -> tuple[list[WrittenFile], str]:
        """The group's new files and where they were written: ``local`` (this process), ``tasks``
        (pyarrow in Spark tasks) or ``spark`` (Spark's reader and shuffle, for files pyarrow cannot
        read as declared)."""
        if group.bytes <= self.config.compaction.local_rewrite_max_bytes:
            self._busy.set()
            try:
                written = rewrite_local(group, spec, stop=self._cancelled)
                if self._cancelled.is_set():
                    raise _Stopped
                return written, "local"
            except RewriteStopped:
                raise _Stopped from None
            except MemoryError as e:  # a group too big for this process: Spark's executors share it
                log.warning("rewriting the group in this process failed (%s); rewriting it with Spark tasks",
                            first_line(str(e)))
            except pa.ArrowException as e:  # files pyarrow cannot read as declared (Spark's reader may)
                log.warning("rewriting the group in this process failed (%s); rewriting it with Spark",
                            first_line(str(e)))
                return self._rewrite_with_spark(group, spec, rewrite), "spark"
            finally:
                self._busy.clear()
        try:
            return self._rewrite_with_spark(group, spec, rewrite_in_tasks), "tasks"
        except Exception as e:
            cause = _pyarrow_error(e)
            if cause is None:
                raise
            log.warning("rewriting the group in Spark tasks failed (%s); rewriting it with Spark's reader", cause)
        return self._rewrite_with_spark(group, spec, rewrite), "spark"

    def _rewrite_with_spark(self, group: Group, spec: RewriteSpec, engine: SparkRewrite) -> list[WrittenFile]:
        sc = self.spark.sparkContext
        self._job_group = f"lakecluster-compact-{uuid.uuid4().hex[:8]}"
        sc.setJobGroup(self._job_group, f"rewrite {len(group.files)} files", interruptOnCancel=True)
        self._busy.set()
        try:
            if self._cancelled.is_set():  # cancelled before the group above existed: nothing cancelled it
                raise _Stopped
            written = engine(self.spark, group, spec)
        except Exception as e:
            if self.stopping and ("cancel" in str(e).lower() or "interrupt" in str(e).lower()):
                raise _Stopped from None
            raise
        finally:
            self._busy.clear()
            self._job_group = None
            sc.setLocalProperty("spark.jobGroup.id", None)  # type: ignore[arg-type]
        if self._cancelled.is_set():
            raise _Stopped
        return written

    def _scanned(self, actions: pa.Table, paths: list[str], sketches: BoundarySketches) -> float:
        cols = self.config.table.clustering_columns
        k = self.config.sketches.boundaries
        return sum(clustering_depth(actions, paths, sketches, c, k) for c in cols) / len(cols)

    # -- the service --------------------------------------------------------------------------

    def maybe_vacuum(self) -> None:
        interval = self.config.vacuum.interval_s
        if interval <= 0 or (self.last_vacuum is not None and time.monotonic() - self.last_vacuum < interval):
            return
        if not self.vacuum_allowed() or self.stopping:
            return
        group = f"lakecluster-vacuum-{uuid.uuid4().hex[:8]}"

        def session() -> SparkSession:  # Spark is needed only for a table with a file old enough to go
            if self.stopping:  # a stop during the look for old files: no VACUUM starts
                raise _Stopped
            spark = self.spark
            spark.sparkContext.setJobGroup(group, "vacuum", interruptOnCancel=True)
            self._vacuum_group = group
            if self.stopping:  # a stop came between the check and the group: cancel what starts
                threading.Thread(target=self._cancel_vacuum, daemon=True).start()
            return spark

        try:
            expire_quarantine(session, self.table, self.config.vacuum.quarantine_retention_days)
            vacuum_all(session, self.table, self.config.vacuum)
        finally:
            if self._vacuum_group is not None:
                self._vacuum_group = None
                self.spark.sparkContext.setLocalProperty("spark.jobGroup.id", None)  # type: ignore[arg-type]
        self.expire_capture()
        self.last_vacuum = time.monotonic()  # after success: a failed vacuum is retried with the round

    def expire_capture(self) -> None:
        """Delete the workload capture files past ``workload.retention_days`` or ``workload.max_bytes``
        (docs/workload.md). A failure is logged: the capture is a side folder, never worth a round."""
        try:
            expire(self.table, self.config.workload)
        except Exception as e:
            log.warning("workload capture: expiring old capture files of %s failed: %s", self.table.uri, e)

    def run_forever(self) -> None:
        """Rounds every ``compaction.interval_s`` (and vacuum every ``vacuum.interval_s``) until stopped.

        Raises:
            FatalServiceError: a fault retrying cannot fix, or ``retry.give_up_after_s`` passed.
        """
        backoff = Backoff(self.config.retry)
        self.monitor.start()
        try:
            self._rounds(backoff)
        finally:
            self.monitor.stop()

    def _rounds(self, backoff: Backoff) -> None:
        while not self.stopping:
            self._maybe_reload()
            wait = self.config.compaction.interval_s
            try:
                self.run_once()
                self.layout_loop()
                if self.full:
                    files, size = self.relayout_left()
                    if not files:
                        log.info("compact --full: every file of the pass is clustered under the current layout")
                        return
                    self._progress(f"compaction --full: {files} file(s), {human_bytes(size)} left on other layouts")
                    wait = 0.0  # the pass goes on at once; its rounds keep their per-round limits
                # Ready once a round was planned and its work committed: a vacuum (minutes on a
                # big table) never holds readiness back.
                HEALTH.ready(HEALTH_NAME)
                if not self.full:  # a full pass is a bounded job beside the service, which vacuums
                    self.maybe_vacuum()
                if backoff.in_episode:
                    log.warning("compactor recovered after %.0fs", backoff.reset())
            except NoBoundariesError as e:
                # Waiting for the stream's first sketches is a healthy state, not a failing round.
                HEALTH.ready(HEALTH_NAME)
                metrics.COMPACTION_LAST_SUCCESS.set(time.time())
                log.info("waiting: %s", e)
            except Exception as e:
                if self.stopping:  # work cancelled by the stop, not a failure
                    log.info("stop: the round in flight was abandoned (%s)", first_line(f"{type(e).__name__}: {e}"))
                    break
                text = f"{type(e).__name__}: {e}"
                kind = classify(text)
                metrics.SERVICE_FAILURES.labels("compactor", kind).inc()
                delay = backoff.next_delay(kind)
                if delay is None:
                    HEALTH.failed(HEALTH_NAME, f"{kind} fault: {first_line(text)}")
                    raise FatalServiceError(f"the compactor stopped for good ({kind} fault): {first_line(text)}") from e
                if backoff.attempts == 1:
                    log.warning("compaction round failed (%s fault), retrying with backoff: %s", kind, first_line(text))
                else:
                    log.info("compaction retry %d in %.1fs: %s", backoff.attempts, delay, first_line(text))
                metrics.SERVICE_RESTARTS.labels("compactor").inc()
                wait = delay
            self._wake.wait(wait)
            self._wake.clear()


class BackgroundCompactor:
    """A compactor's ``run_forever`` on a thread beside another service (``lakecluster run``).

    ``failure`` keeps what ended it, if anything did; ``on_failure`` is called with it from the
    compactor's thread (``run`` stops the stream then).
    """

    def __init__(self, config: Config, spark: SparkSession | None = None,
                 on_failure: Callable[[BaseException], None] | None = None,
                 reloader: ThresholdReloader | None = None,
                 on_progress: Callable[[str], None] | None = None, table: LakeTable | None = None,
                 vacuum_allowed: Callable[[], bool] | None = None) -> None:  # fmt: skip
        self.config = config
        self.vacuum_allowed = vacuum_allowed
        self.table = table
        self.spark = spark
        self.on_failure = on_failure
        self.reloader = reloader
        self.on_progress = on_progress
        self.failure: BaseException | None = None
        self._compactor: Compactor | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="lakecluster-compactor", daemon=True)

    def _run(self) -> None:
        try:
            self._compactor = Compactor(self.config, table=self.table, spark=self.spark)
            self._compactor.reloader = self.reloader
            self._compactor.on_progress = self.on_progress
            if self.vacuum_allowed is not None:
                self._compactor.vacuum_allowed = self.vacuum_allowed
            if self._stop.is_set():
                return
            self._compactor.run_forever()
        except BaseException as e:
            self.failure = e
            if self.on_failure is not None:
                self.on_failure(e)

    def start(self) -> None:
        self._thread.start()

    def request_reload(self) -> None:
        if self._compactor is not None:
            self._compactor.request_reload()

    def stop(self, timeout_s: float | None = None) -> None:
        """Ask the compactor to stop (a rewrite in progress is abandoned) and wait for its thread."""
        self._stop.set()
        if self._compactor is not None:
            self._compactor.request_stop()
        if self._thread.is_alive():
            self._thread.join(timeout_s)


def _bytes_per_row(files: pa.Table, mask: pa.ChunkedArray) -> float | None:
    mask = pc.fill_null(mask, False)
    rows = pc.sum(pc.if_else(mask, files["rows"], 0)).as_py() or 0
    size = pc.sum(pc.if_else(mask, files["size"], 0)).as_py() or 0
    return size / rows if rows > 0 and size > 0 else None


def describe_plan(the_plan: Plan, target_file_bytes: int, *, full: bool = False, where: str | None = None,
                  bytes_per_row: Callable[[Group], float | None] | None = None) -> str:  # fmt: skip
    """The plan as text: the table (the files that can match ``where``, if given), each group of this
    round (its files as ``Group.expected_files`` counts them with ``bytes_per_row``), and with
    ``full`` what the whole pass has left to re-cluster (this round's groups included)."""
    scope = f" (the files --where {where!r} can match)" if where is not None else ""
    lines = [f"table version {the_plan.table_version}: {the_plan.files_total} files{scope}, "
             f"{human_bytes(the_plan.bytes_total)}; {len(the_plan.groups)} group(s) to rewrite"]  # fmt: skip
    if full:
        round_bytes = sum(g.bytes for g in the_plan.groups)
        lines.append(f"--full: {the_plan.relayout_files} file(s), {human_bytes(the_plan.relayout_bytes)} not "
                     f"clustered under the current layout; this round rewrites {human_bytes(round_bytes)}")  # fmt: skip
    for i, g in enumerate(the_plan.groups, 1):
        lines.append(
            f"  {i}. partition {dict(g.partition) or '-'}: {len(g.files)} files, {human_bytes(g.bytes)}, "
            f"{g.rows} rows -> ~{g.expected_files(target_file_bytes, bytes_per_row and bytes_per_row(g))} file(s) "
            f"of generation {g.generation}; why: {g.reason}"
        )
    return "\n".join(lines)
