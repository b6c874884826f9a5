"""The table handle: one object per table and process that every component reaches it through."""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Callable

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.fs as pafs

from lakecluster import storage
from lakecluster.config import Config, StorageConfig, TableConfig
from lakecluster.errors import TableNotFoundError
from lakecluster.table import stream_identity
from lakecluster.table.depth import DepthTracker
from lakecluster.table.layout_record import (
    Adoption,
    AdoptionFiles,
    TableLayout,
    clusters_data_columns,
    newest,
    recorded_adoption,
)
from lakecluster.table.live_files import LiveFiles
from lakecluster.table.location import DeltaLocation
from lakecluster.table.paths import TablePaths
from lakecluster.table.sketch_store import SketchStore
from lakecluster.table.snapshot import physical_names
from lakecluster.table.spec import TableSpec
from lakecluster.table.state import Backlog, CommitHistory, IndexState, TableState
from lakecluster.uris import is_local

BacklogOf = Callable[[pa.Table, int], Backlog]  # (live files, version) -> what compaction would rewrite


class LakeTable:
    """One Delta table as lakecluster keeps it: the data, its quarantine table, its side folder.

    Built once per process from the configuration and handed to every component. It owns the
    table's location and storage settings (no process-wide setting), the side-folder layout
    (:attr:`paths`), Delta access (:attr:`delta`, :attr:`quarantine`), one live-file view kept
    current from the log (:meth:`live_files`), the boundary sketches (:meth:`sketches`), and the
    table's facts as one record (:meth:`state`). Safe to share between threads.

    Args:
        config: the validated configuration; its ``table``, ``index``, ``stream``, ``source`` and
            ``storage`` sections say where everything is.
    """

    def __init__(self, config: Config) -> None:
        self.config = config
        self.paths = TablePaths.of(config)
        self.delta = DeltaLocation(self.paths.table, config.storage)
        self.quarantine = DeltaLocation(self.paths.quarantine, config.storage)
        t = config.table
        self.spec = TableSpec.of_columns(t.columns, t.partition_by)
        self._lock = threading.Lock()
        self._live: LiveFiles | None = None
        self._history: CommitHistory | None = None
        self._depth: DepthTracker | None = None
        self._state: tuple[tuple, TableState] | None = None
        self._stream_id: str | None = None

    @classmethod
    def at(cls, uri: str, *, storage: StorageConfig | None = None) -> LakeTable:
        """A handle for a table known only by its location (every other setting at its default).

        Args:
            uri: a local path or ``s3://bucket/path``.
            storage: how to reach it (default: the AWS environment's settings).
        """
        return cls(Config(table=TableConfig(path=uri), storage=storage or StorageConfig()))

    def __reduce__(self) -> tuple[type[LakeTable], tuple[Config]]:
        # Another process (a spawned worker) gets a handle of its own: the same table, fresh views.
        return LakeTable, (self.config,)

    @property
    def uri(self) -> str:
        """The table's location, normalised (an absolute path or ``s3://bucket/key``)."""
        return self.delta.uri

    @property
    def name(self) -> str:
        """The table's short name: ``table.name``, or the last segment of its location (the
        ``table`` label of every metric a process serves)."""
        return self.config.table.name or self.uri.rstrip("/").rsplit("/", 1)[-1]

    @property
    def storage(self) -> StorageConfig:
        return self.config.storage

    @property
    def stream_id(self) -> str:
        """The configured stream's id: ``stream.id``, or the id of the table's stream of this
        source (its record, ``stream_identity.py``, found once: a table that moved keeps its
        stream's id), or else the one derived from the source and the table's path."""
        with self._lock:
            if self._stream_id is None:
                self._stream_id = self._recorded_stream_id()
            return self._stream_id

    def continue_stream(self, stream_id: str) -> None:
        """Take ``stream_id`` as the configured stream's id from now on (the stream of this source
        the table records under another id: ``stream_identity.resolve``): its checkpoint, lease and
        sketches are that stream's. The handle stays the one every component holds."""
        with self._lock:
            self.config = dataclasses.replace(self.config, stream=dataclasses.replace(self.config.stream, id=stream_id))
            self.paths = TablePaths.of(self.config)
            self._stream_id = stream_id

    def _recorded_stream_id(self) -> str:
        derived = self.paths.stream_id
        if self.config.stream.id:
            return derived
        try:
            fs, streams = self.filesystem(self.paths.streams)
            records = stream_identity.read_records(fs, streams)
        except OSError:
            return derived
        identity = self.config.source.identity()
        same = [i for i, r in records.items() if r is not None and dict(r.source) == identity]
        return same[0] if derived not in records and len(same) == 1 else derived

    @property
    def uses_s3(self) -> bool:
        """Whether any location of the table is on S3 (Spark then needs hadoop-aws)."""
        return self.paths.uses_s3

    def filesystem(self, uri: str) -> tuple[pafs.FileSystem, str]:
        """The pyarrow filesystem of a location of this table (a checkpoint, a lease) and the path in it."""
        return storage.filesystem(uri, self.storage)

    def storage_for_tasks(self) -> StorageConfig:
        """The storage settings with what this process's AWS environment supplies filled in, for
        work shipped to Spark executors (they do not share the driver's environment)."""
        return storage.resolved(self.storage)

    # -- what the handle keeps -------------------------------------------------------------------

    def live_files(self) -> LiveFiles:
        """The table's live files with the clustering columns' min and max, one view per handle
        (the compactor's rounds and its table monitor share it)."""
        with self._lock:
            if self._live is None:
                by_name = {c.name: c for c in self.config.table.columns}
                t = self.config.table
                self._live = LiveFiles(self.delta, [by_name[p] for p in t.partition_by],
                                       [by_name[c] for c in t.clustering_columns])  # fmt: skip
            return self._live

    def adoptions(self) -> AdoptionFiles:
        """The adoption files beside the table (``_lakecluster/layout/``) and the last recommendation."""
        return AdoptionFiles(self.paths.layout, self.storage, *self.filesystem(self.paths.layout))

    def adoption(self) -> tuple[Adoption | None, bool]:
        """The newest adopted layout, whatever ``compaction.auto_layout`` says (None: none), and
        whether the table's log records it (False: only its file, see ``layout_record.py``)."""
        try:
            recorded = recorded_adoption(self.live_files().snapshot_with_metadata()[2].domains)
        except TableNotFoundError:  # no table (yet): no record, only the files there may be
            recorded = None
        return newest(recorded, self.adoptions().latest())

    def layout(self, config: Config | None = None, found: tuple[Adoption | None, bool] | None = None) -> TableLayout:
        """The layout in effect (``layout_record.py``): the newest adopted one when
        ``compaction.auto_layout = apply`` and it clusters by data columns of the table, the
        configured one otherwise. From then on the live files keep its columns' min and max.

        Args:
            config: the configuration to take the mode and the configured layout from (default:
                the handle's; a compactor passes the one it reloaded).
            found: :meth:`adoption`'s answer when the caller has just read it (default: read).

        Raises:
            UnsupportedTableError: the table's layout record is of a newer format.
        """
        config = config or self.config
        layout = TableLayout.configured(config)
        if config.compaction.auto_layout == "apply":
            adoption, recorded = found if found is not None else self.adoption()
            if adoption is not None and clusters_data_columns(config, adoption):
                layout = TableLayout.adopted(config, adoption, recorded=recorded)
        by_name = {c.name: c for c in config.table.columns}
        self.live_files().cover([by_name[c] for c in layout.clustering_columns])
        return layout

    def sketches(self, stream_id: str | None = None) -> SketchStore:
        """The boundary sketches of one stream (its writer's view), or of every stream (``None``)."""
        fs, directory = self.filesystem(self.paths.sketches(stream_id))
        return SketchStore(fs, directory=directory, streams=self.filesystem(self.paths.streams)[1],
                           legacy=self.filesystem(self.paths.sketches(None))[1], stream_id=stream_id,
                           local=is_local(self.uri))  # fmt: skip

    def history(self) -> CommitHistory:
        """The table's newest rewrite, vacuum and stream commits, read up to its latest version
        (kept: a later call reads only the commits since)."""
        version = self.live_files().snapshot()[0]
        with self._lock:
            if self._history is None:
                self._history = CommitHistory(self.delta)
            history = self._history
        return history.up_to(version)

    def state(self, *, backlog: BacklogOf | None = None, index: Callable[[], IndexState] | None = None,
              small_file_bytes: int | None = None) -> TableState:  # fmt: skip
        """The table's facts now, as one record (``status``, ``report`` and the table gauges show it).

        Reads only what changed since the last call: new commits, a newer sketch file. The
        clustering depth and the backlog are recomputed only when the table, the sketches or the
        index moved.

        Args:
            backlog: what compaction would rewrite, from the live files and their version (the
                compaction component's planner); None leaves :attr:`TableState.backlog` unset.
            index: the column-stats index's own state (the index component); None: index off.
            small_file_bytes: files below this count as small (default ``compaction.min_file_bytes``).

        Returns:
            The :class:`TableState` at the latest version.

        Raises:
            TableNotFoundError: there is no table.
        """
        layout = self.layout()
        live = self.live_files()
        version, files, metadata = live.snapshot_with_metadata()
        sketches = self.sketches().latest(physical_names(metadata))
        index_state = index() if index is not None else None
        small = self.config.compaction.min_file_bytes if small_file_bytes is None else small_file_bytes
        key = (version, None if sketches is None else sketches.delta_version, index_state, small, backlog is None,
               layout)  # fmt: skip
        with self._lock:
            if self._history is None:
                self._history = CommitHistory(self.delta)
            if self._depth is None or tuple(self._depth.columns) != layout.clustering_columns:
                self._depth = DepthTracker(live, layout.clustering_columns)
            depth = self._depth
            history = self._history.up_to(version)
            cached = self._state
        if cached is not None and cached[0] == key:
            return dataclasses.replace(cached[1], observed_at=time.time())
        sizes = files["size"].to_numpy()
        clustering = None
        if sketches is not None:
            k = self.config.sketches.boundaries
            clustering = depth.depths(version, files, sketches, k)
        state = TableState(
            uri=self.uri, version=version, observed_at=time.time(), files=files.num_rows, bytes=int(sizes.sum()),
            rows=int(pc.sum(files["rows"]).as_py() or 0), small_files=int((sizes < small).sum()),
            file_sizes=np.asarray(sizes), last_commit_ms=history.last_commit_ms,
            oldest_commit_ms=history.oldest_commit_ms, last_rewrite=history.last_rewrite,
            last_vacuum=history.last_vacuum, streams=dict(history.streams),
            sketches_version=None if sketches is None else sketches.delta_version, clustering=clustering,
            backlog=backlog(files, version) if backlog is not None else None, index=index_state, layout=layout,
        )  # fmt: skip
        with self._lock:
            self._state = (key, state)
        return state
