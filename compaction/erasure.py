"""Erased rows leave lakecluster's own copies of their values too.

Another writer's ``DELETE`` (or ``UPDATE``, ``MERGE``) takes rows out of the table; their values
also live in what lakecluster keeps beside it: the boundary sketches (sampled values, strings up
to ``sketches.max_string_chars``) and the column-stats index (each file's minimum and maximum).
After a commit that deleted rows (a ``remove`` with ``dataChange``: compactions remove with none,
the stream never removes), the compactor, at most every ``compaction.forget_interval_s``:

* rebuilds the boundary sketches from a sample of the table's live rows (deletion vectors
  applied) and writes them as the configured stream's newest sketch file, every other stream's
  newest file emptied (the rebuild covers their rows too), older files deleted;
* rebuilds the column-stats index from the log (a file a ``DELETE`` rewrote, or a purge,
  leaves its stale minimum and maximum; the index drops unnamed files after ``index.gc_grace_s``).

A stream that wrote its sketch file over the rebuilt one (it merges into a newer file it finds,
``StreamSink``; a batch in flight can still miss it) is found on the next round, by the rebuild
version its newest file descends from (``BoundarySketches.erased_at``), and the rebuild runs again.
The version a pass covered is kept in ``_lakecluster/erasure.json``: a restarted compactor reads
only the commits after it (before any pass, the commits after the last checkpoint, and the
checkpoint's tombstones for the removes before it). The quarantine table's records are kept
``vacuum.quarantine_retention_days`` (:func:`expire_quarantine`).
"""

from __future__ import annotations

import datetime
import json
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from lakecluster.compaction.table_sketches import read_columns, sample_files
from lakecluster.config import Config
from lakecluster.errors import TableNotFoundError
from lakecluster.schema import ColumnSpec
from lakecluster.sketches import BoundarySketches
from lakecluster.table import LakeTable, LogGap
from lakecluster.table.paths import SIDE_FOLDER, SKETCHES
from lakecluster.table.snapshot import Checkpoint, Unsupported, last_checkpoint, physical_names

log = logging.getLogger(__name__)

MARKER = "erasure.json"


@dataclass(frozen=True)
class ForgetPass:
    """What a pass did: the table version its rebuilds read, the streams whose sketches it rewrote."""

    version: int
    streams: tuple[str, ...]
    index_rebuilt: bool


def deleting_version(commits: list[list[dict]], first: int) -> int | None:
    """The newest of ``commits`` (numbered from ``first``) that deleted rows, None when none did."""
    found = None
    for offset, actions in enumerate(commits):
        if any("remove" in a and a["remove"].get("dataChange", True) is not False for a in actions):
            found = first + offset
    return found


class Erasure:
    """The compactor's watch for commits that deleted rows, and the rebuilds after them."""

    def __init__(self, config: Config, table: LakeTable, rebuild_index: Callable[[], object] | None) -> None:
        self.config = config
        self.table = table
        self.rebuild_index = rebuild_index
        self.pending: int | None = None  # the newest version that deleted rows and no pass covered
        marker = self._read_marker()
        if marker is None:  # no pass yet: the commits after the last checkpoint, and its tombstones
            marker = self._since_checkpoint()
        self.checked = marker  # commits up to here are looked at
        self.last_pass: float | None = None
        self.verify_at: int | None = None  # a pass's version whose sketch files are to be checked

    @property
    def _marker_uri(self) -> str:
        return f"{self.table.uri}/{SIDE_FOLDER}/{MARKER}"

    def _read_marker(self) -> int | None:
        fs, path = self.table.filesystem(self._marker_uri)
        try:
            with fs.open_input_stream(path) as f:
                return int(json.loads(f.read())["version"])
        except (FileNotFoundError, KeyError, ValueError, TypeError):
            return None

    def _since_checkpoint(self) -> int:
        """The last checkpoint's version (-1: none): the commits after it are looked at as they
        come; the removes it keeps (its tombstones, within Delta's tombstone retention) tell of
        deletes before it, which make a pass due at once."""
        location = self.table.delta
        try:
            checkpoint = last_checkpoint(location.fs, location.log_dir)
        except (Unsupported, OSError):
            return -1
        if checkpoint.version >= 0 and _tombstones_deleted_rows(location.fs, location.log_dir, checkpoint):
            self.pending = checkpoint.version
        return checkpoint.version

    def _write_marker(self, version: int) -> None:
        fs, path = self.table.filesystem(self._marker_uri)
        with fs.open_output_stream(path) as f:  # one PUT, or one local write: a whole marker or the old one
            f.write(json.dumps({"version": version, "at": time.time()}).encode())

    def watch(self) -> None:
        """Look at the commits since the last look for one that deleted rows."""
        location = self.table.delta
        try:
            commits = location.commits_after(self.checked)
        except LogGap:  # commits gone before they were looked at: rows may have been deleted
            latest = location.latest_version()
            if latest is not None:
                self.pending, self.checked = latest, latest
            return
        found = deleting_version(commits, self.checked + 1)
        if found is not None:
            self.pending = found
        self.checked += len(commits)

    def due(self) -> bool:
        """Whether a pass is due now: rows were deleted since the last one (or a stream wrote over
        its sketches), and the last one is older than ``compaction.forget_interval_s``."""
        if self.pending is None:
            return False
        interval = self.config.compaction.forget_interval_s
        return self.last_pass is None or time.monotonic() - self.last_pass >= interval

    def verify(self) -> None:
        """After a pass: a stream whose newest sketch file does not descend from the rebuild
        (it wrote its own over it) makes the next pass due."""
        if self.verify_at is None:
            return
        stale = [stream for stream, erased in self._stream_sketches().items() if erased < self.verify_at]
        if stale:
            log.warning("erasure: stream(s) %s wrote sketches over the rebuild at version %d; it runs again",
                        ", ".join(stale), self.verify_at)  # fmt: skip
            self.pending = max(self.pending or -1, self.verify_at)
            self.last_pass = None
        self.verify_at = None

    def _stream_sketches(self) -> dict[str, int]:
        """Each stream folder's newest sketch file's ``erased_at`` (streams without one left out)."""
        out: dict[str, int] = {}
        for stream in self._streams():
            latest = self.table.sketches(stream).latest()
            if latest is not None:
                out[stream] = latest.erased_at
        return out

    def _streams(self) -> list[str]:
        fs, streams = self.table.filesystem(self.table.paths.streams)
        infos = fs.get_file_info(pafs.FileSelector(streams, allow_not_found=True))
        return sorted(i.base_name for i in infos if i.type == pafs.FileType.Directory)

    def forget(self, live: pa.Table, version: int) -> ForgetPass:
        """Rebuild the sketches from the ``live`` files' rows at ``version`` and the index from the log."""
        streams = self.rebuild_sketches(live, version)
        rebuilt = False
        if self.rebuild_index is not None:
            self.rebuild_index()
            rebuilt = True
        self._write_marker(version)
        self.pending, self.last_pass, self.verify_at = None, time.monotonic(), version
        log.info("erasure: rows were deleted; sketches (%s) and index rebuilt from the live data at version %d",
                 ", ".join(streams) or "none", version)  # fmt: skip
        return ForgetPass(version, tuple(streams), rebuilt)

    def rebuild_sketches(self, live: pa.Table, version: int) -> list[str]:
        """Sketches of every sketched column from a sample of the live rows: the configured
        stream's newest file; every other stream's newest file empty; older files deleted."""
        present = {name: stream for stream in self._streams() if (latest := self.table.sketches(stream).latest())
                   is not None for name in latest.sketches}  # fmt: skip
        t, sk = self.config.table, self.config.sketches
        declared = {c.name: c for c in t.columns if c.name not in t.partition_by}
        columns = [declared[n] for n in dict.fromkeys([*t.clustering_columns, *present]) if n in declared]
        if not columns:
            return []
        built = _sketch(self.table, live, version, columns, sk.k, sk.max_string_chars)
        written = []
        for stream in dict.fromkeys([self.table.stream_id, *self._streams()]):
            store = self.table.sketches(stream)
            latest = store.latest()
            if latest is None and stream != self.table.stream_id:
                continue
            fresh = built if stream == self.table.stream_id else BoundarySketches.empty(
                columns, k=sk.k, max_string_chars=sk.max_string_chars)  # fmt: skip
            fresh.stream_batch_id = latest.stream_batch_id if latest is not None else -1
            fresh.delta_version = max(version, latest.delta_version if latest is not None else -1)
            fresh.from_table = {c.name: version for c in columns} if stream == self.table.stream_id else {}
            fresh.erased_at = version
            fresh.follow(physical_names(self.table.live_files().metadata))
            store.write(fresh, retain=1)
            written.append(stream)
        fs, legacy = self.table.filesystem(f"{self.table.uri}/{SIDE_FOLDER}/{SKETCHES}")
        for info in fs.get_file_info(pafs.FileSelector(legacy, allow_not_found=True)):
            if info.is_file:  # sketches of releases before stream ids
                fs.delete_file(info.path)
        return written


def _tombstones_deleted_rows(fs: pafs.FileSystem, log_dir: str, checkpoint: Checkpoint) -> bool:
    """Whether the checkpoint keeps a remove with ``dataChange`` (a delete before it)."""
    if any("remove" in a and a["remove"].get("dataChange", True) is not False for a in checkpoint.actions):
        return True
    for name in checkpoint.parts:
        parquet = pq.ParquetFile(fs.open_input_file(f"{log_dir}/{name}"))
        remove = parquet.schema_arrow.field("remove").type if "remove" in parquet.schema_arrow.names else None
        if remove is None or remove.get_field_index("dataChange") < 0:
            continue
        for batch in parquet.iter_batches(columns=["remove.dataChange"]):
            changed = pc.struct_field(batch.column("remove"), "dataChange")
            if pc.any(pc.fill_null(changed, False)).as_py():
                return True
    return False


def _sketch(table: LakeTable, live: pa.Table, version: int, columns: list[ColumnSpec], k: int,
            max_string_chars: int) -> BoundarySketches:  # fmt: skip
    chosen = sample_files(live, version)
    rows = read_columns(table, chosen, columns)
    built = BoundarySketches.empty(columns, k=k, max_string_chars=max_string_chars)
    for c in columns:
        built.sketches[c.name].update(rows[c.name])
    return built


QUARANTINED_AT = ColumnSpec("quarantined_at", "timestamp")


def expire_quarantine(spark: Callable[[], object], table: LakeTable, days: float) -> int:
    """Delete the quarantine table's records older than ``days`` (0: keep them all); returns the
    files that held some (0: nothing was old enough, and no Spark job ran). Vacuum then deletes
    their files once the deletion is older than its retention."""
    if days <= 0 or not table.quarantine.exists():
        return 0
    try:
        live = table.quarantine.read_live_adds([], [QUARANTINED_AT])
    except TableNotFoundError:
        return 0
    cutoff = datetime.datetime.now(datetime.UTC) - datetime.timedelta(days=days)
    oldest = live.actions["min.quarantined_at"]
    due = pc.sum(pc.fill_null(pc.less(oldest, pa.scalar(cutoff, oldest.type)), True).cast(pa.int64())).as_py() or 0
    if not due:
        return 0
    session = spark()
    session.sql(f"DELETE FROM delta.`{table.quarantine.uri}` "  # type: ignore[attr-defined]
                f"WHERE quarantined_at < TIMESTAMP '{cutoff.strftime('%Y-%m-%d %H:%M:%S.%f')}+00:00'")  # fmt: skip
    log.info("quarantine of %s: records older than %g day(s) deleted (%d file(s) held some)", table.uri, days, due)
    return int(due)
