"""The index on storage: an LSM of Parquet files sorted by (column, partition, file), and a manifest.

``<index path>/manifest.json`` names the Delta version the index reflects, the table's columns,
the base file and the delta segments (oldest first). It is replaced atomically (locally: write a
temporary file, then rename; on object stores: one PUT of the whole object): a reader sees either
the old or the new index, never a mix. Every data file is sorted by the key and written so that
**no row group spans two columns**, with row-group statistics on the key: a reader of one column
reads the footer, then only that column's row groups. A segment holds the rows of files added
since the previous sync and tombstones (``deleted = true``) of removed files; for each (column,
file) the newest file wins. Segments merge by size (``merge_plan``): the newest ones together as
they grow, into a new base only when they hold half as many rows as the base, so a sync's work
grows with the new files, not the table.

Several processes may sync at once (the stream, the compactor, ``prune``), on local disk or on an
object store with neither locks nor atomic renames. So publishing never deletes anything:

* A writer re-reads the manifest just before publishing and gives up when the index is already at
  a newer version (or at its version, from another base): it never moves the index back.
* The manifest records when each file stopped being named (``retired``). The collector (``gc``)
  deletes a data file only when the current manifest does not name it and it was retired, or (never
  named: another writer's unpublished segment, a crashed writer's leftover) written, at least
  ``gc_grace_s`` ago. A reader or writer holding an older manifest has that long to finish.
* A writer publishes only within half the grace period of reading the manifest it builds on (the
  other half absorbs clock skew), and never a manifest naming a file that is gone.
"""

from __future__ import annotations

import json
import logging
import re
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import TypeVar

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from pyarrow import fs as pafs

from lakecluster.errors import StatsIndexError
from lakecluster.index.stats import KEY, ROW_SCHEMA, empty_rows
from lakecluster.schema import ColumnSpec

FORMAT = 1
MANIFEST = "manifest.json"
GC_GRACE_S_DEFAULT = 3600.0  # index.gc_grace_s: how long unreferenced index files are kept
_TMP = f".{MANIFEST}."  # prefix of temporary manifests (local and HDFS-like storage)
# Object stores: a PUT replaces the whole object atomically, and a "move" is a copy plus a delete.
_OBJECT_STORES = frozenset({"s3", "gcs", "abfs"})
_T = TypeVar("_T")
_ROWS_IN_NAME = re.compile(r"-r(\d+)\.parquet$")
log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Manifest:
    delta_version: int
    table_columns: list[dict[str, str]]  # every column of the table: {"name", "type"}
    indexed: list[str]
    partition_by: list[str]
    fingerprint: dict
    base: str | None = None
    segments: list[str] = field(default_factory=list)
    # Data files earlier manifests named and this one does not -> when they stopped being named
    # (Unix seconds); the collector keeps them for the grace period after that.
    retired: dict[str, float] = field(default_factory=dict)
    format: int = FORMAT

    def columns(self) -> tuple[ColumnSpec, ...]:
        return tuple(ColumnSpec(c["name"], c["type"]) for c in self.table_columns)

    def indexed_columns(self) -> tuple[ColumnSpec, ...]:
        by_name = {c.name: c for c in self.columns()}
        return tuple(by_name[n] for n in self.indexed)

    @property
    def files(self) -> list[str]:
        return ([self.base] if self.base else []) + list(self.segments)


@dataclass(frozen=True)
class Publication:
    """What became of a new manifest: published, or not (``reason``) because publishing it was
    unnecessary (the index is already at a newer version) or unsafe (the writer took too long)."""

    manifest: Manifest
    published: bool
    reason: str = ""


class IndexFilesMissing(StatsIndexError):
    """A manifest about to be published names data files that are gone (only a rebuild helps)."""


@dataclass(frozen=True)
class ColumnRead:
    rows: pa.Table  # live rows of the column
    bytes_read: int  # footers + the column chunks of the row groups read
    row_groups: int


class IndexStore:
    """The index under ``path`` (``root`` inside ``fs``). A store reads the data files of the manifest it
    last returned from :meth:`manifest` (or published): a caller that looked at the manifest gets
    exactly its rows."""

    def __init__(self, path: str, fs: pafs.FileSystem, root: str, *, row_group_rows: int = 16_384,
                 gc_grace_s: float = GC_GRACE_S_DEFAULT) -> None:  # fmt: skip
        self.path = path.rstrip("/")
        self.fs, self.root = fs, root.rstrip("/")
        self.row_group_rows = row_group_rows
        self.gc_grace_s = gc_grace_s
        self._pinned: Manifest | None = None

    # -- manifest ---------------------------------------------------------------------------

    def manifest(self) -> Manifest | None:
        """The current manifest, None when there is no index; StatsIndexError when unreadable.
        Later reads of this store use it (until the next call or publication)."""
        self._pinned = self._load()
        return self._pinned

    def _load(self) -> Manifest | None:
        try:
            with self.fs.open_input_stream(f"{self.root}/{MANIFEST}") as f:
                raw = json.loads(f.read())
        except FileNotFoundError:
            return None
        except (OSError, ValueError) as e:
            raise StatsIndexError(f"index manifest under {self.path} is unreadable: {e}") from e
        if not isinstance(raw, dict) or raw.get("format") != FORMAT:
            raise StatsIndexError(f"index manifest under {self.path} has an unknown format")
        try:
            return Manifest(**raw)
        except TypeError as e:
            raise StatsIndexError(f"index manifest under {self.path} is inconsistent: {e}") from e

    def publish(self, manifest: Manifest, *, based_on: Manifest | None, started: float) -> Publication:
        """Make ``manifest`` the current one, unless that would move the index back or is unsafe.

        ``based_on`` is the manifest the new one was derived from (None: built from scratch);
        ``started`` the ``time.monotonic()`` at which the writer read it (or began writing files).
        Deletes nothing itself: afterwards it runs the collector (:meth:`gc`), which keeps every
        file for the grace period. Raises IndexFilesMissing when the manifest names a file that
        is gone.
        """
        listing = self._list()  # before the manifest is read again: see gc()
        try:
            current = self._load()
        except StatsIndexError:
            current = None  # unreadable: replacing it is the point
        reason = _superseded(current, manifest, based_on)
        if not reason and self.gc_grace_s > 0 and time.monotonic() - started > self.gc_grace_s / 2:
            # Files this writer relies on may be collected from now on (the other half of the
            # grace period absorbs clock skew between machines and the store).
            reason = (f"the sync took {time.monotonic() - started:.0f}s, more than half of index.gc_grace_s "
                      f"({self.gc_grace_s:g}s)")  # fmt: skip
        if reason:
            log.info("index under %s: version %d not published: %s", self.path, manifest.delta_version, reason)
            self._pinned = None
            return Publication(manifest, False, reason)
        missing = [name for name in manifest.files if name not in listing]
        if missing:
            raise IndexFilesMissing(f"index files under {self.path} are missing: {', '.join(missing)}")
        now = time.time()
        manifest = Manifest(**{**asdict(manifest), "retired": self._retired(manifest, (based_on, current), now)})
        self._write_manifest(manifest)
        self._pinned = manifest
        try:
            self.gc(now=now, listing=listing)
        except OSError:  # collecting is best effort: the next publication tries again
            log.warning("collecting unreferenced index files under %s failed", self.path, exc_info=True)
        return Publication(manifest, True)

    def _retired(self, new: Manifest, sources: Sequence[Manifest | None], now: float) -> dict[str, float]:
        """``new``'s retired files: those the sources name and it does not (retired now), and the
        sources' retired files still within the grace period (past it they are collectable anyway)."""
        named = set(new.files)
        out: dict[str, float] = {}
        for m in sources:
            for name, at in (m.retired if m else {}).items():
                if name not in named and now - at < self.gc_grace_s:
                    out[name] = max(at, out.get(name, at))
        for m in sources:
            for name in m.files if m else []:
                if name not in named:
                    out[name] = now
        return dict(sorted(out.items()))

    def _write_manifest(self, manifest: Manifest) -> None:
        data = json.dumps(asdict(manifest), indent=1).encode()
        target = f"{self.root}/{MANIFEST}"
        self.fs.create_dir(self.root, recursive=True)
        if self.fs.type_name in _OBJECT_STORES:
            # One PUT is atomic: readers see the old or the new object. A temporary object and
            # fs.move would be a copy and a delete, no better and two more requests.
            with self.fs.open_output_stream(target) as out:
                out.write(data)
            return
        tmp = f"{self.root}/{_TMP}{uuid.uuid4().hex}"
        with self.fs.open_output_stream(tmp) as out:
            out.write(data)
        self.fs.move(tmp, target)  # rename(2): atomic, replaces the old manifest

    # -- collecting garbage -------------------------------------------------------------------

    def _list(self) -> dict[str, float | None]:
        """Index data files and temporary manifests -> modification time (Unix seconds, None: unknown)."""
        out: dict[str, float | None] = {}
        for info in self.fs.get_file_info(pafs.FileSelector(self.root, allow_not_found=True)):
            name = info.base_name
            if info.type == pafs.FileType.File and (name.endswith(".parquet") or name.startswith(_TMP)):
                out[name] = info.mtime_ns / 1e9 if info.mtime_ns is not None else None
        return out

    def gc(self, *, now: float | None = None, listing: dict[str, float | None] | None = None) -> list[str]:
        """Delete the index files no current manifest names that were retired (or, never named,
        written) at least ``gc_grace_s`` before ``now``; returns their names.

        The directory is listed before the manifest is read, so a file published meanwhile is
        never mistaken for garbage unless it was retired or written more than the grace period
        ago, which a writer that publishes in time (see ``publish``) never names.
        """
        listing = self._list() if listing is None else listing
        try:
            current = self._load()
        except StatsIndexError:
            return []  # which files are live is unknown: delete nothing until a sync replaces it
        now = time.time() if now is None else now
        named = set(current.files) if current else set()
        retired = current.retired if current else {}
        deleted = []
        for name, mtime in sorted(listing.items()):
            if name in named or mtime is None:
                continue
            if now - max(mtime, retired.get(name, mtime)) >= self.gc_grace_s:
                try:
                    self.fs.delete_file(f"{self.root}/{name}")
                except FileNotFoundError:
                    pass  # another collector was first
                deleted.append(name)
        if deleted:
            log.info("index under %s: collected %d unreferenced file(s)", self.path, len(deleted))
        return deleted

    # -- data files ---------------------------------------------------------------------------

    def write(self, rows: pa.Table, kind: str, version: int) -> str:
        """Write sorted ``rows`` as one file; returns its name (relative to the index path)."""
        self.fs.create_dir(self.root, recursive=True)
        # The row count in the name lets merges size files without reading them; older readers
        # take names as they are.
        name = f"{kind}-{version:020d}-{uuid.uuid4().hex[:12]}-r{rows.num_rows}.parquet"
        rows = rows.cast(ROW_SCHEMA).sort_by(KEY)
        with pq.ParquetWriter(
            f"{self.root}/{name}", ROW_SCHEMA, filesystem=self.fs, compression="zstd",
            use_dictionary=["column", "partition", "min", "max"], column_encoding={"file": "DELTA_BYTE_ARRAY"},
            write_statistics=["column"],  # the key readers filter row groups on; more stats bloat the footer
        ) as writer:  # fmt: skip
            for start, end in _runs(rows["column"]):
                writer.write_table(rows.slice(start, end - start), row_group_size=self.row_group_rows)
        return name

    def entries(self, manifest: Manifest) -> int:
        """Rows (entries and tombstones) in the manifest's data files, from their footers."""
        names = ([manifest.base] if manifest.base else []) + list(manifest.segments)
        return sum(self._open(name).metadata.num_rows for name in names)

    def _open(self, name: str) -> pq.ParquetFile:
        return pq.ParquetFile(self.fs.open_input_file(f"{self.root}/{name}"))

    # -- reading --------------------------------------------------------------------------------

    def read_column(
        self, column: str, columns: Sequence[str] | None = None, *, manifest: Manifest | None = None
    ) -> ColumnRead:
        """Live rows of one column (in no particular order): per file, the footer and the row
        groups whose key range holds it. From ``manifest``, else the one this store holds, else
        the current one."""
        return self._retrying(lambda m: self._read_column(m, column, columns), manifest)

    def _read_column(self, manifest: Manifest, column: str, columns: Sequence[str] | None) -> ColumnRead:
        wanted = list(dict.fromkeys([*(columns or ROW_SCHEMA.names), "column", "file", "deleted"]))
        tables, nbytes, groups = [], 0, 0
        for seq, name in enumerate(manifest.files):
            pf = self._open(name)
            md = pf.metadata
            nbytes += md.serialized_size + 8
            key = md.schema.to_arrow_schema().get_field_index("column")
            chosen = []
            for i in range(md.num_row_groups):
                st = md.row_group(i).column(key).statistics
                if st is None or not st.has_min_max or st.min <= column <= st.max:
                    chosen.append(i)
            if not chosen:
                continue
            idx = [md.schema.to_arrow_schema().get_field_index(c) for c in wanted]
            nbytes += sum(md.row_group(i).column(j).total_compressed_size for i in chosen for j in idx)
            groups += len(chosen)
            t = pf.read_row_groups(chosen, columns=wanted)
            t = t.filter(pc.equal(t["column"], column))
            tables.append(_numbered(t, seq))
        return ColumnRead(_latest_of_column(tables, wanted), nbytes, groups)

    def read_all(self, *, manifest: Manifest | None = None) -> pa.Table:
        """Every live row, sorted by the key (for `index show`, merges and the equality checks).
        From ``manifest``, else the one this store holds, else the current one."""
        return self._retrying(self._read_all, manifest)

    def _read_all(self, manifest: Manifest) -> pa.Table:
        tables = []
        for seq, name in enumerate(manifest.files):
            tables.append(_numbered(self._open(name).read(), seq))
        return _latest(tables, ROW_SCHEMA.names)

    def _retrying(self, read: Callable[[Manifest], _T], manifest: Manifest | None) -> _T:
        """``read`` of the given or held manifest; else of the current one, again with the next
        one when a file vanished (files of a replaced manifest are collected after the grace period)."""
        held = manifest or self._pinned
        if held is not None:
            try:
                return read(held)
            except FileNotFoundError as e:
                # Reading a newer manifest instead would mix versions under the caller.
                raise StatsIndexError(
                    f"a file of the index manifest (version {held.delta_version}) under {self.path} is gone: "
                    f"it was replaced more than index.gc_grace_s ({self.gc_grace_s:g}s) ago, or the index "
                    f"is damaged (run `lakecluster index rebuild`): {e}"
                ) from e
        for attempt in range(3):
            current = self._load()
            if current is None:
                raise StatsIndexError(f"no index under {self.path} (run `lakecluster index sync`)")
            try:
                return read(current)
            except FileNotFoundError:
                if attempt == 2:
                    raise StatsIndexError(f"index files under {self.path} keep disappearing; rebuild it") from None
        raise AssertionError("unreachable")  # pragma: no cover

    # -- writing new states -----------------------------------------------------------------------

    def replace(self, rows: pa.Table, manifest: Manifest, *, based_on: Manifest | None = None) -> Publication:
        """Publish a new base holding ``rows``, no segments (``based_on``: what ``rows`` were read from)."""
        started = time.monotonic()  # the base is the only file a rebuild needs kept
        base = self.write(rows, "base", manifest.delta_version)
        new = Manifest(**{**asdict(manifest), "base": base, "segments": []})
        return self.publish(new, based_on=based_on, started=started)

    def append(self, rows: pa.Table, old: Manifest, version: int, max_segments: int, *,
               started: float) -> Publication:  # fmt: skip
        """Publish a segment with ``rows`` (adds and tombstones) on top of ``old``, read at
        ``started`` (``time.monotonic()``); then merge segments as :func:`merge_plan` says."""
        segments = list(old.segments)
        if rows.num_rows:
            segments.append(self.write(rows, "seg", version))
        new = Manifest(**{**asdict(old), "delta_version": version, "segments": segments})
        appended = self.publish(new, based_on=old, started=started)
        if not appended.published:
            return appended
        current = appended.manifest
        sizes = [self._rows(name) for name in current.segments]
        base_rows = self._rows(current.base) if current.base else 0
        merge = merge_plan(base_rows, sizes, max_segments)
        if merge == 0:
            return appended
        started = time.monotonic()
        if merge == len(sizes) and sum(sizes) * 2 >= base_rows:
            return self._merged_or(appended, self.replace(self.read_all(manifest=current), current, based_on=current))
        # The newest ``merge`` segments become one; their tombstones stay (they delete base rows).
        kept, merging = current.segments[: len(sizes) - merge], current.segments[-merge:]
        rows = _latest([_numbered(self._open(name).read(), current.files.index(name)) for name in merging],
                       ROW_SCHEMA.names, keep_deleted=True)  # fmt: skip
        merged = self.write(rows, "seg", current.delta_version)
        new = Manifest(**{**asdict(current), "segments": [*kept, merged]})
        return self._merged_or(appended, self.publish(new, based_on=current, started=started))

    def _rows(self, name: str) -> int:
        """Rows of a data file: from its name (``-r<rows>``), else (an older file) its footer."""
        found = _ROWS_IN_NAME.search(name)
        return int(found.group(1)) if found else self._open(name).metadata.num_rows

    @staticmethod
    def _merged_or(appended: Publication, merged: Publication) -> Publication:
        return merged if merged.published else appended



def _numbered(rows: pa.Table, seq: int) -> pa.Table:
    """A data file's rows with its place in the manifest (newer files win in ``_latest``)."""
    return rows.append_column("_seq", pa.array(np.full(rows.num_rows, seq, dtype=np.int32)))


def merge_plan(base_rows: int, segment_rows: Sequence[int], max_segments: int) -> int:
    """How many of the newest segments to merge after an append (0: none).

    Size-tiered, like a binary counter: the newest segments merge while the next older one holds
    no more rows than they do together, so sizes grow geometrically towards the base, a row is
    rewritten O(log syncs) times, and about log2(syncs since the last base) segments remain.
    Every segment merges when there are more than ``max_segments``; and into the base too (a
    rewrite of the whole index, rare: the segments must first gather that many rows) when the
    segments hold half as many rows as the base.
    """
    n = len(segment_rows)
    if n == 0:
        return 0
    if n > max_segments or sum(segment_rows) * 2 >= base_rows:
        return n
    k, newer = 1, segment_rows[-1]
    while k < n and segment_rows[-(k + 1)] <= newer:
        newer += segment_rows[-(k + 1)]
        k += 1
    return k if k >= 2 else 0


def _superseded(current: Manifest | None, new: Manifest, based_on: Manifest | None) -> str:
    """Why publishing ``new`` over ``current`` would be redundant ("" when it is not)."""
    if current is None or current.fingerprint != new.fingerprint:
        return ""  # no index, or one built with other settings: the new one replaces it
    if current.delta_version > new.delta_version:
        return f"the index is already at version {current.delta_version}"
    if current.delta_version == new.delta_version and based_on is not None and current.files != based_on.files:
        return f"another sync already published version {current.delta_version}"
    return ""


def _runs(column: pa.ChunkedArray | pa.Array) -> list[tuple[int, int]]:
    """(start, end) of each run of equal values of the sorted key column."""
    n = len(column)
    if n == 0:
        return []
    codes = pc.dictionary_encode(column).combine_chunks().indices.to_numpy(zero_copy_only=False)
    starts = np.flatnonzero(np.r_[True, codes[1:] != codes[:-1]])
    return list(zip(starts.tolist(), np.r_[starts[1:], n].tolist(), strict=True))


def _latest_of_column(tables: list[pa.Table], names: Sequence[str]) -> pa.Table:
    """:func:`_latest` for the rows of one column, oldest source first, in no particular order.

    The oldest source (the base) holds nearly every row: rather than sorting them all, its rows
    whose file a newer source mentions are dropped, and only the newer sources are sorted.
    """
    if len(tables) <= 1:
        return _latest(tables, names)
    newer = _latest(tables[1:], names, keep_deleted=True)
    oldest = tables[0]
    oldest = oldest.filter(pc.invert(pc.is_in(oldest["file"], value_set=newer["file"])))
    both = pa.concat_tables([oldest.select(newer.column_names), newer])
    return both.filter(pc.invert(both["deleted"]))


def _latest(tables: list[pa.Table], names: Sequence[str], *, keep_deleted: bool = False) -> pa.Table:
    """For each (column, file) the row of the newest source; tombstoned keys dropped, unless
    ``keep_deleted`` (a merge of segments whose tombstones must still hide older rows)."""
    names = [n for n in names if n != "_seq"]
    if not tables:
        return empty_rows().select(names)
    if len(tables) == 1:
        t = tables[0]
        if keep_deleted or not pc.any(t["deleted"]).as_py():
            return t.select(names)
        return t.filter(pc.invert(t["deleted"])).select(names)
    t = pa.concat_tables(tables).combine_chunks()
    t = t.take(pc.sort_indices(t, [("column", "ascending"), ("file", "ascending"), ("_seq", "descending")]))
    if t.num_rows:
        col, f = t["column"], t["file"]
        changed = pc.or_(pc.not_equal(col.slice(1), col.slice(0, len(col) - 1)),
                         pc.not_equal(f.slice(1), f.slice(0, len(f) - 1)))  # fmt: skip
        first = pa.concat_arrays([pa.array([True]), changed.combine_chunks()])
        t = t.filter(first)
    if not keep_deleted:
        t = t.filter(pc.invert(t["deleted"]))
    return t.sort_by([k for k in KEY if k[0] in names]).select(names)
