"""The micro-batch sink (``foreachBatch``): write, commit exactly once, keep the sketches.

For micro-batch ``b`` of the query:
1. ask each Delta table which batch its app transaction last recorded (``stream.app_id``);
   anything already committed is not written again: a replay after a crash adds nothing twice;
2. one Spark job writes the files and builds the sketches (``batch_task``);
3. the driver commits quarantine files, then table files, each with app transaction (app_id, b);
4. the merged sketches are persisted, tied to the table version and to ``b``.
A crash between any two steps is repaired by Spark replaying ``b`` on restart.
"""

from __future__ import annotations

import functools
import json
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

from deltalake import DeltaTable
from pyspark.sql import DataFrame

from lakecluster import metrics
from lakecluster.config import Config
from lakecluster.faults import crash_point
from lakecluster.layout import ClusteringLayout
from lakecluster.parquet_files import WrittenFile
from lakecluster.schema import arrow_schema
from lakecluster.sketch_store import SketchStore, load_or_empty
from lakecluster.sketches import ColumnSketch
from lakecluster.stream.batch_task import OUTPUT_DDL, QUARANTINE_SCHEMA, TaskSpec, run_task
from lakecluster.table import TableSpec, commit_appends, committed_version, open_or_create, remove_orphans

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


def _crash_point(point: str, batch_id: int) -> None:
    crash_point(f"{point}:{batch_id}")


def table_spec(config: Config) -> TableSpec:
    t = config.table
    return TableSpec(t.path, arrow_schema(t.columns), tuple(t.partition_by))


class StreamSink:
    def __init__(self, config: Config, *, on_batch: Callable[[BatchReport], None] | None = None) -> None:
        self.config = config
        t = config.table
        self.on_batch = on_batch
        self.app_id = config.stream.app_id
        self.table_spec = table_spec(config)
        self.quarantine_spec = TableSpec(t.resolved_quarantine_path, QUARANTINE_SCHEMA)
        self.table = open_or_create(self.table_spec)
        self.is_kafka = config.source.kind == "kafka"
        self.quarantine = open_or_create(self.quarantine_spec) if self.is_kafka else None
        self.sketch_columns = tuple(t.column(c) for c in t.clustering_columns)
        self.store = SketchStore(t.path)
        self.sketches = load_or_empty(self.store, self.sketch_columns, k=config.sketches.k)
        # Files an earlier attempt wrote but never committed (crash before commit).
        for table, spec in ((self.table, self.table_spec), (self.quarantine, self.quarantine_spec)):
            if table is not None:
                removed = remove_orphans(table, spec.uri, name_prefix="s")
                if removed:
                    log.info("removed %d uncommitted file(s) of an earlier attempt from %s", len(removed), spec.uri)

    def __call__(self, batch_df: DataFrame, batch_id: int) -> None:
        started = time.monotonic()
        table_done = _committed(self.table, self.app_id, batch_id)
        quarantine_done = self.quarantine is None or _committed(self.quarantine, self.app_id, batch_id)
        sketch_done = not self.config.sketches.enabled or self.sketches.stream_batch_id >= batch_id
        if table_done and quarantine_done and sketch_done:
            log.info("batch %d was committed before a restart; nothing to do", batch_id)
            self._report(BatchReport(batch_id, 0, 0, 0, time.monotonic() - started, self.table.version(), True))
            return

        spec = TaskSpec(
            table_uri=self.table_spec.uri,
            quarantine_uri=self.quarantine_spec.uri,
            columns=self.config.table.columns,
            partition_by=self.table_spec.partition_by,
            sketch_columns=self.sketch_columns,
            sketch_k=self.config.sketches.k,
            exact_strings=tuple(n for n, s in self.sketches.sketches.items() if s.is_exact),
            batch_id=batch_id,
            write_table=not table_done,
            write_quarantine=not quarantine_done,
            build_sketches=not sketch_done,
            max_rows_per_file=self.config.table.target_file_rows,
            parse_json=self.is_kafka,
            layout=self._write_layout(),
        )
        rows = batch_df.mapInArrow(functools.partial(run_task, spec), OUTPUT_DDL).collect()
        table_files = [_written(r) for r in rows if r["kind"] == "table"]
        bad_files = [_written(r) for r in rows if r["kind"] == "quarantine"]
        _crash_point("before_commit", batch_id)

        meta = {"lakecluster.operation": "stream-append", "lakecluster.stream_batch_id": str(batch_id)}
        if bad_files and self.quarantine is not None:
            commit_appends(self.quarantine, self.quarantine_spec, bad_files, app_id=self.app_id,
                           app_version=batch_id, metadata=meta)  # fmt: skip
        if table_files:
            commit_appends(self.table, self.table_spec, table_files, app_id=self.app_id,
                           app_version=batch_id, metadata=meta)  # fmt: skip
        _crash_point("after_table_commit", batch_id)

        if spec.build_sketches:
            partial: dict[str, ColumnSketch] = {}
            for r in rows:
                if r["kind"] == "sketch":
                    s = ColumnSketch.from_bytes(r["sketch"])
                    if r["column"] in partial:
                        partial[r["column"]].merge(s)
                    else:
                        partial[r["column"]] = s
            self.sketches.merge(partial)
            self.sketches.stream_batch_id = batch_id
            self.sketches.delta_version = self.table.version()
            self.store.write(self.sketches, retain=self.config.sketches.retain_versions)

        if table_files and self.config.index.enabled and self.config.index.sync_after_stream:
            self._sync_index()

        self._report(BatchReport(
            batch_id=batch_id,
            rows=sum(f.num_records for f in table_files),
            quarantined=sum(f.num_records for f in bad_files),
            files=len(table_files),
            seconds=time.monotonic() - started,
            table_version=self.table.version(),
        ))  # fmt: skip

    def _sync_index(self) -> None:
        """``index.sync_after_stream``: the index follows every commit. A failure is logged, never
        fails the batch: the table is committed, and the index catches up (or is rebuilt) later."""
        from lakecluster.index.spec import IndexSpec
        from lakecluster.index.sync import sync

        try:
            sync(IndexSpec.from_config(self.config))
        except Exception:
            log.warning("column-stats index sync after batch failed; the next sync catches up", exc_info=True)

    def _write_layout(self) -> ClusteringLayout | None:
        """The current boundaries as a sort order for this batch (``stream.cluster_on_write``)."""
        if not self.config.stream.cluster_on_write:
            return None
        return ClusteringLayout.build(self.sketches, [c.name for c in self.sketch_columns],
                                      curve=self.config.compaction.curve, target_cells=1,
                                      k=self.config.sketches.boundaries)  # fmt: skip

    def _report(self, report: BatchReport) -> None:
        if not report.skipped:
            metrics.STREAM_BATCHES.inc()
            metrics.STREAM_ROWS.inc(report.rows)
            metrics.STREAM_QUARANTINED.inc(report.quarantined)
            metrics.STREAM_FILES.inc(report.files)
            metrics.STREAM_BATCH_SECONDS.observe(report.seconds)
            metrics.TABLE_VERSION.set(report.table_version)
        if self.on_batch is not None:
            self.on_batch(report)


def _committed(table: DeltaTable, app_id: str, batch_id: int) -> bool:
    version = committed_version(table, app_id)
    return version is not None and version >= batch_id


def _written(row: dict) -> WrittenFile:
    return WrittenFile(row["path"], int(row["size"]), json.loads(row["partition_values"]),
                       int(row["num_records"]), row["stats"])  # fmt: skip
