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

import pyarrow.compute as pc

from lakecluster import metrics
from lakecluster.compaction.live_files import LiveFiles
from lakecluster.compaction.planner import clustering_depth, plan_live
from lakecluster.config import Config
from lakecluster.delta_log import commit_info
from lakecluster.index.store import IndexStore
from lakecluster.parquet_files import filesystem
from lakecluster.sketch_store import SketchStore

log = logging.getLogger(__name__)
HISTORY_SCAN = 1000  # commits read back at start for the last rewrite and vacuum; then only new ones


class TableMonitor:
    def __init__(self, config: Config, live: LiveFiles | None = None) -> None:
        self.config = config
        self.live = live or LiveFiles.of_config(config)
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
            version, files = self.live.snapshot()
            sketches = self.sketch_store.latest()
            manifest = self.index_store.manifest() if self.index_store is not None else None
            key = (version, None if sketches is None else sketches.delta_version,
                   None if manifest is None else manifest.delta_version)  # fmt: skip
            metrics.TABLE_OBSERVED.set(time.time())
            if key == self._seen:
                return False
            cfg = self.config
            sizes = files["size"].to_numpy()
            self._observe_history(version)
            metrics.TABLE_VERSION.set(version)
            metrics.TABLE_FILES.set(files.num_rows)
            metrics.TABLE_BYTES.set(int(sizes.sum()))
            metrics.TABLE_ROWS.set(pc.sum(files["rows"]).as_py() or 0)
            metrics.TABLE_SMALL_FILES.set(int((sizes < cfg.compaction.min_file_bytes).sum()))
            metrics.TABLE_FILE_SIZES.set(sizes)
            pending = plan_live(files, version, cfg.table.partition_by, cfg.compaction)
            metrics.PENDING_GROUPS.set(len(pending.groups))
            metrics.PENDING_BYTES.set(sum(g.bytes for g in pending.groups))
            if sketches is not None:
                metrics.SKETCHES_BEHIND.set(version - sketches.delta_version)
                for c in cfg.table.clustering_columns:
                    if c in sketches.sketches:
                        depth = clustering_depth(files, None, sketches, c, cfg.sketches.boundaries)
                        metrics.FILES_SCANNED.labels(c).set(depth)
            if manifest is not None and self.index_store is not None:
                metrics.INDEX_BEHIND.set(version - manifest.delta_version)
                metrics.INDEX_SEGMENTS.set(len(manifest.segments) + (1 if manifest.base else 0))
                metrics.INDEX_ENTRIES.set(self.index_store.entries(manifest))
            self._seen = key
            return True

    def _observe_history(self, version: int) -> None:
        """The newest rewrite and vacuum in the log, from the commits not read before (newest first;
        at the start at most HISTORY_SCAN back, and never past a commit log cleanup removed)."""
        first = self._history_version is None
        oldest = max(0, version - HISTORY_SCAN + 1) if self._history_version is None else self._history_version + 1
        fs, root = filesystem(self.config.table.path)
        rewrite = vacuum = last_read = None
        for v in range(version, oldest - 1, -1):
            info = commit_info(fs, f"{root}/_delta_log", v)
            if info is None:
                if not fs.get_file_info(f"{root}/_delta_log/{v:020d}.json").is_file:
                    break  # cleaned up after a checkpoint: the history ends here
                continue
            last_read = info
            if rewrite is None and info.get("operation") == "OPTIMIZE":
                rewrite = info
            if vacuum is None and info.get("operation") == "VACUUM END":
                vacuum = info
            if rewrite is not None and vacuum is not None:
                break
        if rewrite is not None:
            metrics.TABLE_LAST_REWRITE.set(rewrite["timestamp"] / 1000)
        if vacuum is not None:
            metrics.TABLE_LAST_VACUUM.set(vacuum["timestamp"] / 1000)
        elif first and last_read is not None:
            # Never vacuumed (as far as the scan reaches): count from the oldest commit read, the
            # table's creation when the scan reached version 0.
            metrics.TABLE_LAST_VACUUM.set(last_read["timestamp"] / 1000)
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
