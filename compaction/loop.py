"""``lakecluster compact``: the compaction service of one table, a scheduler over its operations.

Each round follows the table's layout (``follow_layout.py``), syncs the column-stats index, plans
groups (``planner``), rewrites and commits each (``group_rewrite.py``), and after another writer
deleted rows rebuilds what kept their values (``erasure.py``); between rounds it scores layouts on
the captured workload and, on its schedule, vacuums and expires captures (``housekeeping.py``).
Transient faults are retried with capped backoff; a fault retrying cannot fix stops the loop with
:class:`FatalServiceError`. A stop request (``stopping.py``) lets the group in flight finish for up
to ``compaction.stop_timeout_s``, then cancels it: an abandoned rewrite commits nothing, and its
output files, referenced by no table version, are deleted by vacuum after the retention period.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import SparkSession

from lakecluster import metrics, progress
from lakecluster.compaction.erasure import Erasure, ForgetPass
from lakecluster.compaction.follow_layout import LayoutFollower
from lakecluster.compaction.group_rewrite import GroupResult, GroupRewriter, RewriteInputs
from lakecluster.compaction.housekeeping import Housekeeping
from lakecluster.compaction.layout_inputs import LayoutInputs
from lakecluster.compaction.monitor import TableMonitor
from lakecluster.compaction.planner import Group, Plan, plan_live
from lakecluster.compaction.relayout import first_group_bytes
from lakecluster.compaction.reload import ThresholdReloader
from lakecluster.compaction.rewrite_schema import rewrite_schema, rewritten_stats_columns, row_tracking
from lakecluster.compaction.rounds import HEALTH_NAME, run_rounds
from lakecluster.compaction.stopping import StopControl
from lakecluster.config import Config
from lakecluster.errors import TableNotFoundError
from lakecluster.health import HEALTH
from lakecluster.hierarchy import Parent
from lakecluster.index.sync import rebuild as rebuild_index
from lakecluster.index.sync import sync as sync_index
from lakecluster.layout.adoptions import AdoptionStore
from lakecluster.layout.auto_layout import AutoLayout
from lakecluster.retry import FAULT_KINDS, Backoff
from lakecluster.sizes import human_bytes
from lakecluster.sketches import BoundarySketches
from lakecluster.spark import get_session
from lakecluster.stats_columns import WithoutStatsWarning
from lakecluster.table import Adoption, LakeTable
from lakecluster.table.delta_schema import DeltaSchema
from lakecluster.table.file_rows import RowTracking

log = logging.getLogger(__name__)

GROUP_RESULTS = ("committed", "conflict", "skipped", "abandoned", "failed")  # lakecluster_compaction_groups_total


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
        self.table = table = table or LakeTable(config)
        if not table.delta.exists():  # read-only: a missing table is an error, never created here
            raise TableNotFoundError(table.uri)
        self.spec = table.spec
        self.live = table.live_files()
        self.store = table.sketches()
        self.scope = scope
        self.full = full
        self._shared_spark = spark
        self._spark: SparkSession | None = None
        self.stop = StopControl(lambda: self._spark, lambda: self.config.compaction.stop_timeout_s)
        self.rewriter = GroupRewriter(table, lambda: self.spark, self.stop, self.sync_index)
        self.housekeeping = Housekeeping(table, lambda: self.spark, self.stop)
        grouping = functools.partial(first_group_bytes, partition_by=table.config.table.partition_by)
        self.auto = AutoLayout(table, grouping, store=AdoptionStore(table, spark=lambda: self.spark))
        self.monitor = TableMonitor(config, table)
        self._without_stats = WithoutStatsWarning(table.uri, config.skipping_columns)
        self.layout = LayoutFollower(table, config, self.auto, full=full, on_change=self._layout_changed)
        index_rebuild = (lambda: rebuild_index(self.table, "rows were deleted: stale bounds dropped")) \
            if config.index.enabled else None  # fmt: skip
        self.erasure = Erasure(config, table, index_rebuild)
        self.inputs = LayoutInputs(table, self.store)
        self.reloader: ThresholdReloader | None = None
        self.on_progress: Callable[[str], None] | None = None  # a line per round with work, and per group
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

    # -- the layout in effect (follow_layout.py) ------------------------------------------------

    @property
    def config(self) -> Config:
        """The configuration with the layout in effect applied."""
        return self.layout.config

    @property
    def base_config(self) -> Config:
        """The configuration as loaded (and reloaded)."""
        return self.layout.base_config

    @base_config.setter
    def base_config(self, config: Config) -> None:
        self.layout.base_config = config

    @property
    def adoption(self) -> Adoption | None:
        return self.layout.adoption

    @property
    def fingerprint(self) -> str:
        return self.layout.fingerprint

    def follow_adoption(self) -> None:
        self.layout.follow()

    def _apply_layout(self) -> None:
        self.layout.apply()

    def _layout_changed(self, config: Config) -> None:
        if config.skipping_columns != self._without_stats.columns:
            self._without_stats = WithoutStatsWarning(self.table.uri, config.skipping_columns)
        self.monitor.config = config

    def layout_loop(self) -> None:
        """Between rounds: score layouts on the captured workload when due (``auto_layout.py``)."""
        self.layout.score(self.stopping)

    def relayout_left(self) -> tuple[int, int]:
        """``--full``: (files, bytes) of the pass still off the current layout."""
        return self.layout.pass_left(self.in_scope()[1])

    # -- stopping and reloading (stopping.py) -----------------------------------------------------

    @property
    def stopping(self) -> bool:
        return self.stop.stopping

    def request_stop(self) -> None:
        """Stop after the group in flight, or cancel it after ``compaction.stop_timeout_s``; a
        vacuum in flight is cancelled at once (what it has not deleted yet, the next one will)."""
        self.stop.request()

    @property
    def _busy(self) -> threading.Event:
        return self.stop.busy

    def request_reload(self) -> None:
        """Re-read the configuration before the next round, starting it now if idle (SIGHUP)."""
        if self.reloader is not None:
            self.reloader.request()
            self.stop.wake.set()

    def reload_if_due(self) -> None:
        if self.reloader is None or not self.reloader.due():
            return
        self.base_config = self.reloader.reload(self.base_config)
        self.follow_adoption()
        self._apply_layout()
        metrics.COMPACTION_THRESHOLDS.info(thresholds(self.config))

    # -- inputs ---------------------------------------------------------------------------

    def sketches(self) -> BoundarySketches:
        """The boundary sketches of the layout's clustering columns (``layout_inputs.py``)."""
        return self.inputs.sketches(self.config)

    def parents(self) -> dict[str, Parent]:
        """The parents of the layout's string clustering columns (``layout_inputs.py``)."""
        return self.inputs.parents(self.config)

    def plan(self) -> Plan:
        """This round's groups: the planner's, within the scope; the re-cluster's (an adopted
        layout's within its budget, or with ``full`` every file off the layout) in front."""
        version, files = self.in_scope()
        cfg = self.config.compaction
        if self.scope is not None:  # only some files of a partition: merging them would split its main run
            cfg = dataclasses.replace(cfg, main_run_merge_ratio=0.0)
        the_plan = plan_live(files, version, self.spec.partition_by, cfg)
        return self.layout.with_relayout(the_plan, files, tuple(self.spec.partition_by))

    def in_scope(self) -> tuple[int, pa.Table]:
        """(latest version, the live files the scope lets this compactor rewrite)."""
        version, files = self.live.snapshot()
        if self.scope is not None:
            files = files.filter(pc.is_in(files["path"], value_set=pa.array(list(self.scope()), pa.string())))
        return version, files

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

    def table_schema(self) -> DeltaSchema:
        """The table's schema as the live files last read it (``rewrite_schema.py``)."""
        return rewrite_schema(self.live.metadata, self.config, self.table.uri)

    def row_tracking(self) -> RowTracking | None:
        return row_tracking(self.live.metadata, self.table.uri)

    def compacted_bytes_per_row(self, partition: Mapping[str, str | None] | None = None) -> float | None:
        return self.rewriter.compacted_bytes_per_row(partition)

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
            self.progress(f"compaction: version {the_plan.table_version}, {total} group(s), "
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
            self.progress(f"compaction: group {done}/{total} {result.describe()}; "
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

    def progress(self, line: str) -> None:
        if self.on_progress is not None:
            self.on_progress(line)

    def compact_group(self, group: Group, sketches: BoundarySketches) -> GroupResult:
        """Rewrite and commit one group under the layout in effect (``group_rewrite.py``)."""
        schema = self.table_schema()
        inputs = RewriteInputs(self.config, self.fingerprint, self.parents(), schema,
                               rewritten_stats_columns(schema, self.live.configuration, self._without_stats),
                               self.row_tracking(), self.layout.commit_details(group.relayout))  # fmt: skip
        return self.rewriter.compact(group, sketches, inputs)

    # -- the service --------------------------------------------------------------------------

    @property
    def last_vacuum(self) -> float | None:
        return self.housekeeping.last_vacuum

    @property
    def vacuum_allowed(self) -> Callable[[], bool]:
        """Vacuum only once this says yes: ``run`` holds it until the stream has started for real."""
        return self.housekeeping.allowed

    @vacuum_allowed.setter
    def vacuum_allowed(self, allowed: Callable[[], bool]) -> None:
        self.housekeeping.allowed = allowed

    def maybe_vacuum(self) -> None:
        self.housekeeping.maybe_vacuum(self.config)

    def run_forever(self) -> None:
        """Rounds every ``compaction.interval_s`` (and vacuum every ``vacuum.interval_s``) until stopped.

        Raises:
            FatalServiceError: a fault retrying cannot fix, or ``retry.give_up_after_s`` passed.
        """
        self.monitor.start()
        try:
            run_rounds(self, Backoff(self.config.retry))
        finally:
            self.monitor.stop()

    def wait(self, seconds: float) -> None:
        """Until the next round: ``seconds``, or less when a stop or a reload comes."""
        self.stop.wake.wait(seconds)
        self.stop.wake.clear()



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
