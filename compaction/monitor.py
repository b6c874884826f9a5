"""The table gauges: what a dashboard shows about the table, kept current by a background thread.

Every ``metrics.table_interval_s`` the monitor reads the Delta log incrementally and, when the
table, the boundary sketches or the index moved, recomputes from the live files' add actions:
files, bytes, rows, small files, the file-size distribution, clustering depth per column, the
pending compaction backlog, and how far the sketches and the index are behind the table. The
gauges are therefore never staler than one interval, however long a rewrite takes.
"""

from __future__ import annotations

import logging
import threading
import time

import numpy as np

from lakecluster import metrics
from lakecluster.compaction.planner import clustering_depth, plan_files, snapshot_files
from lakecluster.config import Config
from lakecluster.index.store import IndexStore
from lakecluster.sketch_store import SketchStore
from lakecluster.table import open_table

log = logging.getLogger(__name__)
HISTORY_SCAN = 1000  # commits read back at start for the last rewrite and vacuum; then only new ones


class TableMonitor:
    def __init__(self, config: Config) -> None:
        self.config = config
        self.table = open_table(config.table.path)
        self.sketch_store = SketchStore(config.table.path)
        self.index_store = IndexStore(config.index.resolved_path(config.table)) if config.index.enabled else None
        self._seen: tuple[int, int | None, int | None] | None = None
        self._history_version: int | None = None  # commits up to this version were read for the timestamps
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def observe(self) -> bool:
        """Bring the table gauges up to date; False when nothing had changed since the last look."""
        with self._lock:
            self.table.update_incremental()
            version = self.table.version()
            sketches = self.sketch_store.latest()
            manifest = self.index_store.manifest() if self.index_store is not None else None
            key = (version, None if sketches is None else sketches.delta_version,
                   None if manifest is None else manifest.delta_version)  # fmt: skip
            metrics.TABLE_OBSERVED.set(time.time())
            if key == self._seen:
                return False
            cfg = self.config
            files, actions = snapshot_files(self.table, cfg.table.partition_by)
            sizes = np.fromiter((f.size for f in files), dtype=np.int64, count=len(files))
            self._observe_history(version)
            metrics.TABLE_VERSION.set(version)
            metrics.TABLE_FILES.set(len(files))
            metrics.TABLE_BYTES.set(int(sizes.sum()))
            metrics.TABLE_ROWS.set(sum(f.rows for f in files))
            metrics.TABLE_SMALL_FILES.set(int((sizes < cfg.compaction.min_file_bytes).sum()))
            metrics.TABLE_FILE_SIZES.set(sizes)
            pending = plan_files(files, version, cfg.compaction)
            metrics.PENDING_GROUPS.set(len(pending.groups))
            metrics.PENDING_BYTES.set(sum(g.bytes for g in pending.groups))
            if sketches is not None:
                metrics.SKETCHES_BEHIND.set(version - sketches.delta_version)
                paths = [f.path for f in files]
                for c in cfg.table.clustering_columns:
                    if c in sketches.sketches:
                        depth = clustering_depth(actions, paths, sketches, c, cfg.sketches.boundaries)
                        metrics.FILES_SCANNED.labels(c).set(depth)
            if manifest is not None and self.index_store is not None:
                metrics.INDEX_BEHIND.set(version - manifest.delta_version)
                metrics.INDEX_SEGMENTS.set(len(manifest.segments) + (1 if manifest.base else 0))
                metrics.INDEX_ENTRIES.set(self.index_store.entries(manifest))
            self._seen = key
            return True

    def _observe_history(self, version: int) -> None:
        """The newest rewrite and vacuum in the log, from the commits not read before (newest first)."""
        first = self._history_version is None
        newer = HISTORY_SCAN if self._history_version is None else version - self._history_version
        if newer <= 0:
            return
        history = self.table.history(newer)
        rewrite = next((h for h in history if h.get("operation") == "OPTIMIZE"), None)
        vacuum = next((h for h in history if h.get("operation") == "VACUUM END"), None)
        if rewrite is not None:
            metrics.TABLE_LAST_REWRITE.set(rewrite["timestamp"] / 1000)
        if vacuum is not None:
            metrics.TABLE_LAST_VACUUM.set(vacuum["timestamp"] / 1000)
        elif first and history:
            # Never vacuumed (as far as the scan reaches): count from the oldest commit read, the
            # table's creation when the scan reached version 0.
            metrics.TABLE_LAST_VACUUM.set(history[-1]["timestamp"] / 1000)
        self._history_version = version

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
