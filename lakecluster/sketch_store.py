"""Boundary sketches persisted next to the table: versioned, written atomically, tied to Delta.

Layout: ``<table>/_lakecluster/sketches/v<delta version>-b<stream batch>.sketches``. Each file holds
the merged sketches of every clustering column covering all rows the stream committed up to that
Delta version (and micro-batch). Files are written to a temporary name and renamed, so a reader
sees a whole file or none; the newest ``retain`` files are kept.
"""

from __future__ import annotations

import json
import time
import uuid

import pyarrow.fs as pafs

from lakecluster.errors import SketchStoreError
from lakecluster.parquet_files import filesystem
from lakecluster.schema import ColumnSpec
from lakecluster.sketches import BoundarySketches, ColumnSketch, sketch_kind

_SUFFIX = ".sketches"


class SketchStore:
    def __init__(self, table_uri: str) -> None:
        self.fs, root = filesystem(table_uri)
        self.directory = f"{root}/_lakecluster/sketches"

    def _names(self) -> list[str]:
        infos = self.fs.get_file_info(pafs.FileSelector(self.directory, allow_not_found=True))
        return sorted(i.base_name for i in infos if i.base_name.startswith("v") and i.base_name.endswith(_SUFFIX))

    def latest(self) -> BoundarySketches | None:
        names = self._names()
        return self.read(names[-1]) if names else None

    def read(self, name: str) -> BoundarySketches:
        path = f"{self.directory}/{name}"
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
        return BoundarySketches(
            sketches, delta_version=header["delta_version"], stream_batch_id=header["stream_batch_id"]
        )

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
            "written_at": time.time(),
            "columns": columns,
        }).encode()  # fmt: skip
        name = f"v{sketches.delta_version:020d}-b{sketches.stream_batch_id:012d}{_SUFFIX}"
        self.fs.create_dir(self.directory, recursive=True)
        tmp = f"{self.directory}/.tmp-{uuid.uuid4().hex}"
        with self.fs.open_output_stream(tmp) as out:
            out.write(len(header).to_bytes(8, "little") + header + b"".join(parts))
        # rename is atomic on local and HDFS filesystems; object stores publish a whole object.
        self.fs.move(tmp, f"{self.directory}/{name}")
        for old in self._names()[:-retain]:
            self.fs.delete_file(f"{self.directory}/{old}")
        return name


def load_or_empty(store: SketchStore, columns: tuple[ColumnSpec, ...], *, k: int) -> BoundarySketches:
    """The latest sketches, with an empty sketch for any clustering column not in them yet."""
    latest = store.latest()
    fresh = BoundarySketches.empty(columns, k=k)
    if latest is None:
        return fresh
    for c in columns:
        old = latest.sketches.get(c.name)
        if old is not None and old.kind == sketch_kind(c):
            fresh.sketches[c.name] = old
    fresh.delta_version, fresh.stream_batch_id = latest.delta_version, latest.stream_batch_id
    return fresh
