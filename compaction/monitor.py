"""The table gauges: what a dashboard shows about the table, kept current by a background thread.

Every ``metrics.table_interval_s`` the monitor asks the table handle for its state
(:meth:`lakecluster.table.LakeTable.state`, the same record ``lakecluster status`` prints), with
the compaction backlog and the index's state, and sets the gauges from it: files, bytes, rows,
small files, the file-size distribution, clustering depth per column, the pending compaction
backlog, the newest rewrite and vacuum, and how far the sketches and the index are behind the
table. The handle reads only what changed, so the gauges are never staler than one interval,
however long a rewrite takes.
"""

from __future__ import annotations

import logging
import threading
import time

import pyarrow as pa

from lakecluster import metrics
from lakecluster.compaction.planner import plan_live
from lakecluster.config import Config
from lakecluster.index.sync import index_state
from lakecluster.table import Backlog, IndexState, LakeTable, TableState

log = logging.getLogger(__name__)


def observe(table: LakeTable, config: Config) -> TableState:
    """The table's state with the compaction backlog (``config.compaction``'s thresholds) and, when
    the index is on, the index's own state."""
    cfg = config.compaction
    partition_by = config.table.partition_by

    def backlog(files: pa.Table, version: int) -> Backlog:
        plan = plan_live(files, version, partition_by, cfg)
        return Backlog(len(plan.groups), sum(g.bytes for g in plan.groups))

    def index() -> IndexState:
        return index_state(table)

    return table.state(backlog=backlog, index=index if config.index.enabled else None,
                       small_file_bytes=cfg.min_file_bytes)  # fmt: skip


class TableMonitor:
    def __init__(self, config: Config, table: LakeTable) -> None:
        self.config = config
        self.table = table
        self._seen: tuple | None = None  # (version, sketches' version, index state) last exported
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def observe(self) -> bool:
        """Bring the table gauges up to date; False when nothing had changed since the last look."""
        with self._lock:
            state = observe(self.table, self.config)
            metrics.TABLE_OBSERVED.set(time.time())
            key = (state.version, state.sketches_version, state.index)
            if key == self._seen:
                return False
            self._seen = key
            export(state)
            return True

    def start(self) -> TableMonitor:
        interval = self.config.metrics.table_interval_s
        if interval > 0 and self._thread is None:
            self._thread = threading.Thread(target=self._run, args=(interval,), name="lakecluster-table-monitor",
                                            daemon=True)  # fmt: skip
            self._thread.start()
        return self

    def _run(self, interval: float) -> None:
        failing = False
        while not self._stop.is_set():
            try:
                self.observe()
                if failing:
                    log.info("table gauges up to date again")
                failing = False
            except Exception as e:  # storage hiccup: the gauges stay as they were; try again next interval
                if not failing:
                    log.warning("table gauges not updated: %s", e)
                failing = True
            self._stop.wait(interval)

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=30)
            self._thread = None


def export(state: TableState) -> None:
    """The state as the table gauges (``lakecluster_table_*``, backlog, depth, lags)."""
    metrics.TABLE_VERSION.set(state.version)
    metrics.TABLE_FILES.set(state.files)
    metrics.TABLE_BYTES.set(state.bytes)
    metrics.TABLE_ROWS.set(state.rows)
    metrics.TABLE_SMALL_FILES.set(state.small_files)
    metrics.TABLE_FILE_SIZES.set(state.file_sizes)
    if state.backlog is not None:
        metrics.PENDING_GROUPS.set(state.backlog.groups)
        metrics.PENDING_BYTES.set(state.backlog.bytes)
    if state.last_rewrite is not None and state.last_rewrite.timestamp_ms is not None:
        metrics.TABLE_LAST_REWRITE.set(state.last_rewrite.timestamp_ms / 1000)
    vacuumed = state.last_vacuum.timestamp_ms if state.last_vacuum is not None else None
    # Never vacuumed (as far as the history reaches): count from the oldest commit read, the
    # table's creation when the history reaches version 0.
    since = vacuumed if vacuumed is not None else state.oldest_commit_ms
    if since is not None:
        metrics.TABLE_LAST_VACUUM.set(since / 1000)
    if state.sketches_version is not None:
        metrics.SKETCHES_BEHIND.set(state.version - state.sketches_version)
    for column, depth in (state.clustering or {}).items():
        metrics.FILES_SCANNED.labels(column).set(depth)
    if state.index is not None and state.index.version is not None:
        metrics.INDEX_BEHIND.set(state.version - state.index.version)
        metrics.INDEX_SEGMENTS.set(state.index.segments)
        metrics.INDEX_ENTRIES.set(state.index.entries)
