"""The index on storage: an LSM of Parquet files sorted by (column, partition, file), and a manifest.

``<index path>/manifest.json`` names the Delta version the index reflects, the table's columns,
the base file and the delta segments (oldest first). It is replaced atomically (write a temporary
file, then rename): a reader sees either the old or the new index, never a mix. Every data file
is sorted by the key and written so that **no row group spans two columns**, with row-group
statistics on the key: a reader of one column reads the footer, then only that column's row
groups. A segment holds the rows of files added since the previous sync and tombstones
(``deleted = true``) of removed files; for each (column, file) the newest file wins. When there
are more than ``max_segments`` segments, base and segments are merged into a new base.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import TypeVar

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from lakecluster.errors import StatsIndexError
from lakecluster.index.stats import KEY, ROW_SCHEMA, empty_rows
from lakecluster.parquet_files import filesystem
from lakecluster.schema import ColumnSpec

FORMAT = 1
MANIFEST = "manifest.json"
_T = TypeVar("_T")


@dataclass(frozen=True)
class Manifest:
    delta_version: int
    table_columns: list[dict[str, str]]  # every column of the table: {"name", "type"}
    indexed: list[str]
    partition_by: list[str]
    fingerprint: dict
    base: str | None = None
    segments: list[str] = field(default_factory=list)
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
class ColumnRead:
    rows: pa.Table  # live rows of the column
    bytes_read: int  # footers + the column chunks of the row groups read
    row_groups: int


class IndexStore:
    def __init__(self, path: str, *, row_group_rows: int = 16_384) -> None:
        self.path = path.rstrip("/")
        self.fs, self.root = filesystem(self.path)
        self.row_group_rows = row_group_rows

    # -- manifest ---------------------------------------------------------------------------

    def manifest(self) -> Manifest | None:
        """The current manifest, None when there is no index; StatsIndexError when unreadable."""
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

    def publish(self, manifest: Manifest) -> None:
        """Replace the manifest atomically, then delete data files it no longer names."""
        self.fs.create_dir(self.root, recursive=True)
        tmp = f"{self.root}/.{MANIFEST}.{uuid.uuid4().hex}"
        with self.fs.open_output_stream(tmp) as out:
            out.write(json.dumps(asdict(manifest), indent=1).encode())
        self.fs.move(tmp, f"{self.root}/{MANIFEST}")
        keep = set(manifest.files)
        from pyarrow import fs as pafs

        for info in self.fs.get_file_info(pafs.FileSelector(self.root, allow_not_found=True)):
            if info.base_name.endswith(".parquet") and info.base_name not in keep:
                # A reader that still holds the old manifest retries with the new one.
                self.fs.delete_file(info.path)

    # -- data files ---------------------------------------------------------------------------

    def write(self, rows: pa.Table, kind: str, version: int) -> str:
        """Write sorted ``rows`` as one file; returns its name (relative to the index path)."""
        self.fs.create_dir(self.root, recursive=True)
        name = f"{kind}-{version:020d}-{uuid.uuid4().hex[:12]}.parquet"
        rows = rows.cast(ROW_SCHEMA).sort_by(KEY)
        with pq.ParquetWriter(
            f"{self.root}/{name}", ROW_SCHEMA, filesystem=self.fs, compression="zstd",
            use_dictionary=["column", "partition", "min", "max"], column_encoding={"file": "DELTA_BYTE_ARRAY"},
            write_statistics=["column"],  # the key readers filter row groups on; more stats bloat the footer
        ) as writer:  # fmt: skip
            for start, end in _runs(rows["column"]):
                writer.write_table(rows.slice(start, end - start), row_group_size=self.row_group_rows)
        return name

    def _open(self, name: str) -> pq.ParquetFile:
        return pq.ParquetFile(self.fs.open_input_file(f"{self.root}/{name}"))

    # -- reading --------------------------------------------------------------------------------

    def read_column(self, column: str, columns: Sequence[str] | None = None) -> ColumnRead:
        """Live rows of one column: per file, the footer and the row groups whose key range holds it."""
        return self._retrying(lambda m: self._read_column(m, column, columns))

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
            tables.append(t.append_column("_seq", pa.array(np.full(t.num_rows, seq, dtype=np.int32))))
        return ColumnRead(_latest(tables, wanted), nbytes, groups)

    def read_all(self) -> pa.Table:
        """Every live row, sorted by the key (for `index show`, merges and the equality checks)."""
        return self._retrying(self._read_all)

    def _read_all(self, manifest: Manifest) -> pa.Table:
        tables = []
        for seq, name in enumerate(manifest.files):
            t = self._open(name).read()
            tables.append(t.append_column("_seq", pa.array(np.full(t.num_rows, seq, dtype=np.int32))))
        return _latest(tables, ROW_SCHEMA.names)

    def _retrying(self, read: Callable[[Manifest], _T]) -> _T:
        for attempt in range(3):
            manifest = self.manifest()
            if manifest is None:
                raise StatsIndexError(f"no index under {self.path} (run `lakecluster index sync`)")
            try:
                return read(manifest)
            except FileNotFoundError:
                if attempt == 2:
                    raise StatsIndexError(f"index files under {self.path} keep disappearing; rebuild it") from None
        raise AssertionError("unreachable")  # pragma: no cover

    # -- writing new states -----------------------------------------------------------------------

    def replace(self, rows: pa.Table, manifest: Manifest) -> Manifest:
        """A new base holding ``rows``, no segments."""
        base = self.write(rows, "base", manifest.delta_version)
        new = Manifest(**{**asdict(manifest), "base": base, "segments": []})
        self.publish(new)
        return new

    def append(self, rows: pa.Table, old: Manifest, version: int, max_segments: int) -> Manifest:
        """A segment with ``rows`` (adds and tombstones) on top of ``old``; merges past ``max_segments``."""
        segments = list(old.segments)
        if rows.num_rows:
            segments.append(self.write(rows, "seg", version))
        new = Manifest(**{**asdict(old), "delta_version": version, "segments": segments})
        self.publish(new)
        if len(segments) > max_segments:
            new = self.replace(self.read_all(), new)
        return new


def _runs(column: pa.ChunkedArray | pa.Array) -> list[tuple[int, int]]:
    """(start, end) of each run of equal values of the sorted key column."""
    n = len(column)
    if n == 0:
        return []
    codes = pc.dictionary_encode(column).combine_chunks().indices.to_numpy(zero_copy_only=False)
    starts = np.flatnonzero(np.r_[True, codes[1:] != codes[:-1]])
    return list(zip(starts.tolist(), np.r_[starts[1:], n].tolist(), strict=True))


def _latest(tables: list[pa.Table], names: Sequence[str]) -> pa.Table:
    """For each (column, file) the row of the newest source; tombstoned keys dropped."""
    names = [n for n in names if n != "_seq"]
    if not tables:
        return empty_rows().select(names)
    if len(tables) == 1:
        t = tables[0]
        return t.filter(pc.invert(t["deleted"])).select(names)
    t = pa.concat_tables(tables).combine_chunks()
    t = t.take(pc.sort_indices(t, [("column", "ascending"), ("file", "ascending"), ("_seq", "descending")]))
    if t.num_rows:
        col, f = t["column"], t["file"]
        changed = pc.or_(pc.not_equal(col.slice(1), col.slice(0, len(col) - 1)),
                         pc.not_equal(f.slice(1), f.slice(0, len(f) - 1)))  # fmt: skip
        first = pa.concat_arrays([pa.array([True]), changed.combine_chunks()])
        t = t.filter(first)
    t = t.filter(pc.invert(t["deleted"]))
    return t.sort_by([k for k in KEY if k[0] in names]).select(names)
