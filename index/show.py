"""``lakecluster index show``: what the index holds (version, files), and one column's stats."""

from __future__ import annotations

from typing import Any

from lakecluster.errors import StatsIndexError, UnknownColumnError
from lakecluster.index.encoding import decode_array
from lakecluster.index.spec import IndexSpec
from lakecluster.index.sync import store_for


def show(spec: IndexSpec, column: str | None = None, limit: int = 20) -> dict[str, Any]:
    store = store_for(spec)
    manifest = store.manifest()
    if manifest is None:
        raise StatsIndexError(f"no index under {spec.index_path} (run `lakecluster index sync`)")
    sizes = {}
    for name in manifest.files:
        file_info = store.fs.get_file_info(f"{store.root}/{name}")
        sizes[name] = int(file_info.size or 0)
    info: dict[str, Any] = {
        "path": spec.index_path, "delta_version": manifest.delta_version, "table_id": manifest.table_id,
        "indexed_columns": manifest.indexed,
        "partition_by": manifest.partition_by, "base": manifest.base, "segments": manifest.segments,
        "bytes": sum(sizes.values()),
    }  # fmt: skip
    table = manifest.table_id or "none recorded (an older lakecluster wrote the index: the next sync rebuilds it)"
    lines = [f"index {spec.index_path} at Delta version {manifest.delta_version}, table id {table}",
             f"  {len(manifest.indexed)} indexed column(s): {', '.join(manifest.indexed)}",
             f"  base {manifest.base} and {len(manifest.segments)} segment(s), {info['bytes']:,} bytes"]  # fmt: skip
    if column is not None:
        by_name = {c.name: c for c in manifest.indexed_columns()}
        if column not in by_name:
            raise UnknownColumnError(column, list(by_name))
        read = store.read_column(column)
        rows = read.rows.sort_by([("partition", "ascending"), ("file", "ascending")]).slice(0, limit)
        shown = rows.select(["partition", "file", "value_count", "null_count", "nan_count"])
        shown = shown.append_column("min", decode_array(by_name[column], rows["min"].combine_chunks()))
        shown = shown.append_column("max", decode_array(by_name[column], rows["max"].combine_chunks()))
        info["column"] = {"name": column, "files": read.rows.num_rows, "bytes_read": read.bytes_read,
                          "rows": shown.to_pylist()}  # fmt: skip
        lines.append(f"  {column}: {read.rows.num_rows:,} file(s); read {read.bytes_read:,} bytes "
                     f"({read.row_groups} row group(s)); first {shown.num_rows}:")  # fmt: skip
        for r in shown.to_pylist():
            lines.append(f"    {r['file']}  rows={r['value_count']} nulls={r['null_count']} nans={r['nan_count']} "
                         f"min={r['min']!r} max={r['max']!r}")  # fmt: skip
    info["text"] = "\n".join(lines)
    return info
