"""The index on storage: an LSM of Parquet files sorted by (column, file number), and a manifest.

``<index path>/manifest.json`` names its format, the Delta version the index reflects, the
table it describes (Delta's table id and a stamp of the commit at that version, see
``sync.identity``), the table's columns, the seed of the file numbers, the base file and the
delta segments (oldest first). It is replaced atomically (locally: write a temporary file, then
rename; on object stores: one PUT of the whole object): a reader sees either the old or the new
index, never a mix.
Every data file holds file rows (column ``""``: a file's path, partition and counts, once) and
entries (a column's stats for a file, by its number), sorted by the key, and is written so that
**no row group spans two columns**, with row-group statistics on the key: a reader of one column
reads the footer, then only the file rows' and that column's row groups. A segment holds the
rows of files added since the previous sync and tombstones (deleted file rows) of removed files;
for each (column, file number) the newest data file wins, and a tombstone hides the file's
entries everywhere. Segments merge by size (``merge_plan``): the newest ones together as they
grow, into a new base only when they hold half as many rows as the base, so a sync's work grows
with the new files, not the table. Data files never change once written: what a process read
of them is kept for its next reads (``_PARTS``).

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
import threading
import time
import uuid
from collections import OrderedDict
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from typing import TypeVar

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from pyarrow import fs as pafs

from lakecluster.errors import StatsIndexError
from lakecluster.index.file_ids import find
from lakecluster.index.stats import (
    ENTRY_FIELDS,
    FILE_FIELDS,
    FILE_ROWS,
    KEY,
    ROW_SCHEMA,
    VIEW_KEY,
    VIEW_SCHEMA,
    empty_rows,
)
from lakecluster.schema import ColumnSpec

FORMAT = 3  # the format written: 2 without the table's id, 1 with entries keyed by path (before file numbers)
# Formats read: a format-2 manifest (same data files, no table id) is read, but no reader trusts
# it (``sync.identity``): the next sync rebuilds it. Format 1 is never read; a sync rebuilds it.
READ_FORMATS = (2, FORMAT)
MANIFEST = "manifest.json"
GC_GRACE_S_DEFAULT = 3600.0  # index.gc_grace_s: how long unreferenced index files are kept
_TMP = f".{MANIFEST}."  # prefix of temporary manifests (local and HDFS-like storage)
# Object stores: a PUT replaces the whole object atomically, and a "move" is a copy plus a delete.
_OBJECT_STORES = frozenset({"s3", "gcs", "abfs"})
_T = TypeVar("_T")
_ROWS_IN_NAME = re.compile(r"-r(\d+)\.parquet$")
# zstd, but not for the file numbers: hashes do not compress (3% of their bytes, at a tenth of a
# million-file rebuild's writing), and a reader then copies them as they are.
_COMPRESSION = {name: "none" if name == "fid" else "zstd" for name in ROW_SCHEMA.names}
log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Manifest:
    delta_version: int
    # every column of the table: {"name", "type"}, and "physical" where the log keys its stats and
    # partition values by another name (column mapping)
    table_columns: list[dict[str, str]]
    indexed: list[str]
    partition_by: list[str]
    fingerprint: dict
    base: str | None = None
    segments: list[str] = field(default_factory=list)
    # Data files earlier manifests named and this one does not -> when they stopped being named
    # (Unix seconds); the collector keeps them for the grace period after that.
    retired: dict[str, float] = field(default_factory=dict)
    fid_seed: int = 0  # the seed of the files' numbers (index/file_ids.py)
    format: int = FORMAT
    # The Delta table the index describes: its id (``metaData.id``; None: written before it was
    # recorded, format 2) and a hash of the start of its commit file at ``delta_version``
    # (``log.commit_stamp``; None: that file was gone when the version was recorded).
    table_id: str | None = None
    commit_stamp: str | None = None

    def columns(self) -> tuple[ColumnSpec, ...]:
        return tuple(ColumnSpec(c["name"], c["type"]) for c in self.table_columns)

    def physical_names(self) -> dict[str, str]:
        """Each column's name in the log's stats and partition values (column mapping: its physical name)."""
        return {c["name"]: c.get("physical", c["name"]) for c in self.table_columns}

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


class IndexFormatError(StatsIndexError):
    """The manifest is in another format than the one this code reads (a sync rebuilds it)."""


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

    def __init__(self, path: str, fs: pafs.FileSystem, root: str, *, row_group_rows: int = 262_144,
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
        if not isinstance(raw, dict):
            raise StatsIndexError(f"index manifest under {self.path} has an unknown format")
        if raw.get("format") not in READ_FORMATS:
            # Format 1 (paths in every entry) or a newer one: never read with this code's rules.
            raise IndexFormatError(
                f"the index under {self.path} is in format {raw.get('format')!r}, this lakecluster reads format "
                f"{FORMAT}: the next `lakecluster index sync` rebuilds it"
            )
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
        foreign: list[str] = []
        try:
            current = self._load()
        except IndexFormatError:
            current = None  # another format: replacing it is the point, its files are retired below
            foreign = self._files_named_raw()
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
        retired = self._retired(manifest, (based_on, current), now)
        retired.update({name: now for name in foreign if name not in manifest.files})
        manifest = Manifest(**{**asdict(manifest), "retired": dict(sorted(retired.items())), "format": FORMAT})
        self._write_manifest(manifest)
        self._pinned = manifest
        try:
            self.gc(now=now, listing=listing)
        except OSError:  # collecting is best effort: the next publication tries again
            log.warning("collecting unreferenced index files under %s failed", self.path, exc_info=True)
        return Publication(manifest, True)

    def _files_named_raw(self) -> list[str]:
        """The data files a manifest of another format names (its ``base`` and ``segments``, as
        every format so far records them), so that replacing it retires them for the grace period."""
        try:
            with self.fs.open_input_stream(f"{self.root}/{MANIFEST}") as f:
                raw = json.loads(f.read())
        except (OSError, ValueError):
            return []
        names = [raw.get("base"), *(raw.get("segments") or [])] if isinstance(raw, dict) else []
        return [n for n in names if isinstance(n, str)]

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

    def write(self, rows: pa.Table | Sequence[pa.Table] | Iterator[pa.Table], kind: str, version: int, *,
              num_rows: int | None = None) -> str:  # fmt: skip
        """Write ``rows`` (file rows, entries, tombstones) sorted by the key as one file; returns
        its name (relative to the index path). ``rows`` may come as parts already in the key's
        order (``stats.index_parts``, ``num_rows`` in all), written one by one."""
        self.fs.create_dir(self.root, recursive=True)
        if isinstance(rows, pa.Table):
            rows = rows.cast(ROW_SCHEMA)
            num_rows, parts = rows.num_rows, iter([rows if _sorted_by_key(rows) else rows.sort_by(KEY)])
        else:
            if num_rows is None:
                raise ValueError("parts need num_rows")
            parts = _built_ahead(iter(rows))
        # The row count in the name lets merges size files without reading them.
        name = f"{kind}-{version:020d}-{uuid.uuid4().hex[:12]}-r{num_rows}.parquet"
        written, last = 0, None
        with pq.ParquetWriter(
            f"{self.root}/{name}", ROW_SCHEMA, filesystem=self.fs, compression=_COMPRESSION,
            use_dictionary=["column", "partition", "min", "max"],
            write_statistics=["column"],  # the key readers filter row groups on; more stats bloat the footer
        ) as writer:  # fmt: skip
            for part in parts:
                part = part.cast(ROW_SCHEMA)
                behind = last is not None and part.num_rows and part["column"][0].as_py() < last
                if behind or not _sorted_by_key(part):
                    raise ValueError("index parts out of the key's order")
                for start, end in _runs(part["column"]):
                    writer.write_table(part.slice(start, end - start), row_group_size=self.row_group_rows)
                if part.num_rows:
                    last = part["column"][-1].as_py()
                written += part.num_rows
        if written != num_rows:
            raise ValueError(f"{written} index rows written, {num_rows} announced")
        return name

    def entries(self, manifest: Manifest) -> int:
        """Rows (file rows, entries and tombstones) in the manifest's data files, from their footers."""
        return sum(self._footer(name)[0].num_rows for name in manifest.files)

    def _open(self, name: str) -> pq.ParquetFile:
        return pq.ParquetFile(self.fs.open_input_file(f"{self.root}/{name}"))

    def _footer(self, name: str) -> tuple[pq.FileMetaData, int]:
        """A data file's footer and the bytes read for it (0: kept from an earlier read)."""
        key = (self.path, name)
        with _FOOTERS_LOCK:
            md = _FOOTERS.get(key)
            if md is not None:
                _FOOTERS.move_to_end(key)
        if md is not None:
            return md, 0
        md = self._open(name).metadata
        with _FOOTERS_LOCK:
            _FOOTERS[key] = md
            while len(_FOOTERS) > 256:
                _FOOTERS.popitem(last=False)
        return md, md.serialized_size + 8

    # -- reading --------------------------------------------------------------------------------

    def _part(self, name: str, column: str, fields: Sequence[str]) -> tuple[pa.Table, int, int]:
        """The rows of ``column`` (``FILE_ROWS``: the file rows) in one data file: ``fid`` and
        ``fields``; with the bytes and row groups read. Data files never change once written, so
        what was read is kept (``_PARTS``) for the next read of the same part."""
        key = (self.path, name, column, tuple(fields))
        cached = _PARTS.get(key)
        if cached is None:
            cached = _PARTS.covering(key[:3], fields)
        if cached is not None:
            return cached.select(["fid", *fields]), 0, 0
        md, footer = self._footer(name)
        schema = md.schema.to_arrow_schema()
        at = schema.get_field_index("column")
        chosen = []
        for i in range(md.num_row_groups):
            st = md.row_group(i).column(at).statistics
            if st is None or not st.has_min_max or st.min <= column <= st.max:
                chosen.append(i)
        wanted = ["column", "fid", *fields]
        idx = [schema.get_field_index(c) for c in wanted]
        nbytes = footer + sum(md.row_group(i).column(j).total_compressed_size for i in chosen for j in idx)
        if chosen:
            pf = pq.ParquetFile(self.fs.open_input_file(f"{self.root}/{name}"), metadata=md)
            t = pf.read_row_groups(chosen, columns=wanted)
            t = t.filter(pc.equal(t["column"], column)).drop_columns(["column"])
        else:
            t = pa.schema([ROW_SCHEMA.field(c) for c in wanted[1:]]).empty_table()
        t = t.combine_chunks()
        _PARTS.put(key, t)
        return t, nbytes, len(chosen)

    def _newest(self, manifest: Manifest, column: str, fields: Sequence[str]) -> tuple[pa.Table, int, int]:
        """Per file number, the row of ``column`` in the newest data file holding one, sorted by fid.

        The answer for a manifest is kept (``_PARTS``); the next manifest usually names the same
        files plus a segment, and its answer starts from the kept one, reading only the segment.
        """
        files = tuple(manifest.files)
        key = (self.path, "newest", column, tuple(fields))
        kept = _PARTS.get((*key, files))
        if kept is not None:
            return kept, 0, 0
        start, parts = 0, []
        for n in range(len(files) - 1, 0, -1):  # the longest kept prefix of this manifest's files
            earlier = _PARTS.get((*key, files[:n]))
            if earlier is not None:
                start, parts = n, [earlier]
                break
        nbytes, groups = 0, 0
        for name in files[start:]:
            t, b, g = self._part(name, column, fields)
            parts.append(t)
            nbytes, groups = nbytes + b, groups + g
        if not parts:  # a manifest naming no data file: an empty index
            return pa.schema([ROW_SCHEMA.field(c) for c in ("fid", *fields)]).empty_table(), nbytes, groups
        newest = newest_per_fid(parts)
        if column != FILE_ROWS:
            # Only the live files' entries: aligned with the live files row for row (what prune
            # evaluates on); the next manifest's answer built on this one stays right, since a
            # file live then and not removed since keeps its entry here.
            live, b, g = self._live_files(manifest, [])
            nbytes, groups = nbytes + b, groups + g
            newest = restricted_to(newest, live["fid"].to_numpy())
        _PARTS.put((*key, files), newest)
        return newest, nbytes, groups

    def read_files(self, fields: Sequence[str] = FILE_FIELDS, *, manifest: Manifest | None = None) -> pa.Table:
        """The live files: ``fid`` and ``fields`` (of file, partition, size_bytes, value_count),
        sorted by fid. From ``manifest``, else the one this store holds, else the current one."""
        return self.read_live(fields, manifest=manifest).rows

    def read_live(self, fields: Sequence[str] = FILE_FIELDS, *, manifest: Manifest | None = None) -> ColumnRead:
        """:meth:`read_files`, with the bytes and row groups read."""
        return self._retrying(lambda m: ColumnRead(*self._live_files(m, fields)), manifest)

    def files_of(self, fids: np.ndarray, *, manifest: Manifest | None = None) -> ColumnRead:
        """``file`` and ``partition`` of the live files numbered ``fids``, in that order:
        looked up in each data file's file rows (sorted by number), newest first, without merging
        the paths of every file."""
        return self._retrying(lambda m: self._files_of(m, fids), manifest)

    def _files_of(self, manifest: Manifest, fids: np.ndarray) -> ColumnRead:
        n = len(fids)
        where = np.full(n, -1, dtype=np.int64)  # which data file (newest first) has the file's row
        at = np.zeros(n, dtype=np.int64)
        parts, nbytes, groups = [], 0, 0
        for k, name in enumerate(reversed(manifest.files)):
            part, b, g = self._part(name, FILE_ROWS, ["file", "partition"])
            parts.append(part)
            nbytes, groups = nbytes + b, groups + g
            pending = np.flatnonzero(where < 0)
            if not len(pending):
                break
            pos, found = find(part["fid"].to_numpy(), fids[pending])
            where[pending[found]], at[pending[found]] = k, pos[found]
        if (where < 0).any():
            raise StatsIndexError(f"the index under {self.path} has no file row for a live file (rebuild it)")
        if not n:
            return ColumnRead(pa.table({"file": pa.array([], pa.string()), "partition": pa.array([], pa.string())}),
                              nbytes, groups)  # fmt: skip
        pieces = [parts[k].take(pa.array(at[where == k])).select(["file", "partition"]) for k in range(len(parts))]
        order = np.argsort(np.concatenate([np.flatnonzero(where == k) for k in range(len(parts))]), kind="stable")
        return ColumnRead(pa.concat_tables(pieces).take(pa.array(order)), nbytes, groups)

    def _live_files(self, manifest: Manifest, fields: Sequence[str]) -> tuple[pa.Table, int, int]:
        rows, nbytes, groups = self._newest(manifest, FILE_ROWS, ["deleted", *fields])
        if rows.num_rows and pc.any(rows["deleted"]).as_py():
            rows = rows.filter(pc.invert(rows["deleted"]))
        return rows.drop_columns(["deleted"]), nbytes, groups

    def read_entries(self, column: str, fields: Sequence[str] = ENTRY_FIELDS, *,
                     manifest: Manifest | None = None) -> ColumnRead:  # fmt: skip
        """One column's entries of the live files: ``fid`` and ``fields`` (of null_count,
        nan_count, min, max), the newest per file number, sorted by fid."""
        return self._retrying(lambda m: ColumnRead(*self._newest(m, column, fields)), manifest)

    def read_column(
        self, column: str, columns: Sequence[str] | None = None, *, manifest: Manifest | None = None
    ) -> ColumnRead:
        """One row per live file for one column (``VIEW_SCHEMA``: the file's facts beside the
        column's stats, in no particular order); ``columns`` selects fields of the view. From
        ``manifest``, else the one this store holds, else the current one."""
        return self._retrying(lambda m: self._read_column(m, column, columns), manifest)

    def _read_column(self, manifest: Manifest, column: str, columns: Sequence[str] | None) -> ColumnRead:
        files, fbytes, fgroups = self._live_files(manifest, FILE_FIELDS)
        entries, ebytes, egroups = self._newest(manifest, column, ENTRY_FIELDS)
        view = _view(column, files, entries)
        return ColumnRead(view.select(list(columns)) if columns else view, fbytes + ebytes, fgroups + egroups)

    def read_all(self, *, manifest: Manifest | None = None) -> pa.Table:
        """Every live (column, file) row of the view, sorted by (column, partition, file): for
        `index show`, and the equality checks of an incrementally kept index with a rebuild."""
        return self._retrying(self._read_all, manifest)

    def _read_all(self, manifest: Manifest) -> pa.Table:
        files = self._live_files(manifest, FILE_FIELDS)[0]
        views = [_view(c, files, self._newest(manifest, c, ENTRY_FIELDS)[0]) for c in manifest.indexed]
        if not views:
            return VIEW_SCHEMA.empty_table()
        return pa.concat_tables(views).sort_by(VIEW_KEY)

    def _raw(self, names: Sequence[str], manifest: Manifest, *, keep_deleted: bool) -> pa.Table:
        """The data files ``names`` of ``manifest`` merged into one (newest row per key)."""
        tables = [_numbered(self._open(name).read(), manifest.files.index(name)) for name in names]
        return _merge(tables, keep_deleted=keep_deleted)

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

    def replace(self, rows: pa.Table | Iterator[pa.Table], manifest: Manifest, *, based_on: Manifest | None = None,
                num_rows: int | None = None) -> Publication:  # fmt: skip
        """Publish a new base holding ``rows`` (or parts, as :meth:`write` takes them), no segments
        (``based_on``: what ``rows`` were read from)."""
        started = time.monotonic()  # the base is the only file a rebuild needs kept
        base = self.write(rows, "base", manifest.delta_version, num_rows=num_rows)
        new = Manifest(**{**asdict(manifest), "base": base, "segments": []})
        return self.publish(new, based_on=based_on, started=started)

    def append(self, rows: pa.Table, old: Manifest, version: int, max_segments: int, *,
               started: float, commit_stamp: str | None = None) -> Publication:  # fmt: skip
        """Publish a segment with ``rows`` (file rows, entries, tombstones) on top of ``old``,
        read at ``started`` (``time.monotonic()``), at ``version`` (its commit's ``commit_stamp``);
        then merge segments as :func:`merge_plan` says."""
        segments = list(old.segments)
        if rows.num_rows:
            segments.append(self.write(rows, "seg", version))
        new = Manifest(**{**asdict(old), "delta_version": version, "segments": segments,
                          "commit_stamp": commit_stamp})  # fmt: skip
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
            everything = self._raw(current.files, current, keep_deleted=False)
            return self._merged_or(appended, self.replace(everything, current, based_on=current))
        # The newest ``merge`` segments become one; their tombstones stay (they delete base rows).
        kept, merging = current.segments[: len(sizes) - merge], current.segments[-merge:]
        merged = self.write(self._raw(merging, current, keep_deleted=True), "seg", current.delta_version)
        new = Manifest(**{**asdict(current), "segments": [*kept, merged]})
        return self._merged_or(appended, self.publish(new, based_on=current, started=started))

    def _rows(self, name: str) -> int:
        """Rows of a data file: from its name (``-r<rows>``), else its footer."""
        found = _ROWS_IN_NAME.search(name)
        return int(found.group(1)) if found else self._open(name).metadata.num_rows

    @staticmethod
    def _merged_or(appended: Publication, merged: Publication) -> Publication:
        return merged if merged.published else appended


class _PartCache:
    """What was read of data files lately, and answers built from them (immutable files: nothing
    kept is ever stale), least recently used dropped first beyond ``max_bytes`` in all."""

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self._parts: OrderedDict[tuple, pa.Table] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()

    def get(self, key: tuple) -> pa.Table | None:
        with self._lock:
            t = self._parts.get(key)
            if t is not None:
                self._parts.move_to_end(key)
            return t

    def covering(self, prefix: tuple, fields: Sequence[str]) -> pa.Table | None:
        """A kept part under ``prefix`` (index, data file, column) read with at least ``fields``."""
        wanted = set(fields)
        with self._lock:
            for key, t in reversed(self._parts.items()):
                if len(key) == 4 and key[:3] == prefix and wanted <= set(key[3]):
                    self._parts.move_to_end(key)
                    return t
        return None

    def put(self, key: tuple, t: pa.Table) -> None:
        size = t.nbytes
        with self._lock:
            if key in self._parts or size > self.max_bytes:
                return
            self._parts[key] = t
            self._bytes += size
            while self._bytes > self.max_bytes:
                _, old = self._parts.popitem(last=False)
                self._bytes -= old.nbytes


# A million-file table's file rows and a few columns' entries, as read and as merged.
_PARTS = _PartCache(max_bytes=1 << 30)
_FOOTERS: OrderedDict[tuple[str, str], pq.FileMetaData] = OrderedDict()  # footers of data files read lately
_FOOTERS_LOCK = threading.Lock()
def _numbered(rows: pa.Table, seq: int) -> pa.Table:
    """A data file's rows with its place in the manifest (newer files win in ``_merge``)."""
    return rows.append_column("_seq", pa.array(np.full(rows.num_rows, seq, dtype=np.int32)))


def newest_per_fid(parts: Sequence[pa.Table]) -> pa.Table:
    """Per fid, the row of the newest part holding it (parts oldest first), sorted by fid.

    The oldest part (the base) holds nearly every row: rather than sorting them all, its rows
    whose fid a newer part holds are dropped, and the rest merged with the newer parts' by fid.
    """
    parts = [p for p in parts if p.num_rows] or list(parts[:1])
    if not parts:
        raise ValueError("no parts")  # callers pass at least one (see _newest)
    if len(parts) == 1:
        return _sorted_by_fid(parts[0])
    newer = pa.concat_tables([p.append_column("_seq", pa.array(np.full(p.num_rows, i, dtype=np.int32)))
                              for i, p in enumerate(parts[1:])])  # fmt: skip
    fid = newer["fid"].to_numpy()
    order = np.lexsort((-newer["_seq"].to_numpy(), fid))
    first = np.r_[True, fid[order][1:] != fid[order][:-1]]
    newer = newer.take(pa.array(order[first])).drop_columns(["_seq"])  # sorted by fid, one row each
    base = _sorted_by_fid(parts[0])
    pos, replaced = find(base["fid"].to_numpy(), newer["fid"].to_numpy())
    if replaced.any():
        keep = np.ones(base.num_rows, bool)
        keep[pos[replaced]] = False
        base = base.filter(pa.array(keep))
    # Two runs sorted by fid: a stable sort of their concatenation is a linear merge (timsort).
    both = pa.concat_tables([base, newer.select(base.column_names)])
    order = np.argsort(both["fid"].to_numpy(), kind="stable")
    return both.take(pa.array(order))


def restricted_to(rows: pa.Table, fids: np.ndarray) -> pa.Table:
    """The rows (sorted by fid) whose fid is one of ``fids`` (sorted)."""
    have = rows["fid"].to_numpy()
    if len(have) == len(fids) and (have == fids).all():
        return rows
    keep = find(fids, have)[1]
    return rows if keep.all() else rows.filter(pa.array(keep))


def _sorted_by_fid(t: pa.Table) -> pa.Table:
    fid = t["fid"].to_numpy()
    if len(fid) < 2 or (fid[1:] >= fid[:-1]).all():
        return t
    return t.take(pa.array(np.argsort(fid, kind="stable")))


def _view(column: str, files: pa.Table, entries: pa.Table) -> pa.Table:
    """``VIEW_SCHEMA`` rows of ``column``: every live file of ``files`` (sorted by fid) with its
    entry of ``entries`` (newest per fid, sorted by fid); a file without one has null stats
    (unknown, which keeps it)."""
    pos, found = find(entries["fid"].to_numpy(), files["fid"].to_numpy())
    at = pa.array(pos, mask=~found)
    n = files.num_rows

    def entry(name: str) -> pa.Array:
        if not entries.num_rows:
            return pa.nulls(n, ROW_SCHEMA.field(name).type)
        return entries[name].take(at)

    return pa.table({
        "column": pa.repeat(pa.scalar(column, pa.string()), n), "partition": files["partition"], "file": files["file"],
        "deleted": pa.array(np.zeros(n, bool)), "value_count": files["value_count"],
        "null_count": entry("null_count"), "nan_count": entry("nan_count"), "min": entry("min"), "max": entry("max"),
        "size_bytes": files["size_bytes"],
    }, schema=VIEW_SCHEMA)  # fmt: skip


def _merge(tables: list[pa.Table], *, keep_deleted: bool) -> pa.Table:
    """Data files' rows (each with ``_seq``, its place in the manifest) as one, sorted by the key:
    per (column, fid) the newest row; entries of files whose newest file row is a tombstone
    dropped; tombstones themselves kept only with ``keep_deleted`` (a merge of segments, whose
    tombstones must still hide rows of older files)."""
    if not tables:
        return empty_rows()
    t = pa.concat_tables(tables).combine_chunks()
    if not t.num_rows:
        return t.drop_columns(["_seq"])
    codes = pc.dictionary_encode(t["column"]).combine_chunks()
    # dictionary order is first-seen order; rank the names so the sort follows the column names
    names = codes.dictionary.to_pylist()
    rank = np.argsort(np.argsort(np.array(names, dtype=object)))
    column_rank = rank[codes.indices.to_numpy()]
    fid, seq = t["fid"].to_numpy(), t["_seq"].to_numpy()
    order = np.lexsort((-seq, fid, column_rank))
    key_changed = (column_rank[order][1:] != column_rank[order][:-1]) | (fid[order][1:] != fid[order][:-1])
    t = t.take(pa.array(order[np.r_[True, key_changed]]))
    is_file_row = pc.equal(t["column"], FILE_ROWS)
    tomb = pc.and_(is_file_row, pc.fill_null(t["deleted"], False))
    dead = t["fid"].filter(tomb).to_numpy()
    keep = np.ones(t.num_rows, bool)
    if len(dead):
        entry = pc.invert(is_file_row).to_numpy(zero_copy_only=False)
        keep &= ~(entry & find(np.sort(dead), t["fid"].to_numpy())[1])
        if not keep_deleted:
            keep &= ~tomb.to_numpy(zero_copy_only=False)
    return t.filter(pa.array(keep)).drop_columns(["_seq"])


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
    if current is None or current.fingerprint != new.fingerprint or current.table_id != new.table_id:
        # No index, one built with other settings, or of another table (one deleted and created
        # anew at the location, whose versions mean nothing here): the new one replaces it.
        return ""
    if current.delta_version > new.delta_version:
        return f"the index is already at version {current.delta_version}"
    if current.delta_version == new.delta_version and based_on is not None and current.files != based_on.files:
        return f"another sync already published version {current.delta_version}"
    return ""


def _built_ahead(parts: Iterator[pa.Table]) -> Iterator[pa.Table]:
    """``parts``, each next one built on a thread while the caller writes the one before: Arrow
    releases the GIL in both, so a rebuild's encoding and its Parquet writing overlap on two
    cores (a million-file rebuild's write: 4.8 s instead of 7.1 s)."""
    with ThreadPoolExecutor(1, thread_name_prefix="index-parts") as pool:
        coming = pool.submit(next, parts, None)
        while (part := coming.result()) is not None:
            coming = pool.submit(next, parts, None)
            yield part


def _one_column(column: pa.ChunkedArray | pa.Array) -> bool:
    """Whether every value of the key column is the same (a rebuild's parts: one column each),
    from its least and greatest value, without comparing neighbours."""
    bounds = pc.min_max(column)
    return column.null_count == 0 and bounds["min"] == bounds["max"]


def _sorted_by_key(rows: pa.Table) -> bool:
    """Whether ``rows`` are sorted by (column, fid) already (one vectorised pass)."""
    if rows.num_rows < 2:
        return True
    if _one_column(rows["column"]):
        fid = rows["fid"].to_numpy()
        return bool((fid[1:] >= fid[:-1]).all())
    column = rows["column"].combine_chunks()
    if not pc.all(pc.less_equal(column[:-1], column[1:])).as_py():
        return False
    fid = rows["fid"].to_numpy()
    same = pc.equal(column[:-1], column[1:]).to_numpy(zero_copy_only=False)
    return bool(((fid[1:] >= fid[:-1]) | ~same).all())


def _runs(column: pa.ChunkedArray | pa.Array) -> list[tuple[int, int]]:
    """(start, end) of each run of equal values of the sorted key column."""
    n = len(column)
    if n == 0:
        return []
    if _one_column(column):
        return [(0, n)]
    codes = pc.dictionary_encode(column).combine_chunks().indices.to_numpy(zero_copy_only=False)
    starts = np.flatnonzero(np.r_[True, codes[1:] != codes[:-1]])
    return list(zip(starts.tolist(), np.r_[starts[1:], n].tolist(), strict=True))
