"""Per-file [min, max] of the clustering columns for the compactor, read from the index.

The compactor's depth estimate needs only the clustering columns; the index gives them without
reading every file's stats of every column from the Delta log. Used only when the index
reflects exactly the table version the caller looks at; otherwise the caller reads the log.
"""

from __future__ import annotations

from collections.abc import Sequence

import pyarrow as pa
import pyarrow.compute as pc

from lakecluster.index.encoding import decode_array
from lakecluster.index.spec import IndexSpec
from lakecluster.index.sync import store_for


def clustering_ranges(spec: IndexSpec, columns: Sequence[str], version: int) -> pa.Table | None:
    """``path``, ``min.<c>``, ``max.<c>`` per live file (the shape ``clustering_depth`` reads),
    or None when the index is missing, at another version, or lacks a column."""
    store = store_for(spec)
    manifest = store.manifest()
    if manifest is None or manifest.delta_version != version or not set(columns) <= set(manifest.indexed):
        return None
    by_name = {c.name: c for c in manifest.columns()}
    out: dict[str, pa.Array] = {}
    files = None
    for name in columns:
        rows = store.read_column(name, ["file", "min", "max"]).rows
        if files is None:
            files = rows["file"].combine_chunks()
            out["path"] = files
        pos = pc.index_in(files, value_set=rows["file"])
        rows = rows.take(pos)
        out[f"min.{name}"] = decode_array(by_name[name], rows["min"].combine_chunks())
        out[f"max.{name}"] = decode_array(by_name[name], rows["max"].combine_chunks())
    return pa.table(out) if out else None
