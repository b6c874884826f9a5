"""One record of what a table looks like now: :class:`TableState`, and the commits it is read from.

``lakecluster status`` prints it, ``lakecluster report`` draws it, and the compactor's table
monitor exports it as gauges: all three read the same record, computed by
:meth:`lakecluster.table.LakeTable.state` from the handle's live-file view (the log's tail, see
``live_files.py``), the newest commits (:class:`CommitHistory`), the boundary sketches and, where
the caller supplies them, the compaction backlog and the index's own state (those belong to the
components, which pass them in).
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from lakecluster.table.metadata import parse_user_metadata

if TYPE_CHECKING:
    from lakecluster.table.layout_record import TableLayout
    from lakecluster.table.location import DeltaLocation

HISTORY_SCAN = 1000  # commits read back at the first look for the last rewrite, vacuum and stream commits
_PARALLEL_READS = 16  # commit files read at once while scanning back (one request each on object stores)


@dataclass(frozen=True)
class Operation:
    """A commit of one kind (the newest rewrite, the newest finished vacuum)."""

    version: int
    timestamp_ms: int | None
    metrics: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Backlog:
    """What the compaction planner would rewrite next (computed by the compaction component)."""

    groups: int
    bytes: int


@dataclass(frozen=True)
class IndexState:
    """The column-stats index as it describes itself (computed by the index component).

    ``version`` is None when there is no index yet; ``error`` says why it could not be read.
    """

    version: int | None = None
    segments: int = 0
    entries: int = 0
    error: str | None = None


@dataclass(frozen=True)
class StreamCommit:
    """A stream's newest commit to the table (its id is in the commit's metadata)."""

    version: int
    timestamp_ms: int | None
    metadata: Mapping[str, Any] = field(default_factory=dict)  # lakecluster's fields of its userMetadata


@dataclass(frozen=True)
class TableState:
    """The table's facts at one version: files and sizes, layout, backlog, the services' traces."""

    uri: str
    version: int
    observed_at: float  # Unix seconds
    files: int
    bytes: int
    rows: int
    small_files: int  # below compaction.min_file_bytes
    file_sizes: np.ndarray = field(compare=False, repr=False)  # bytes of every live file
    last_commit_ms: int | None = None
    oldest_commit_ms: int | None = None  # the oldest commit read (the table's creation if it is version 0's)
    last_rewrite: Operation | None = None
    last_vacuum: Operation | None = None
    streams: Mapping[str, StreamCommit] = field(default_factory=dict)
    sketches_version: int | None = None  # None: no boundary sketches yet
    clustering: Mapping[str, float] | None = None  # files a point query reads, per clustering column
    backlog: Backlog | None = None  # None: not asked for
    index: IndexState | None = None  # None: the index is off (or not asked for)
    layout: TableLayout | None = None  # the layout in effect, whose clustering depth ``clustering`` is

    def percentiles(self) -> dict[str, int]:
        """p10, p50, p90 and max of the file sizes (0 for an empty table)."""
        points = {"p10": 10, "p50": 50, "p90": 90, "max": 100}
        sizes = self.file_sizes
        return {name: int(np.percentile(sizes, p)) if len(sizes) else 0 for name, p in points.items()}


class CommitHistory:
    """The newest rewrite, vacuum, per-stream commit and commit time of a table, kept current.

    The first look reads back at most ``scan`` commits (stopping where log cleanup removed older
    ones), later looks only the commits since: the work grows with new commits, not with the log.
    """

    def __init__(self, location: DeltaLocation, scan: int = HISTORY_SCAN) -> None:
        self.location = location
        self.scan = scan
        self.version: int | None = None  # commits up to here were read
        self.last_commit_ms: int | None = None
        self.oldest_commit_ms: int | None = None
        self.oldest_version: int | None = None  # of the oldest commit read (0: the table's creation)
        self.last_rewrite: Operation | None = None
        self.last_vacuum: Operation | None = None
        self.streams: dict[str, StreamCommit] = {}
        self._lock = threading.Lock()

    def up_to(self, version: int) -> CommitHistory:
        """Read the commits up to ``version`` not read before (newest first); returns self."""
        with self._lock:
            if self.version is not None and version <= self.version:
                return self
            first_look = self.version is None
            oldest = max(0, version - self.scan + 1) if self.version is None else self.version + 1
            commits = self._newest_first(version, oldest)
            for v, info in commits if first_look else reversed(commits):
                self._take(v, info, first_look)
            if first_look and commits:
                self.oldest_version = commits[-1][0]
            self.version = version
            return self

    def _newest_first(self, newest: int, oldest: int) -> list[tuple[int, dict]]:
        """(version, commitInfo) from ``newest`` down to ``oldest``, ending at a cleaned-up commit."""
        out: list[tuple[int, dict]] = []
        versions = list(range(newest, oldest - 1, -1))
        with ThreadPoolExecutor(_PARALLEL_READS) as pool:
            for start in range(0, len(versions), _PARALLEL_READS * 4):
                chunk = versions[start : start + _PARALLEL_READS * 4]
                for v, info in zip(chunk, pool.map(self.location.commit_info, chunk), strict=True):
                    if info is None:
                        if not self.location.commit_file_exists(v):
                            return out  # cleaned up after a checkpoint: the history ends here
                        continue
                    out.append((v, info))
        return out

    def _take(self, version: int, info: dict, first_look: bool) -> None:
        """One commit: newest first at the first look (the first of a kind wins), oldest first
        after (the last of a kind wins)."""
        stamp = info.get("timestamp")
        if self.last_commit_ms is None or not first_look:
            self.last_commit_ms = stamp
        if first_look:
            self.oldest_commit_ms = stamp
        operation = info.get("operation")
        newer = not first_look
        if operation == "OPTIMIZE" and (newer or self.last_rewrite is None):
            self.last_rewrite = Operation(version, stamp, info.get("operationMetrics") or {})
        elif operation == "VACUUM END" and (newer or self.last_vacuum is None):
            self.last_vacuum = Operation(version, stamp, info.get("operationMetrics") or {})
        meta = parse_user_metadata(info.get("userMetadata"))
        stream = meta.get("stream") if meta else None
        if isinstance(stream, str) and (newer or stream not in self.streams):
            self.streams[stream] = StreamCommit(version, stamp, meta or {})
