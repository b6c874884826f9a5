"""Boundary sketches persisted next to the table: versioned, written atomically, tied to Delta.

Layout: ``<table>/_lakecluster/streams/<stream id>/sketches/v<delta version>-b<txn version>.sketches``.
Each file holds the merged sketches of every clustering column covering all rows the stream
committed up to that Delta version (and txn version). A reader sees a whole file or none (a
temporary name renamed locally; one PUT on object stores); the newest ``retain`` files are kept.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Mapping

import pyarrow.fs as pafs

from lakecluster.errors import SketchStoreError
from lakecluster.schema import ColumnSpec
from lakecluster.sketches import MAX_STRING_CHARS_DEFAULT, BoundarySketches, ColumnSketch, sketch_kind
from lakecluster.table.paths import SKETCHES

_SUFFIX = ".sketches"


class SketchStore:
    """The sketch files of one stream (``stream_id``), or, for readers, of every stream of a table.

    Each stream writes only its own directory (``_lakecluster/streams/<stream id>/sketches``), so
    two streams into one table never overwrite each other's sketches; a reader without a stream id
    merges the latest sketches of every stream (and of ``_lakecluster/sketches``, where versions
    before stream ids kept them). The table handle builds it (``LakeTable.sketches``) with the
    paths inside ``fs`` of the stream's directory, of every stream's and of the legacy one.
    """

    def __init__(self, fs: pafs.FileSystem, *, directory: str, streams: str, legacy: str, stream_id: str | None,
                 local: bool) -> None:  # fmt: skip
        self.fs = fs
        self.local = local
        self.streams = streams
        self.legacy = legacy
        self.stream_id = stream_id
        self.directory = directory

    def _list(self, directory: str) -> list[pafs.FileInfo]:
        try:
            return self.fs.get_file_info(pafs.FileSelector(directory, allow_not_found=True))
        except FileNotFoundError:
            # pyarrow's local listing can still fail this way while a writer creates the directory.
            return []

    def _names(self, directory: str | None = None) -> list[str]:
        infos = self._list(directory or self.directory)
        return sorted(i.base_name for i in infos if i.base_name.startswith("v") and i.base_name.endswith(_SUFFIX))

    def latest(self, physical: Mapping[str, str] | None = None) -> BoundarySketches | None:
        """The newest sketches (of the stream, or every stream's merged); with ``physical`` (the
        table's columns and their physical names now), each file's sketches under the names the
        table gives their columns now (``BoundarySketches.follow``: a column renamed since)."""
        if self.stream_id:
            names = self._names()
            if not names:
                return None
            found = self.read(f"{self.directory}/{names[-1]}")
            if physical is not None:
                found.follow(physical)
            return found
        infos = self._list(self.streams)
        directories = [self.legacy] + [f"{i.path}/{SKETCHES}" for i in infos if i.type == pafs.FileType.Directory]
        merged: BoundarySketches | None = None
        for directory in directories:
            names = self._names(directory)
            if not names:
                continue
            found = self.read(f"{directory}/{names[-1]}")
            if physical is not None:
                found.follow(physical)
            if merged is None:
                merged = found
            else:
                merged.merge({name: s for name, s in found.sketches.items() if name in merged.sketches})
                # A column only some folders have (sketches built from the table after a layout
                # change, a stream started with other columns) is taken as it is.
                taken = {name: s for name, s in found.sketches.items() if name not in merged.sketches}
                merged.sketches.update(taken)
                merged.from_table.update({name: v for name, v in found.from_table.items() if name in taken})
                merged.physical.update({name: p for name, p in found.physical.items() if name in taken})
                merged.delta_version = max(merged.delta_version, found.delta_version)
        return merged

    def read(self, path: str) -> BoundarySketches:
        try:
            with self.fs.open_input_stream(path) as f:
                data = f.read()
            header_len = int.from_bytes(data[:8], "little")
            header = json.loads(data[8 : 8 + header_len])
            body = data[8 + header_len :]
            sketches = {
                c["name"]: ColumnSketch.from_bytes(body[c["offset"] : c["offset"] + c["length"]])
                for c in header["columns"]
            }
        except (OSError, ValueError, KeyError) as e:
            raise SketchStoreError(f"cannot read boundary sketches {path}: {e}") from e
        return BoundarySketches(sketches, delta_version=header["delta_version"],
                                stream_batch_id=header["stream_batch_id"],
                                from_table=header.get("from_table", {}),
                                erased_at=int(header.get("erased_at", -1)),
                                physical=header.get("physical", {}))  # fmt: skip

    def newest(self) -> str | None:
        """The name of this stream's newest sketch file (None: there is none)."""
        names = self._names()
        return names[-1] if names else None

    def write(self, sketches: BoundarySketches, *, retain: int = 20) -> str:
        parts, columns, offset = [], [], 0
        for name, sketch in sketches.sketches.items():
            blob = sketch.to_bytes()
            columns.append({"name": name, "offset": offset, "length": len(blob), "n": sketch.n})
            parts.append(blob)
            offset += len(blob)
        header = json.dumps({
            "format": 1,
            "delta_version": sketches.delta_version,
            "stream_batch_id": sketches.stream_batch_id,
            "from_table": sketches.from_table,
            "erased_at": sketches.erased_at,
            "physical": sketches.physical,
            "written_at": time.time(),
            "columns": columns,
        }).encode()  # fmt: skip
        name = f"v{sketches.delta_version:020d}-b{sketches.stream_batch_id:012d}{_SUFFIX}"
        self.fs.create_dir(self.directory, recursive=True)
        body = len(header).to_bytes(8, "little") + header + b"".join(parts)
        if self.local:
            # A reader sees a whole file or none: rename is atomic on local filesystems.
            tmp = f"{self.directory}/.tmp-{uuid.uuid4().hex}"
            with self.fs.open_output_stream(tmp) as out:
                out.write(body)
            self.fs.move(tmp, f"{self.directory}/{name}")
        else:
            # An object store publishes a whole object with one PUT (its "move" is copy + delete).
            with self.fs.open_output_stream(f"{self.directory}/{name}") as out:
                out.write(body)
        for old in self._names()[:-retain]:
            self.fs.delete_file(f"{self.directory}/{old}")
        return name


def load_or_empty(
    store: SketchStore, columns: tuple[ColumnSpec, ...], *, k: int, max_string_chars: int = MAX_STRING_CHARS_DEFAULT,
    physical: Mapping[str, str] | None = None,
) -> BoundarySketches:
    """The latest sketches, with an empty sketch for any clustering column not in them yet.

    Columns of the file that are not among ``columns`` are kept as they are: a stream started with
    other clustering columns writes them on, so the sketches the compactor built from the table for
    a layout change are not lost when a stream still running with the old columns writes its next
    file. With ``physical`` (the table's columns' physical names), a renamed column's sketch
    follows the rename, and the file written next records them."""
    latest = store.latest(physical)
    fresh = BoundarySketches.empty(columns, k=k, max_string_chars=max_string_chars)
    if physical is not None:
        fresh.physical = {c.name: physical[c.name] for c in columns if c.name in physical}
    if latest is None:
        return fresh
    for c in columns:
        old = latest.sketches.get(c.name)
        if old is not None and old.kind == sketch_kind(c):
            fresh.sketches[c.name] = old
    declared = {c.name for c in columns}
    fresh.sketches.update({name: s for name, s in latest.sketches.items() if name not in declared})
    # A column kept from the file keeps its mark (one whose type changed starts empty, unmarked).
    kept = {name for name, s in fresh.sketches.items() if s is latest.sketches.get(name)}
    fresh.from_table = {name: v for name, v in latest.from_table.items() if name in kept}
    fresh.delta_version, fresh.stream_batch_id = latest.delta_version, latest.stream_batch_id
    fresh.erased_at = latest.erased_at
    fresh.physical = {**latest.physical, **fresh.physical}
    return fresh
