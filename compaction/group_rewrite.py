"""One group's rewrite: its rows keyed by the layout, cut into files, sorted and written, then
committed in place of its inputs (``commit.py``) — the compactor's unit of work, returning what
became of the group and its measures (:class:`GroupResult`).

A group is rewritten in this process when it is small (``compaction.local_rewrite_max_bytes``),
in Spark tasks otherwise (pyarrow in the tasks), and with Spark's reader when pyarrow cannot read
its files as declared. A group whose inputs another commit already changed is skipped before any
work; one a stop request cancels is abandoned (nothing of it is committed).
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import SparkSession

from lakecluster import metrics
from lakecluster.clustering import ClusteringLayout, clustering_depth
from lakecluster.compaction.commit import commit_rewrite
from lakecluster.compaction.planner import Group
from lakecluster.compaction.rewrite import RewriteSpec, rewrite
from lakecluster.compaction.rewrite_local import RewriteStopped, rewrite_local
from lakecluster.compaction.rewrite_tasks import rewrite_in_tasks
from lakecluster.compaction.stopping import StopControl
from lakecluster.config import Config
from lakecluster.errors import CompactionConflictError, TableError
from lakecluster.faults import crash_point, pause_point
from lakecluster.hierarchy import Parent
from lakecluster.parquet_files import WrittenFile
from lakecluster.retry import first_line
from lakecluster.sizes import human_bytes
from lakecluster.sketches import BoundarySketches
from lakecluster.table import LakeTable
from lakecluster.table.deletion_vectors import file_keys
from lakecluster.table.delta_schema import DeltaSchema
from lakecluster.table.file_rows import RowTracking

log = logging.getLogger(__name__)

SparkRewrite = Callable[[SparkSession, Group, RewriteSpec], list[WrittenFile]]


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


@dataclass(frozen=True)
class RewriteInputs:
    """What a group is rewritten under: the layout's settings and the table's schema now."""

    config: Config  # with the layout in effect
    fingerprint: str  # the layout's, in the new files' names
    parents: Mapping[str, Parent]
    schema: DeltaSchema
    stats_columns: tuple[str, ...]  # by physical name
    row_tracking: RowTracking | None
    details: Mapping[str, str]  # more of the commit's userMetadata (the re-cluster's adoption)


class Stopped(Exception):
    """The rewrite in flight was cancelled by a stop request."""


def _pyarrow_error(error: Exception) -> str | None:
    """Why pyarrow could not read or convert the files, when that is why a rewrite failed (in a
    Spark task, the task's Python error is a line of the message); None for any other failure."""
    if isinstance(error, pa.ArrowException):
        return first_line(str(error))
    return next((line.strip() for line in str(error).splitlines() if "pyarrow.lib.Arrow" in line), None)


def _bytes_per_row(files: pa.Table, mask: pa.ChunkedArray) -> float | None:
    mask = pc.fill_null(mask, False)
    rows = pc.sum(pc.if_else(mask, files["rows"], 0)).as_py() or 0
    size = pc.sum(pc.if_else(mask, files["size"], 0)).as_py() or 0
    return size / rows if rows > 0 and size > 0 else None


class GroupRewriter:
    """Rewrites and commits groups of one table (see the module's docstring).

    Args:
        table: the table's handle; its live files answer which inputs are still live.
        spark: the compactor's session (started on first use).
        stop: the compactor's stop request and what it cancels.
        after_commit: called once a rewrite is committed (the index sync).
    """

    def __init__(self, table: LakeTable, spark: Callable[[], SparkSession], stop: StopControl,
                 after_commit: Callable[[], None]) -> None:  # fmt: skip
        self.table = table
        self.live = table.live_files()
        self._spark = spark
        self.stop = stop
        self.after_commit = after_commit

    def compact(self, group: Group, sketches: BoundarySketches, inputs: RewriteInputs) -> GroupResult:
        config, fingerprint = inputs.config, inputs.fingerprint
        cfg = config.compaction
        started = time.monotonic()
        if self.gone_since(-1, [f.key for f in group.files]):
            metrics.COMPACTION_GROUPS.labels("skipped").inc()
            return GroupResult(group, "skipped", 0, 0, 0.0, None, 0.0, 0.0,
                               "inputs already rewritten by another compactor")  # fmt: skip
        n_out = group.expected_files(cfg.target_file_bytes, self.compacted_bytes_per_row(group.partition_values))
        layout = ClusteringLayout.build(
            sketches, config.table.clustering_columns, curve=cfg.curve, target_cells=n_out,
            k=config.sketches.boundaries, weights=cfg.weights(), column_types=config.table.clustering_types(),
            round_cuts=cfg.round_cuts, parents=dict(inputs.parents),
        )  # fmt: skip
        run_id = uuid.uuid4().hex[:12]
        spec = RewriteSpec(self.table.uri, inputs.schema, layout, target_files=n_out,
                           file_prefix=f"g{group.generation:02d}-{run_id}-l{fingerprint}",
                           storage=self.table.storage_for_tasks(), stats_columns=inputs.stats_columns,
                           row_tracking=inputs.row_tracking, task_memory_bytes=cfg.task_memory_bytes,
                           spill_dir=cfg.spill_dir)  # fmt: skip
        try:
            if self.stop.cancelled.is_set():  # the stop timeout passed while the group was planned
                raise Stopped
            written, engine = self._rewrite(group, spec, cfg.local_rewrite_max_bytes)
        except Stopped:
            metrics.COMPACTION_GROUPS.labels("abandoned").inc()
            return GroupResult(group, "abandoned", 0, 0, time.monotonic() - started, None, 0.0, 0.0, "stopped")
        crash_point("compaction_before_commit")
        pause_point("compaction_before_commit")
        before = self.scanned(config, [f.path for f in group.files], sketches)
        meta = {
            "operation": "compaction", "curve": cfg.curve, "columns": ",".join(layout.columns),
            "weights": ",".join(f"{cfg.weights().get(c, 1.0):g}" for c in layout.columns), "layout": fingerprint,
            "levels": ",".join(map(str, layout.levels)), "grouped_by": layout.grouped_by(),
            "boundary_version": str(sketches.delta_version),
            "generation": str(group.generation), "run": run_id, "reason": group.reason,
            "seconds": f"{time.monotonic() - started:.1f}",  # planning to commit, for `lakecluster history`
            "rewrite": engine, **inputs.details,
        }  # fmt: skip
        metrics.COMPACTION_COMMIT_ATTEMPTS.inc()
        try:
            result = commit_rewrite(self._spark(), self.table.delta, group, written, details=meta,
                                    zorder_by=config.table.clustering_columns, gone_since=self.gone_since)  # fmt: skip
        except CompactionConflictError as e:
            metrics.COMPACTION_GROUPS.labels("conflict").inc()
            log.warning("group in %s abandoned: %s", dict(group.partition) or "table", e)
            return GroupResult(group, "conflict", 0, 0, time.monotonic() - started, None, before, before, str(e))
        crash_point("compaction_after_commit")
        self.after_commit()
        after = self.scanned(config, [f.path for f in written], sketches)
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

    def gone_since(self, version: int, keys: Sequence[str]) -> list[str]:
        """Which file ``keys`` (``DataFile.key``: path and deletion vector) are not live at the
        latest version (which is at least ``version``)."""
        latest, files = self.live.snapshot()
        if latest < version:
            raise TableError(f"the log of {self.table.uri} is at version {latest}, behind {version}")
        wanted = pa.array(list(keys), pa.string())
        live = pc.is_in(wanted, value_set=file_keys(files["path"], files["deletion_vector"]))
        return [k for k, ok in zip(keys, live.to_numpy(zero_copy_only=False), strict=True) if not ok]

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

    def scanned(self, config: Config, paths: list[str], sketches: BoundarySketches) -> float:
        """Files a point query on each clustering column reads among ``paths``, on average."""
        cols = config.table.clustering_columns
        k = config.sketches.boundaries
        actions = self.live.snapshot()[1]
        return sum(clustering_depth(actions, paths, sketches, c, k) for c in cols) / len(cols)

    def _rewrite(self, group: Group, spec: RewriteSpec, local_max_bytes: int) -> tuple[list[WrittenFile], str]:
        """The group's new files and where they were written: ``local`` (this process), ``tasks``
        (pyarrow in Spark tasks) or ``spark`` (Spark's reader and shuffle, for files pyarrow cannot
        read as declared)."""
        stop = self.stop
        if group.bytes <= local_max_bytes:
            stop.busy.set()
            try:
                written = rewrite_local(group, spec, stop=stop.cancelled)
                if stop.cancelled.is_set():
                    raise Stopped
                return written, "local"
            except RewriteStopped:
                raise Stopped from None
            except MemoryError as e:  # a group too big for this process: Spark's executors share it
                log.warning("rewriting the group in this process failed (%s); rewriting it with Spark tasks",
                            first_line(str(e)))
            except pa.ArrowException as e:  # files pyarrow cannot read as declared (Spark's reader may)
                log.warning("rewriting the group in this process failed (%s); rewriting it with Spark",
                            first_line(str(e)))
                return self._with_spark(group, spec, rewrite), "spark"
            finally:
                stop.busy.clear()
        try:
            return self._with_spark(group, spec, rewrite_in_tasks), "tasks"
        except Exception as e:
            cause = _pyarrow_error(e)
            if cause is None:
                raise
            log.warning("rewriting the group in Spark tasks failed (%s); rewriting it with Spark's reader", cause)
        return self._with_spark(group, spec, rewrite), "spark"

    def _with_spark(self, group: Group, spec: RewriteSpec, engine: SparkRewrite) -> list[WrittenFile]:
        stop, spark = self.stop, self._spark()
        sc = spark.sparkContext
        stop.job_group = f"lakecluster-compact-{uuid.uuid4().hex[:8]}"
        sc.setJobGroup(stop.job_group, f"rewrite {len(group.files)} files", interruptOnCancel=True)
        stop.busy.set()
        try:
            if stop.cancelled.is_set():  # cancelled before the group above existed: nothing cancelled it
                raise Stopped
            written = engine(spark, group, spec)
        except Exception as e:
            if stop.stopping and ("cancel" in str(e).lower() or "interrupt" in str(e).lower()):
                raise Stopped from None
            raise
        finally:
            stop.busy.clear()
            stop.job_group = None
            sc.setLocalProperty("spark.jobGroup.id", None)  # type: ignore[arg-type]
        if stop.cancelled.is_set():
            raise Stopped
        return written
