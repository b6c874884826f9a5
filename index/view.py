"""The index as a reader sees it at the table's latest version, without writing anything.

A sync brings the stored index up to date by appending the rows of the commits after its version
(``sync.pending``). A read-only reader (``lakecluster explain``) computes the same rows and lays
them over the stored index in memory instead: per file number the pending row wins, a pending
tombstone hides the file. When a sync would rebuild the index (none yet, other settings, a commit
gone from the log, an index that may be another table's: ``sync.identity``), the view holds the
rows a rebuild would write (``sync.build``), in memory: the answer is the one a sync followed by a
read would give, and the table's directory stays as it was.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from lakecluster.index.file_ids import find
from lakecluster.index.spec import IndexSpec
from lakecluster.index.stats import ENTRY_FIELDS, FILE_FIELDS, FILE_ROWS, ROW_SCHEMA
from lakecluster.index.store import ColumnRead, IndexStore, Manifest, newest_per_fid, restricted_to
from lakecluster.index.sync import RebuildNeeded, build, pending, store_for
from lakecluster.schema import ColumnSpec


@dataclass(frozen=True)
class IndexView:
    """The stored index (``store`` at ``manifest``; None: nothing stored is used) with ``rows``
    (``ROW_SCHEMA``: file rows, tombstones, entries) laid over it, at Delta ``version``."""

    manifest: Manifest
    store: IndexStore | None
    rows: pa.Table
    version: int
    commits_from_log: int  # commits after the stored index's version, read from the log
    rebuilt: str = ""  # why the whole index was built in memory ("" when the stored one was used)

    @classmethod
    def stored(cls, store: IndexStore, manifest: Manifest) -> IndexView:
        """The stored index as it is, under ``manifest`` (the caller checked it is the table's and
        current: ``sync.stored_unusable``)."""
        return cls(manifest, store, ROW_SCHEMA.empty_table(), manifest.delta_version, 0)

    @classmethod
    def latest(cls, spec: IndexSpec) -> IndexView:
        """The index at the table's latest version: the stored one and the commits it lacks, or
        one built in memory when a sync would rebuild it."""
        store = store_for(spec)
        try:
            lacking = pending(spec, store)
        except RebuildNeeded as e:
            built = build(spec, seed=e.seed)
            parts = list(built.parts)
            rows = pa.concat_tables(parts) if parts else ROW_SCHEMA.empty_table()
            version = built.manifest.delta_version
            return cls(built.manifest, None, rows.cast(ROW_SCHEMA), version, 0, e.reason)
        rows = lacking.rows.cast(ROW_SCHEMA) if lacking.rows.num_columns else ROW_SCHEMA.empty_table()
        behind = lacking.version - lacking.manifest.delta_version
        return cls(lacking.manifest, store, rows, lacking.version, behind)

    def columns(self) -> tuple[ColumnSpec, ...]:
        return self.manifest.columns()

    def indexed_columns(self) -> tuple[ColumnSpec, ...]:
        return self.manifest.indexed_columns()

    def _own(self, column: str, fields: list[str]) -> pa.Table:
        """This view's rows of ``column``: ``fid`` and ``fields``, sorted by fid."""
        t = self.rows.filter(pc.equal(self.rows["column"], column)).select(["fid", *fields])
        return t.take(pa.array(np.argsort(t["fid"].to_numpy(), kind="stable")))

    def read_live(self, fields: tuple[str, ...] | list[str] = FILE_FIELDS) -> ColumnRead:
        """The live files: ``fid`` and ``fields``, sorted by fid (as ``IndexStore.read_live``)."""
        own = self._own(FILE_ROWS, ["deleted", *fields])
        parts, nbytes, groups = [], 0, 0
        if self.store is not None:
            stored = self.store.read_live(list(fields), manifest=self.manifest)
            nbytes, groups = stored.bytes_read, stored.row_groups
            n = stored.rows.num_rows
            parts.append(stored.rows.append_column("deleted", pa.array(np.zeros(n, bool))).select(own.column_names))
        parts.append(own)
        live = newest_per_fid(parts)
        live = live.filter(pc.invert(pc.fill_null(live["deleted"], False)))
        return ColumnRead(live.drop_columns(["deleted"]), nbytes, groups)

    def read_entries(self, column: str, fields: tuple[str, ...] | list[str] = ENTRY_FIELDS) -> ColumnRead:
        """One column's entries of the live files: ``fid`` and ``fields``, newest per fid, sorted by fid."""
        parts, nbytes, groups = [], 0, 0
        if self.store is not None:
            stored = self.store.read_entries(column, list(fields), manifest=self.manifest)
            parts.append(stored.rows)
            nbytes, groups = stored.bytes_read, stored.row_groups
        parts.append(self._own(column, list(fields)))
        live = self.read_live([])
        entries = restricted_to(newest_per_fid(parts), live.rows["fid"].to_numpy())
        return ColumnRead(entries, nbytes + live.bytes_read, groups + live.row_groups)

    def files_of(self, fids: np.ndarray) -> ColumnRead:
        """``file`` and ``partition`` of the live files numbered ``fids``, in that order."""
        own = self._own(FILE_ROWS, ["deleted", "file", "partition"])
        own = own.filter(pc.invert(pc.fill_null(own["deleted"], False)))
        pos, here = find(own["fid"].to_numpy(), fids)
        out = own.select(["file", "partition"]).take(pa.array(pos[here]))
        if here.all():
            return ColumnRead(out, 0, 0)
        if self.store is None:
            raise ValueError("file numbers not in the index")  # the caller passes live files only
        stored = self.store.files_of(fids[~here], manifest=self.manifest)
        both = pa.concat_tables([out, stored.rows.select(["file", "partition"])])
        order = np.argsort(np.concatenate([np.flatnonzero(here), np.flatnonzero(~here)]), kind="stable")
        return ColumnRead(both.take(pa.array(order)), stored.bytes_read, stored.row_groups)
