"""The table's live files, kept current from the log's new commits (one view per table handle).

Read once from the whole snapshot (the last checkpoint, only the columns needed, and the commits
after it: ``DeltaLocation.read_live_adds``), then brought forward by applying
the JSON commits after its version (``log.py``): a round costs the new commits plus a few
vectorised passes over the file table, never a second read of the snapshot. A commit that is gone
(log cleanup after a checkpoint) or that changes the table's metadata means one full read again.

Each refresh is also kept as a :class:`Change` (the rows that left and came) in a short log, so a
view kept beside this one (``depth.py``'s clustering depth) follows the same commits without
reading the whole file table again.

One row per live file: ``path``, ``size``, ``rows`` (its live rows: the stats' ``numRecords`` less
the rows its deletion vector deletes), ``deletion_vector`` (its descriptor, null for none: a file's
identity is its path and this; ``deletion_vectors.py``), ``base_row_id`` and
``default_row_commit_version`` (row tracking's, null without it), ``partition.<p>`` (the partition value as
text), ``generation``, ``run`` and ``layout`` (from the file name, ``DataFile.generation``; ``layout``
is the fingerprint of the clustering layout a compaction wrote the file under, ``clustering.layout_fingerprint``,
null for other files), and ``min.<c>``, ``max.<c>`` of the clustering columns (null when the file
has no stats for them).
"""

from __future__ import annotations

import logging
import re
import threading
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from lakecluster.log_stats import partition_array
from lakecluster.schema import ColumnSpec, arrow_type
from lakecluster.table.deletion_vectors import DESCRIPTOR_TYPE, DeletionVector, cardinalities, descriptors, file_key
from lakecluster.table.location import DeltaLocation
from lakecluster.table.log import LogGap, NetChanges
from lakecluster.table.metadata import table_properties
from lakecluster.table.snapshot import ROW_TRACKING, Metadata, parse_stats, physical_names

log = logging.getLogger(__name__)

# The basename's first "part-g<generation>-<run>-" .
_RUN_IN_PATH = r"(?:^|/)[^/]*?part-g(?P<generation>\d+)-(?P<run>[0-9a-f]+)-[^/]*$"
_SLASH = re.compile(b"/")
# The same at the very start of a path without "/" (see _generation_and_run).
_RUN_AT_START = r"^part-g(?P<generation>\d+)-(?P<run>[0-9a-f]+)-"
# The layout fingerprint after the run id ("part-g01-<run>-l<fingerprint>-..."); files written
# before fingerprints were recorded have none.
_LAYOUT_IN_PATH = r"(?:^|/)[^/]*?part-g\d+-[0-9a-f]+-l(?P<layout>[0-9a-f]+)-[^/]*$"


CHANGE_LOG_ROWS = 256 * 1024  # rows the change log keeps (older changes are dropped)


@dataclass(frozen=True)
class Change:
    """What one refresh did to the files: the rows that left (removed, or replaced by a new add of
    the same path) and the rows that came, from version ``after`` to version ``to``."""

    after: int
    to: int
    removed: pa.Table
    added: pa.Table


class LiveFiles:
    """The live files of the table at ``location``, with ``stats_columns``' min and max."""

    def __init__(self, location: DeltaLocation, partition_by: Sequence[ColumnSpec],
                 stats_columns: Sequence[ColumnSpec]) -> None:  # fmt: skip
        self.location = location
        self.partition_by = tuple(partition_by)
        self.stats_columns = tuple(stats_columns)
        self.version = -1
        self.table = self._empty()
        self.configuration: dict[str, str] = {}  # the table's properties (a change is a full read)
        self.metadata = Metadata(-1, '{"type":"struct","fields":[]}', (), {})  # schema and partitioning, likewise
        self.full_reads = 0  # how often the whole snapshot was read (once, unless the log had a gap)
        self._changes: deque[Change] = deque()  # the newest refreshes, for views kept beside this one
        self._lock = threading.Lock()  # the compactor's rounds and the table monitor share one view

    def snapshot(self) -> tuple[int, pa.Table]:
        """(latest version, its live files), brought up to date first."""
        version, table, _ = self.snapshot_with_metadata()
        return version, table

    def snapshot_with_metadata(self) -> tuple[int, pa.Table, Metadata]:
        """(latest version, its live files, the table's metadata there), brought up to date
        first and read together (another thread may refresh the view in between)."""
        with self._lock:
            return self._refresh(), self.table, self.metadata

    def _schema(self) -> pa.Schema:
        return _rows_schema(self.partition_by, self.stats_columns)

    def _empty(self) -> pa.Table:
        return self._schema().empty_table()

    def cover(self, columns: Sequence[ColumnSpec]) -> None:
        """Keep ``columns``' min and max too (the clustering columns of a layout adopted since the
        view was made): a column not kept yet means one full read at the next refresh."""
        with self._lock:
            kept = {c.name for c in self.stats_columns}
            missing = [c for c in columns if c.name not in kept and c.name not in {p.name for p in self.partition_by}]
            if missing:
                self.stats_columns = (*self.stats_columns, *missing)
                self.version = -1

    def with_stats(self, columns: Sequence[ColumnSpec]) -> tuple[int, pa.Table, Metadata]:
        """(latest version, its live files with ``columns``' min and max too, the table's metadata
        there): the live files a caller that needs other columns' bounds reads (``cover``)."""
        self.cover(columns)
        return self.snapshot_with_metadata()

    def refresh(self) -> int:
        """Bring the files to the table's latest version; returns that version."""
        with self._lock:
            return self._refresh()

    def changes(self, full_reads: int, after: int, to: int) -> list[Change] | None:
        """The refreshes that took the files from version ``after`` to ``to`` (both seen by a reader
        when :attr:`full_reads` was ``full_reads``); None when they are no longer known (a full read
        since, or dropped from the log): the reader starts over from :meth:`snapshot`."""
        with self._lock:
            if full_reads != self.full_reads:
                return None
            steps = [c for c in self._changes if after < c.to <= to]
            if after == to:
                return []
            if not steps or steps[0].after != after or steps[-1].to != to:
                return None
            return steps

    def _log_change(self, change: Change) -> None:
        self._changes.append(change)
        rows = sum(c.removed.num_rows + c.added.num_rows for c in self._changes)
        while self._changes and rows > CHANGE_LOG_ROWS:
            dropped = self._changes.popleft()
            rows -= dropped.removed.num_rows + dropped.added.num_rows

    def _refresh(self) -> int:
        if self.version < 0:
            return self._read_snapshot("first read" if self.full_reads == 0 else "columns added")
        try:
            commits = self.location.commits_after(self.version)
            if not commits:
                return self.version
            if any("protocol" in action for actions in commits for action in actions):
                raise LogGap("a commit changed the table's protocol (its features)")
            changes = NetChanges.of(commits)
            added = self._rows_of(list(changes.added.values()))
        except LogGap as e:
            return self._read_snapshot(str(e))
        except (ValueError, KeyError, TypeError) as e:
            return self._read_snapshot(f"a commit could not be read: {e}")
        gone = [*changes.removed, *changes.added]
        table, removed = self.table, self._empty()
        if gone:
            leaving = pc.is_in(table["path"], value_set=pa.array(gone, pa.string()))
            removed, table = table.filter(leaving), table.filter(pc.invert(leaving))
        self.table = pa.concat_tables([table, added]).combine_chunks() if added.num_rows else table
        self._log_change(Change(self.version, self.version + len(commits), removed, added))
        self.version += len(commits)
        if changes.domains:  # the layout's record, row tracking's high-water mark: no full read
            domains = {**self.metadata.domains, **changes.domains}
            self.metadata = replace(self.metadata, domains={d: c for d, c in domains.items() if c is not None})
        return self.version

    def _read_snapshot(self, reason: str) -> int:
        live = self.location.read_live_adds(self.partition_by, self.stats_columns)
        self.table = live_file_rows(live.actions, self.partition_by, self.stats_columns)
        self.configuration = table_properties(live.metadata.configuration)
        self.metadata = live.metadata
        self.version = live.metadata.version
        self.full_reads += 1
        self._changes.clear()
        log.debug("live files of %s read from the snapshot at version %d (%s): %d files", self.location.uri,
                  self.version, reason, self.table.num_rows)  # fmt: skip
        return self.version

    # -- the commits after it -----------------------------------------------------------------

    def _rows_of(self, adds: list[dict]) -> pa.Table:
        """Rows from ``add`` actions read from the JSON commits (stats as JSON text)."""
        if not adds:
            return self._empty()
        # The log keys stats and partition values by physical names (column mapping), as in the
        # snapshot: a change of them is a metadata change, so the last full read's names hold.
        physical = physical_names(self.metadata)
        logged = [replace(c, name=physical.get(c.name, c.name)) for c in self.stats_columns]
        stats = parse_stats(pa.array([a.get("stats") for a in adds], pa.string()), logged, False)
        paths = pa.array([a["path"] for a in adds], pa.string())
        vectors = descriptors([a.get("deletionVector") for a in adds])
        cols: dict[str, pa.Array] = {
            "path": paths,
            "size": pa.array([int(a.get("size") or 0) for a in adds], pa.int64()),
            "rows": pc.subtract(stats["num_records"], cardinalities(vectors)),
            "deletion_vector": vectors,
            **{name: pa.array([a.get(key) for a in adds], pa.int64()) for key, name in ROW_TRACKING.items()},
        }
        for p in self.partition_by:
            key = physical.get(p.name, p.name)
            typed = partition_array(p, [(a.get("partitionValues") or {}).get(key) for a in adds])
            cols[f"partition.{p.name}"] = pa.array([None if v is None else str(v) for v in typed.to_pylist()],
                                                   pa.string())  # fmt: skip
        cols.update(_runs(paths))
        for c, as_logged in zip(self.stats_columns, logged, strict=True):
            for bound in ("min", "max"):
                cols[f"{bound}.{c.name}"] = stats[f"{bound}.{as_logged.name}"]
        return pa.table(cols, schema=self._schema())


def _rows_schema(partition_by: Sequence[ColumnSpec], stats_columns: Sequence[ColumnSpec]) -> pa.Schema:
    fields = [pa.field("path", pa.string()), pa.field("size", pa.int64()), pa.field("rows", pa.int64()),
              pa.field("deletion_vector", DESCRIPTOR_TYPE)]  # fmt: skip
    fields += [pa.field(name, pa.int64()) for name in ROW_TRACKING.values()]
    fields += [pa.field(f"partition.{p.name}", pa.string()) for p in partition_by]
    fields += [pa.field("generation", pa.int32()), pa.field("run", pa.string()), pa.field("layout", pa.string())]
    for c in stats_columns:
        fields += [pa.field(f"min.{c.name}", arrow_type(c)), pa.field(f"max.{c.name}", arrow_type(c))]
    return pa.schema(fields)


def live_file_rows(actions: pa.Table, partition_by: Sequence[ColumnSpec],
                   stats_columns: Sequence[ColumnSpec]) -> pa.Table:  # fmt: skip
    """The live files' rows (this module's columns) of a snapshot's add actions as
    ``snapshot.read_live_adds`` reads them (typed stats and partition values)."""
    n = actions.num_rows
    names = set(actions.column_names)
    vectors = actions["deletion_vector"].cast(DESCRIPTOR_TYPE) if "deletion_vector" in names else \
        pa.nulls(n, DESCRIPTOR_TYPE)  # fmt: skip
    records = actions["num_records"].cast(pa.int64()) if "num_records" in names else pa.nulls(n, pa.int64())
    cols: dict[str, pa.Array | pa.ChunkedArray] = {
        "path": actions["path"].cast(pa.string()),
        "size": actions["size_bytes"].cast(pa.int64()),
        "rows": pc.subtract(records, cardinalities(vectors)),
        "deletion_vector": vectors,
        **{name: actions[name] if name in names else pa.nulls(n, pa.int64()) for name in ROW_TRACKING.values()},
    }
    for p in partition_by:
        key = f"partition.{p.name}"
        # Text as str() gives it, the same for typed values from the snapshot and the log's text.
        values = actions[key].to_pylist() if key in names else [None] * n
        cols[key] = pa.array([None if v is None else str(v) for v in values], pa.string())
    cols.update(_runs(cols["path"]))
    for c in stats_columns:
        for bound in ("min", "max"):
            key = f"{bound}.{c.name}"
            cols[key] = actions[key].cast(arrow_type(c)) if key in names else pa.nulls(n, arrow_type(c))
    return pa.table(cols, schema=_rows_schema(partition_by, stats_columns))


def _runs(paths: pa.Array | pa.ChunkedArray) -> dict[str, pa.Array]:
    """``generation`` (0 when not written by compaction), ``run`` (null then) and ``layout`` (null
    when the name carries no layout fingerprint) of each path."""
    if isinstance(paths, pa.ChunkedArray):
        paths = paths.combine_chunks()
    generation, run = _generation_and_run(paths)
    layout = pc.extract_regex(paths, _LAYOUT_IN_PATH)
    # struct_field, not .field(): a path that does not match is a null struct, and only
    # struct_field carries that null into the field.
    return {"generation": pc.fill_null(generation.cast(pa.int32()), 0), "run": run,
            "layout": pc.struct_field(layout, "layout")}  # fmt: skip


def _generation_and_run(paths: pa.Array) -> tuple[pa.Array, pa.Array]:
    """:data:`_RUN_IN_PATH`'s generation and run of each path (null where it does not match).

    That pattern reads the whole name to check no ``/`` follows (a million paths: 0.7 s). A table
    without partitions has no ``/`` in any path: there a match at the start of the path is the
    one it finds, and the pattern without its tail (0.1 s) finds it; the paths it does not match
    (a name not starting with ``part-g``, such as a stream's ``part-00000-...``) take the whole pattern.
    """
    if _has_slash(paths):
        found = pc.extract_regex(paths, _RUN_IN_PATH)
        return pc.struct_field(found, "generation"), pc.struct_field(found, "run")
    found = pc.extract_regex(paths, _RUN_AT_START)
    generation, run = pc.struct_field(found, "generation"), pc.struct_field(found, "run")
    missed = pc.and_(pc.is_null(found), pc.is_valid(paths))
    if not pc.any(missed).as_py():
        return generation, run
    rest = pc.extract_regex(paths.filter(missed), _RUN_IN_PATH)
    at = np.flatnonzero(missed.to_numpy(zero_copy_only=False))
    return (_put(generation, at, pc.struct_field(rest, "generation")), _put(run, at, pc.struct_field(rest, "run")))


def _has_slash(paths: pa.Array) -> bool:
    """Whether any of the paths holds a ``/`` (one pass over their bytes)."""
    if not len(paths) or paths.buffers()[2] is None:
        return False
    wide = pa.types.is_large_string(paths.type) or pa.types.is_large_binary(paths.type)
    offsets = np.frombuffer(paths.buffers()[1], dtype=np.int64 if wide else np.int32)
    first, last = int(offsets[paths.offset]), int(offsets[paths.offset + len(paths)])
    # re searches the buffer where it lies (no copy, no array of comparisons): 0.03 s for 80 MB.
    return _SLASH.search(memoryview(paths.buffers()[2])[first:last]) is not None


def _put(values: pa.Array, at: np.ndarray, new: pa.Array) -> pa.Array:
    """``values`` with those at positions ``at`` replaced by ``new``, in order."""
    mask = np.zeros(len(values), dtype=bool)
    mask[at] = True
    return pc.replace_with_mask(values, pa.array(mask), new)


@dataclass(frozen=True)
class DataFile:
    """A live file as the planner sees it. Its identity in the log is its path and its deletion
    vector (:attr:`key`): a ``DELETE`` may leave the path and change the vector."""

    path: str
    size: int
    rows: int  # live rows: the stats' count less the rows the deletion vector deletes
    partition: tuple[tuple[str, str | None], ...]
    generation: int
    run: str | None  # None for generation 0
    deletion_vector: DeletionVector | None = None
    base_row_id: int | None = None  # row tracking: the first row's id (null: no row tracking)
    default_row_commit_version: int | None = None

    @property
    def partition_values(self) -> dict[str, str | None]:
        return dict(self.partition)

    @property
    def key(self) -> str:
        """The file's identity in the log (``deletion_vectors.file_key``)."""
        return file_key(self.path, self.deletion_vector)

    def logged(self) -> dict[str, Any]:
        """The fields the log's ``add`` and ``remove`` actions name this file by."""
        out: dict[str, Any] = {"path": self.path, "partitionValues": self.partition_values, "size": self.size}
        if self.deletion_vector is not None:
            out["deletionVector"] = self.deletion_vector.to_log()
        if self.base_row_id is not None:
            out["baseRowId"] = self.base_row_id
        if self.default_row_commit_version is not None:
            out["defaultRowCommitVersion"] = self.default_row_commit_version
        return out


def data_files(rows: pa.Table, partition_by: Sequence[str]) -> list[DataFile]:
    """The planner's files of rows of the live files' table (``live_files.LiveFiles``)."""
    names = ["path", "size", "rows", "generation", "run", "deletion_vector", "base_row_id",
             "default_row_commit_version"]
    values = {c: rows[c].to_pylist() if c in rows.column_names else [None] * rows.num_rows for c in names}
    parts = {p: rows[f"partition.{p}"].to_pylist() for p in partition_by}
    return [
        DataFile(path, size, n or 0, tuple((p, parts[p][i]) for p in partition_by), gen, run, DeletionVector.of(dv),
                 base, version)
        for i, (path, size, n, gen, run, dv, base, version) in enumerate(zip(*(values[c] for c in names), strict=True))
    ]  # fmt: skip


def typed_partitions(rows: pa.Table, partition_by: Sequence[ColumnSpec]) -> pa.Table:
    """``rows`` of the live files with their ``partition.<p>`` columns typed as the columns are
    (the log keeps partition values as text)."""
    for p in partition_by:
        name = f"partition.{p.name}"
        rows = rows.set_column(rows.schema.get_field_index(name), name, partition_array(p, rows[name].to_pylist()))
    return rows


def off_layout_mask(live: pa.Table, fingerprint: str) -> pa.ChunkedArray:
    """Which rows of the live files were not written under the layout ``fingerprint``."""
    return pc.fill_null(pc.not_equal(live["layout"], pa.scalar(fingerprint, pa.string())), True)


def off_layout(live: pa.Table, fingerprint: str) -> pa.Array:
    """The paths of the live files not written under the layout ``fingerprint``."""
    return live["path"].filter(off_layout_mask(live, fingerprint)).combine_chunks()
