"""The table's live files, kept current from the log's new commits (one view per table handle).

Read once from the whole snapshot (the last checkpoint, only the columns needed, and the commits
after it: ``snapshot.py``; delta-rs for logs that reader does not read), then brought forward by applying
the JSON commits after its version (``log.py``): a round costs the new commits plus a few
vectorised passes over the file table, never a second read of the snapshot. A commit that is gone
(log cleanup after a checkpoint) or that changes the table's metadata means one full read again.

One row per live file: ``path``, ``size``, ``rows``, ``partition.<p>`` (the partition value as
text), ``generation`` and ``run`` (from the file name, see ``planner.file_run``), and ``min.<c>``,
``max.<c>`` of the clustering columns (null when the file has no stats for them).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence

import pyarrow as pa
import pyarrow.compute as pc

from lakecluster.log_stats import partition_array
from lakecluster.schema import ColumnSpec, arrow_type
from lakecluster.table.location import DeltaLocation
from lakecluster.table.log import LogGap, NetChanges
from lakecluster.table.snapshot import Unsupported, parse_stats

log = logging.getLogger(__name__)

# The basename's first "part-g<generation>-<run>-" (what planner.file_run finds).
_RUN_IN_PATH = r"(?:^|/)[^/]*?part-g(?P<generation>\d+)-(?P<run>[0-9a-f]+)-[^/]*$"


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
        self.full_reads = 0  # how often the whole snapshot was read (once, unless the log had a gap)
        self._lock = threading.Lock()  # the compactor's rounds and the table monitor share one view

    def snapshot(self) -> tuple[int, pa.Table]:
        """(latest version, its live files), brought up to date first."""
        with self._lock:
            return self._refresh(), self.table

    def _schema(self) -> pa.Schema:
        fields = [pa.field("path", pa.string()), pa.field("size", pa.int64()), pa.field("rows", pa.int64())]
        fields += [pa.field(f"partition.{p.name}", pa.string()) for p in self.partition_by]
        fields += [pa.field("generation", pa.int32()), pa.field("run", pa.string())]
        for c in self.stats_columns:
            fields += [pa.field(f"min.{c.name}", arrow_type(c)), pa.field(f"max.{c.name}", arrow_type(c))]
        return pa.schema(fields)

    def _empty(self) -> pa.Table:
        return self._schema().empty_table()

    def refresh(self) -> int:
        """Bring the files to the table's latest version; returns that version."""
        with self._lock:
            return self._refresh()

    def _refresh(self) -> int:
        if self.version < 0:
            return self._read_snapshot("first read")
        try:
            commits = self.location.commits_after(self.version)
            if not commits:
                return self.version
            changes = NetChanges.of(commits)
            added = self._rows_of(list(changes.added.values()))
        except LogGap as e:
            return self._read_snapshot(str(e))
        except (ValueError, KeyError, TypeError) as e:
            return self._read_snapshot(f"a commit could not be read: {e}")
        gone = [*changes.removed, *changes.added]
        table = self.table
        if gone:
            table = table.filter(pc.invert(pc.is_in(table["path"], value_set=pa.array(gone, pa.string()))))
        self.table = pa.concat_tables([table, added]).combine_chunks() if added.num_rows else table
        self.version += len(commits)
        return self.version

    def _read_snapshot(self, reason: str) -> int:
        try:
            live = self.location.live_adds(self.partition_by, self.stats_columns)
            actions, configuration, version = live.actions, live.metadata.configuration, live.metadata.version
        except (Unsupported, LogGap) as e:  # a log this reader does not read: delta-rs reads the snapshot
            log.debug("live files of %s read through delta-rs (%s)", self.location.uri, e)
            table = self.location.open()
            actions, configuration = pa.table(table.get_add_actions(flatten=True)), table.metadata().configuration
            version = table.version()
        self.table = self._from_actions(actions)
        self.configuration = {k: v for k, v in configuration.items() if v is not None}
        self.version = version
        self.full_reads += 1
        log.debug("live files of %s read from the snapshot at version %d (%s): %d files", self.location.uri,
                  self.version, reason, self.table.num_rows)  # fmt: skip
        return self.version

    # -- the two sources ----------------------------------------------------------------------

    def _from_actions(self, actions: pa.Table) -> pa.Table:
        """Rows from delta-rs's flattened add actions (typed stats and partition values)."""
        n = actions.num_rows
        names = set(actions.column_names)
        cols: dict[str, pa.Array | pa.ChunkedArray] = {
            "path": actions["path"].cast(pa.string()),
            "size": actions["size_bytes"].cast(pa.int64()),
            "rows": actions["num_records"].cast(pa.int64()) if "num_records" in names else pa.nulls(n, pa.int64()),
        }
        for p in self.partition_by:
            key = f"partition.{p.name}"
            # Text as str() gives it, the same for typed values from delta-rs and the log's text.
            values = actions[key].to_pylist() if key in names else [None] * n
            cols[key] = pa.array([None if v is None else str(v) for v in values], pa.string())
        cols.update(_runs(cols["path"]))
        for c in self.stats_columns:
            for bound in ("min", "max"):
                key = f"{bound}.{c.name}"
                cols[key] = actions[key].cast(arrow_type(c)) if key in names else pa.nulls(n, arrow_type(c))
        return pa.table(cols, schema=self._schema())

    def _rows_of(self, adds: list[dict]) -> pa.Table:
        """Rows from ``add`` actions read from the JSON commits (stats as JSON text)."""
        if not adds:
            return self._empty()
        stats = parse_stats(pa.array([a.get("stats") for a in adds], pa.string()), self.stats_columns, False)
        paths = pa.array([a["path"] for a in adds], pa.string())
        cols: dict[str, pa.Array] = {
            "path": paths,
            "size": pa.array([int(a.get("size") or 0) for a in adds], pa.int64()),
            "rows": stats["num_records"],
        }
        for p in self.partition_by:
            typed = partition_array(p, [(a.get("partitionValues") or {}).get(p.name) for a in adds])
            cols[f"partition.{p.name}"] = pa.array([None if v is None else str(v) for v in typed.to_pylist()],
                                                   pa.string())  # fmt: skip
        cols.update(_runs(paths))
        for c in self.stats_columns:
            for bound in ("min", "max"):
                cols[f"{bound}.{c.name}"] = stats[f"{bound}.{c.name}"]
        return pa.table(cols, schema=self._schema())


def _runs(paths: pa.Array | pa.ChunkedArray) -> dict[str, pa.Array]:
    """``generation`` (0 when not written by compaction) and ``run`` (null then) of each path."""
    found = pc.extract_regex(paths, _RUN_IN_PATH)
    if isinstance(found, pa.ChunkedArray):
        found = found.combine_chunks()
    # struct_field, not .field(): a path that does not match is a null struct, and only
    # struct_field carries that null into the field.
    generation = pc.fill_null(pc.struct_field(found, "generation").cast(pa.int32()), 0)
    return {"generation": generation, "run": pc.struct_field(found, "run")}
