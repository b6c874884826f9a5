"""The micro-batch sink (``foreachBatch``): parse once, write quarantine and table, keep the sketches.

For micro-batch ``b`` with txn version ``v = txn_base + b`` (``stream/resume.py``):
1. one Spark job parses the records (``batch_task``), keys the valid rows for cluster-on-write and
   sketches them. Its tasks also write the rows into Parquet files of the table and the quarantine
   (``stream.write_in_tasks``, ``task_files``); where the table needs Delta's own writer (CHECK
   constraints, generated columns, column mapping, a schema other than the declared one), the
   job's output is persisted instead, and Delta's writer writes from it in a second job;
2. quarantined records are committed to the quarantine table, then valid rows to the table, each
   in one delta-spark transaction with the app transaction ``(stream id, v)`` and the batch's
   source offsets in ``userMetadata`` (``append.py``, or Delta's writer with ``txnAppId`` and
   ``txnVersion``): a batch Spark replays after a crash commits nothing twice, and the table
   always records how far the stream has read;
3. the merged sketches are persisted, tied to the table version and to ``v``.
The table is written even when every record was quarantined (an empty commit), so its recorded
offsets never fall behind the stream.
"""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from pyspark import StorageLevel
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from lakecluster.checkpoints import BackgroundCheckpoints
from lakecluster.clustering import ClusteringLayout
from lakecluster.config import Config
from lakecluster.faults import crash_point
from lakecluster.schema import ColumnSpec
from lakecluster.sketches import BoundarySketches, ColumnSketch, sketch_kind
from lakecluster.stats_columns import WithoutStatsWarning, stats_columns
from lakecluster.stream import resume
from lakecluster.stream.append import AppendBlocked, AppendTarget, KnownFacts, commit_append
from lakecluster.stream.avro_records import AvroRecords, NewSchemasMet
from lakecluster.stream.batch_columns import BatchColumns, ColumnsAdded
from lakecluster.stream.batch_task import (
    CODE,
    KEY,
    KIND,
    QUARANTINE,
    QUARANTINE_DDL,
    REASON,
    ROW,
    SOURCE_FIELDS,
    SUMMARY,
    SUMMARY_ROW,
    TaskSpec,
    TaskSummary,
    output_ddl,
    run_task,
    summaries,
    written_files,
)
from lakecluster.stream.parse import ParseLimits
from lakecluster.stream.source import Source
from lakecluster.stream.task_files import TaskFiles
from lakecluster.table import LakeTable, LogGap, TableLog, TableSpec, load_or_empty, user_metadata
from lakecluster.table.snapshot import Unsupported, physical_names

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class BatchReport:
    batch_id: int
    rows: int
    quarantined: int
    files: int
    seconds: float
    table_version: int
    skipped: bool = False
    txn_version: int = -1
    offsets: str | None = None
    codes: dict[str, int] = field(default_factory=dict)
    value_bytes: int = 0
    timestamp_seconds: dict[int, int] = field(default_factory=dict)
    committed_at: float = 0.0
    bytes_written: int = 0
    sketches_at: float | None = None  # when this batch wrote the boundary sketches, if it did


@dataclass(frozen=True)
class _Done:
    """What an earlier run of this batch already committed."""

    table: bool
    quarantine: bool


_Result = tuple[TaskSummary, dict[str, ColumnSketch], int, int]  # totals, sketches, files, bytes


class StreamSink:
    """Called by Spark for every micro-batch (``foreachBatch``)."""

    def __init__(
        self,
        table: LakeTable,
        source: Source,
        spark: SparkSession,
        start: resume.StreamStart,
        *,
        on_batch: Callable[[BatchReport], None] | None = None,
        after_commit: Callable[[], object] | None = None,
        checkpoints: BackgroundCheckpoints | None = None,
        before_commit: Callable[[], None] | None = None,
    ) -> None:
        self.table = table
        self.config = config = table.config
        self.spark = spark
        self.start = start
        self.on_batch = on_batch
        self.after_commit = after_commit  # after a batch committed rows (``index.sync_after_stream``)
        self.checkpoints = checkpoints  # Delta checkpoints the commits are due, written beside the batches
        # Called just before each commit; raises when this process may not commit (its lease lost).
        self.before_commit = before_commit or (lambda: None)
        t = config.table
        self.spec = table.spec
        self.source = source
        self.configured_columns = tuple(t.column(c) for c in t.clustering_columns)
        r = config.records
        self.limits = ParseLimits(r.max_record_bytes, r.max_depth, r.max_string_chars)
        self.avro = AvroRecords.of(config, self.limits)  # records in Avro: decoded in the JVM
        if self.avro is not None:
            self.avro.prefetch(config.source.kafka.topics, config.source.kafka.schema_registry.subject_strategy)
        # The columns the batches are read into and written with (stream.schema_evolution).
        self.batch_columns = BatchColumns(table, spark, start.stream_id, self.avro, checkpoints=checkpoints,
                                          before_commit=self.before_commit)  # fmt: skip
        self.store = table.sketches(start.stream_id)
        self._physical = _physical_names(table)
        self._load_sketches()
        self._sketch_file = self.store.newest()  # the file self.sketches was read from or last written as
        self.table_log = TableLog(table.delta, start.stream_id)
        self.quarantine_log: TableLog | None = None
        self._targets: tuple[AppendTarget, AppendTarget] | None = None
        self._blocked: str | None = None  # why Delta's writer writes the batches, when it must
        self._stats_columns: dict[str, tuple[str, ...]] = {}  # table uri -> the columns with file stats
        self._facts = KnownFacts()  # the targets' facts, read again when their version moves
        self._without_stats = WithoutStatsWarning(table.uri, config.skipping_columns)
        self._previous_start_ms: int | None = None  # when this process's previous micro-batch began

    def _committed(self, batch_txn: int) -> tuple[bool, bool]:
        """Whether the table and the quarantine already hold this txn version of the stream."""
        self.table_log.refresh()
        table_done = _at_least(self.table_log.txn_version, batch_txn)
        if self.quarantine_log is None:
            if not self.table.quarantine.exists():  # no quarantine table yet: nothing committed there
                return table_done, False
            self.quarantine_log = TableLog(self.table.quarantine, self.start.stream_id)
        self.quarantine_log.refresh()
        return table_done, _at_least(self.quarantine_log.txn_version, batch_txn)

    def __call__(self, batch_df: DataFrame, batch_id: int) -> None:
        started = time.monotonic()
        sketches_at: float | None = None
        txn = self.start.txn_version(batch_id)
        table_done, quarantine_done = self._committed(txn)
        self._adopt_newer_sketches()
        sketch_done = not self.config.sketches.enabled or self.sketches.stream_batch_id >= txn
        offsets = resume.batch_offsets(self.table, batch_id)
        if table_done and quarantine_done and sketch_done:
            log.info("batch %d (txn %d) was committed before a restart; nothing to do", batch_id, txn)
            self._report(BatchReport(batch_id, 0, 0, 0, time.monotonic() - started, self.table_log.version, True,
                                     txn))  # fmt: skip
            return

        started_ms = int(time.time() * 1000)
        since_previous = None if self._previous_start_ms is None else started_ms - self._previous_start_ms
        self._previous_start_ms = started_ms
        # The batch's progress (docs/operations.md, "Stream progress") rides in the commits it makes anyway.
        meta_of: Callable[..., dict] = functools.partial(batch_meta, self.avro, self.batch_columns.fields_meta, {
            "stream": self.start.stream_id, "batch": batch_id, "txn": txn, "offsets": _json(offsets),
            "start_offsets": _json(resume.batch_offsets(self.table, batch_id - 1)) if batch_id else None,
            "source": self.source.kind, "started_ms": started_ms, "since_previous_ms": since_previous,
        })  # fmt: skip
        done = _Done(table_done, quarantine_done)
        self.batch_columns.added = []
        result = None
        while result is None:
            try:
                result = self._pass(batch_df, batch_id, txn, done, sketch_done, meta_of)
            except NewSchemasMet as e:
                log.info("batch %d: schema id(s) %s met for the first time; decoding the batch again", batch_id,
                         ", ".join(map(str, e.schema_ids)))  # fmt: skip
            except ColumnsAdded as e:
                log.info("batch %d: columns %s added to the table; reading the batch again", batch_id, e)
        total, merged, files, written = result
        if not sketch_done:
            # A file another process wrote since this batch began (the compactor's rebuild after a
            # DELETE: compaction/erasure.py) is merged into, not written over.
            self._adopt_newer_sketches()
            self.sketches.merge(merged)
            self.sketches.stream_batch_id = txn
            self.sketches.delta_version = self.table_log.version
            self._sketch_file = self.store.write(self.sketches, retain=self.config.sketches.retain_versions)
            sketches_at = time.time()

        if self.after_commit is not None and not table_done:
            after_commit(self.after_commit)
        self._report(BatchReport(
            batch_id=batch_id, rows=total.rows if not table_done else 0,
            quarantined=total.quarantined if not quarantine_done else 0, files=files, bytes_written=written,
            seconds=time.monotonic() - started, table_version=self.table_log.version, txn_version=txn,
            offsets=offsets, codes=dict(total.codes), value_bytes=total.value_bytes,
            timestamp_seconds=dict(total.timestamp_seconds), committed_at=time.time(), sketches_at=sketches_at,
        ))  # fmt: skip

    def _pass(self, batch_df: DataFrame, batch_id: int, txn: int, done: _Done, sketch_done: bool,
              meta_of: Callable[..., dict]) -> _Result:  # fmt: skip
        """The batch read, written and committed: by its tasks when they may write, else by Delta's writer."""
        if self.batch_columns.follow_table():
            self._targets = None  # the files' schema changed
            self.sketch_columns = self._sketched()
        records = batch_df if self.avro is None else self.avro.decode(batch_df)
        if self._writes_in_tasks():
            try:
                return self._one_pass(records, batch_id, txn, done, sketch_done, meta_of)
            except AppendBlocked as e:
                log.warning("batch %d: %s; writing it with Delta's writer", batch_id, e)
                self._blocked = str(e)
                done = _Done(*self._committed(txn))  # the quarantine may have been committed meanwhile
        return self._two_passes(records, batch_id, txn, done, sketch_done, meta_of)

    def _adopt_newer_sketches(self) -> None:
        """Read the stream's sketch file again when another process wrote a newer one: the compactor
        adds the sketches of new clustering columns it built from the table (compaction/table_sketches.py)
        to the stream's newest file, and the stream's next file must keep them."""
        if not self.config.sketches.enabled:
            return
        newest = self.store.newest()
        if newest is None or newest == self._sketch_file:
            return
        self._load_sketches()
        self._sketch_file = newest
        log.info("boundary sketches re-read from %s (written by another process): columns %s; sketching %s", newest,
                 ", ".join(self.sketches.sketches), ", ".join(c.name for c in self.sketch_columns))  # fmt: skip

    def _load_sketches(self) -> None:
        """The newest sketch file (empty sketches for configured columns it lacks), and the columns
        the batches are sketched on from now (:meth:`_sketched`)."""
        sk = self.config.sketches
        self.sketches = load_or_empty(self.store, self.configured_columns, k=sk.k, max_string_chars=sk.max_string_chars,
                                      physical=self._physical)  # fmt: skip
        self.sketch_columns = self._sketched()

    def _sketched(self) -> tuple[ColumnSpec, ...]:
        """The columns the batches are sketched on: the configured clustering columns, then every
        other column of the table whose sketch the file holds. The compactor puts there the
        sketches of a layout it adopted or was given (built once from the table,
        compaction/table_sketches.py); the stream keeps them up to date with its batches, as it
        does its own, so their boundaries follow the data for as long as the layout is in use."""
        declared = {c.name: c for c in self.columns if c.name not in self.config.table.partition_by}
        mine = {c.name for c in self.configured_columns}
        extra = tuple(declared[name] for name, sketch in self.sketches.sketches.items()
                      if name in declared and name not in mine
                      and sketch.kind == sketch_kind(declared[name]))  # fmt: skip
        return self.configured_columns + extra

    @property
    def columns(self) -> tuple[ColumnSpec, ...]:
        return self.batch_columns.columns

    def _task_spec(self, sketch_done: bool, files: TaskFiles | None = None) -> TaskSpec:
        return TaskSpec(
            columns=self.columns,
            sketch_columns=self.sketch_columns,
            sketch_k=self.config.sketches.k,
            sketch_max_string_chars=self.config.sketches.max_string_chars,
            build_sketches=not sketch_done,
            parse_json=self.source.quarantines and self.avro is None,
            decoded=self.avro is not None,
            limits=self.limits,
            layout=write_layout(self.config, self.sketches, self.configured_columns),
            quarantine_floor=self.start.quarantine_floor,
            files=files,
        )

    def _writes_in_tasks(self) -> bool:
        """Whether this batch's tasks write its files (``stream.write_in_tasks`` and a table that allows it)."""
        if not self.config.stream.write_in_tasks:
            return False
        if self._targets is None:
            ddl = TableSpec.of_columns(self.columns, self.spec.partition_by).ddl
            self._targets = (AppendTarget.of(self.spark, self.table.delta, ddl, self.spec.partition_by),
                             AppendTarget.of(self.spark, self.table.quarantine, QUARANTINE_DDL, ()))  # fmt: skip
        targets = self._targets[: 2 if self.source.quarantines else 1]
        logs = (self.table_log, self.quarantine_log)
        facts = [self._facts.of(self.spark, t, log.refresh() if log is not None else None)
                 for t, log in zip(targets, logs[: len(targets)], strict=True)]  # fmt: skip
        blockers = [t.blocker(f) for t, f in zip(targets, facts, strict=True)]
        if all(b is None for b in blockers):
            self._stats_columns = {t.location.uri: stats_columns(t.data_columns, f.configuration)
                                   for t, f in zip(targets, facts, strict=True)}  # fmt: skip
        self._without_stats.check(self._targets[0].data_columns, facts[0].configuration)
        reason = next((b for b in blockers if b is not None), None)
        if reason != self._blocked:
            if reason is not None:
                log.warning("micro-batches are written by Delta's writer (a second pass): %s", reason)
            self._blocked = reason
        return reason is None

    def _one_pass(self, batch_df: DataFrame, batch_id: int, txn: int, done: _Done, sketch_done: bool,
                  meta_of: Callable[..., dict]) -> _Result:  # fmt: skip
        """Tasks parse and write; the driver commits quarantine, then table (``stream/append.py``)."""
        assert self._targets is not None
        table_target, quarantine_target = self._targets
        s = self.config.stream
        files = TaskFiles(
            table_uri=self.table.uri, quarantine_uri=self.table.quarantine.uri, partition_by=self.spec.partition_by,
            max_records_per_file=s.max_records_per_file, buffer_bytes=s.write_buffer_bytes,
            storage=self.table.storage_for_tasks(), stream_id=self.start.stream_id, batch_id=batch_id,
            write_table=not done.table, write_quarantine=not done.quarantine,
            table_stats_columns=self._stats_columns.get(table_target.location.uri),
            quarantine_stats_columns=self._stats_columns.get(quarantine_target.location.uri),
        )  # fmt: skip
        spec = self._task_spec(sketch_done, files)
        out = empty_headers_not_null(batch_df).mapInArrow(functools.partial(run_task, spec), output_ddl(spec))
        job_started = time.monotonic()
        rows = out.collect()  # one row per written file, one per task: small
        job_ms = int((time.monotonic() - job_started) * 1000)
        total, merged = summaries([r[SUMMARY] for r in rows if r[KIND] == SUMMARY_ROW])
        if self.avro is not None:  # new schema ids: the batch is decoded again, these files never committed
            self.avro.check(total.schema_ids)
        self.batch_columns.evolve(total, batch_id)  # new columns: the batch is read again, these files never committed
        table_files, quarantine_files = written_files([r for r in rows if r[KIND] != SUMMARY_ROW])
        crash_point(f"before_commit:{batch_id}")
        # The commit's own duration ends at the timestamp Delta gives it (status reads both).
        meta = meta_of(total, job_ms=job_ms, commit_started_ms=int(time.time() * 1000))
        if quarantine_files and not done.quarantine:
            self.before_commit()
            commit_append(self.spark, quarantine_target, quarantine_files, app_id=self.start.stream_id,
                          txn_version=txn, details=meta, checkpoints=self.checkpoints)  # fmt: skip
        crash_point(f"after_quarantine_commit:{batch_id}")
        written = (0, 0)
        if not done.table:
            self.before_commit()
            appended = commit_append(self.spark, table_target, table_files, app_id=self.start.stream_id,
                                     txn_version=txn, details=meta, checkpoints=self.checkpoints)  # fmt: skip
            written = (appended.files, appended.bytes)
        self.table_log.refresh()
        crash_point(f"after_table_commit:{batch_id}")
        return total, merged, *written

    def _two_passes(self, batch_df: DataFrame, batch_id: int, txn: int, done: _Done, sketch_done: bool,
                    meta_of: Callable[..., dict]) -> _Result:  # fmt: skip
        """Tasks parse into a persisted frame; Delta's writer writes quarantine, then table, from it."""
        spec = self._task_spec(sketch_done)
        parsed = empty_headers_not_null(batch_df).mapInArrow(functools.partial(run_task, spec), output_ddl(spec))
        parsed = parsed.persist(StorageLevel.MEMORY_AND_DISK)
        try:
            job_started = time.monotonic()
            total, merged = summaries([r[SUMMARY] for r in parsed.where(F.col(KIND) == SUMMARY_ROW)
                                       .select(SUMMARY).collect()])  # fmt: skip
            job_ms = int((time.monotonic() - job_started) * 1000)
            if self.avro is not None:
                self.avro.check(total.schema_ids)
            self.batch_columns.evolve(total, batch_id)
            crash_point(f"before_commit:{batch_id}")
            # Delta's writer writes and commits in one call after this: neither is timed apart.
            meta = user_metadata(**meta_of(total, job_ms=job_ms))
            if total.quarantined and not done.quarantine:
                self.before_commit()
                write_quarantine(parsed, self.table.quarantine.uri, self.start.stream_id, batch_id, txn, meta)
            crash_point(f"after_quarantine_commit:{batch_id}")
            files, written = 0, 0
            if not done.table:
                self.before_commit()
                files, written = self._write_table(parsed, txn, meta)
            crash_point(f"after_table_commit:{batch_id}")
            return total, merged, files, written
        finally:
            parsed.unpersist()

    def _write_table(self, parsed: DataFrame, txn: int, meta: str) -> tuple[int, int]:
        rows = parsed.where(F.col(KIND) == ROW)
        if self.config.stream.cluster_on_write:
            # Partition columns first: Spark's writer needs that order and would otherwise sort again,
            # losing the curve order inside each file.
            rows = rows.sortWithinPartitions(*self.spec.partition_by, KEY)
        before = self.table_log.version  # brought up to date by _committed, just before
        (rows.select(*[c.name for c in self.columns]).write.format("delta").mode("append")
         .option("txnAppId", self.start.stream_id).option("txnVersion", txn).option("userMetadata", meta)
         .option("maxRecordsPerFile", self.config.stream.max_records_per_file)
         .save(self.table.uri))  # fmt: skip
        self.table_log.refresh()
        return files_written(self.table_log, before, meta)

    def _report(self, report: BatchReport) -> None:
        if self.on_batch is not None:
            self.on_batch(report)


def batch_meta(avro: AvroRecords | None, fields: Callable[[TaskSummary], dict], base: dict, total: TaskSummary,
               **more: object) -> dict:  # fmt: skip
    """A micro-batch's progress, for its commits' ``userMetadata``: ``base`` (where it read), its
    counts and phases, for Avro records the writer schemas it met, and the fields of its records
    that are no column, were added as one, or held values of another type (``status`` shows them)."""
    meta = {**base, "rows": total.rows, "quarantined": total.quarantined, "phases_ms": total.phases_ms(), **more}
    if avro is not None:
        meta["schemas"] = avro.describe(total.schema_ids)
    if found := fields(total):
        meta["fields"] = found
    return meta


def after_commit(hook: Callable[[], object]) -> None:
    """The ``after_commit`` hook (the index sync of ``index.sync_after_stream``). A failure is
    logged, never fails the batch: the table is committed, and the index catches up later."""
    try:
        hook()
    except Exception:
        log.warning("column-stats index sync after batch failed; the next sync catches up", exc_info=True)


def write_quarantine(parsed: DataFrame, uri: str, stream_id: str, batch_id: int, txn: int, meta: str) -> None:
    """The quarantined records of a persisted parse (Delta's writer, the stream's app transaction)."""
    bad = parsed.where(F.col(KIND) == QUARANTINE).select(
        *[name for name, _, _ in SOURCE_FIELDS],
        F.col(CODE).alias("reason_code"), F.col(REASON).alias("reason"),
        F.current_timestamp().alias("quarantined_at"), F.lit(stream_id).alias("stream_id"),
        F.lit(batch_id).cast("bigint").alias("stream_batch_id"),
    )  # fmt: skip
    (bad.write.format("delta").mode("append").option("txnAppId", stream_id)
     .option("txnVersion", txn).option("userMetadata", meta).save(uri))  # fmt: skip


def write_layout(
    config: Config, sketches: BoundarySketches, columns: tuple[ColumnSpec, ...]
) -> ClusteringLayout | None:
    """The current boundaries as a sort order for a batch (``stream.cluster_on_write``)."""
    if not config.stream.cluster_on_write or any(s.n == 0 for s in sketches.sketches.values()):
        return None
    return ClusteringLayout.build(sketches, [c.name for c in columns], curve=config.compaction.curve, target_cells=1,
                                  k=config.sketches.boundaries)  # fmt: skip


def empty_headers_not_null(frame: DataFrame) -> DataFrame:
    """Kafka records without headers as an empty ``headers`` list instead of null.

    Spark's Arrow writer is slow on null arrays: 400,000 records of which none had headers took
    12 s more to reach the Python tasks than with empty lists (2 cores). The task turns empty
    lists back into null, so the quarantine table still says "no headers" as null.
    """
    if "headers" not in frame.columns:
        return frame
    empty = F.array().cast(frame.schema["headers"].dataType)
    return frame.withColumn("headers", F.coalesce(F.col("headers"), empty))


def _physical_names(table: LakeTable) -> dict[str, str] | None:
    """The table's columns' physical names (column mapping): the sketch files record them, so a
    sketch follows its column's rename. None when the log cannot say (a table not there yet)."""
    try:
        return physical_names(table.delta.metadata())
    except (Unsupported, LogGap):
        return None


def _at_least(version: int | None, wanted: int) -> bool:
    """Whether a table's transaction version (None: none yet) has reached ``wanted`` (0 counts)."""
    return version is not None and version >= wanted


def files_written(table: TableLog, before: int, meta: str) -> tuple[int, int]:
    """(files, bytes) added by the commit carrying ``meta`` among the versions after ``before``.

    Found by its metadata, not as the newest commit: a compactor may commit right after the
    stream's write, and a write Delta skipped as already committed has no commit at all (0, 0).
    """
    for _, entry in table.commit_infos_after(before):
        if entry.get("userMetadata") == meta:
            metrics = entry.get("operationMetrics") or {}
            return int(metrics.get("numFiles", 0) or 0), int(metrics.get("numOutputBytes", 0) or 0)
    return 0, 0


def _json(offsets: str | None) -> object:
    import json

    return json.loads(offsets) if offsets else None


__all__ = ["BatchReport", "StreamSink", "TaskSummary", "empty_headers_not_null", "files_written"]
