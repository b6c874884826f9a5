"""The index on a real Delta table: incremental sync equals a rebuild, LSM segments, fallbacks."""

from __future__ import annotations

import json
import os
import time
from dataclasses import replace
from pathlib import Path

import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable

from lakecluster.errors import StatsIndexError
from lakecluster.index.prune import prune
from lakecluster.index.spec import IndexSpec
from lakecluster.index.sync import is_current, rebuild, store_for, sync
from tests.index.tables import append, batch, rewrite_partition


def rebuilt(spec: IndexSpec, tmp_path: Path):  # type: ignore[no-untyped-def]
    """Every live row of an index rebuilt from scratch into a separate directory."""
    other = replace(spec, index_path=str(tmp_path / "rebuilt-index"))
    rebuild(other)
    return store_for(other).read_all()


def test_incremental_sync_after_appends_and_rewrites_equals_a_rebuild(tmp_path: Path) -> None:
    table = tmp_path / "t"
    spec = replace(IndexSpec.for_table(str(table)), max_segments=100)
    append(table, batch(0, 200, seed=1), 0)
    assert sync(spec).mode == "rebuild"  # no index yet
    modes = []
    for i in range(1, 4):
        append(table, batch(i * 200, 200, seed=i), i)
        modes.append(sync(spec))
    version = rewrite_partition(table, 1993)
    modes.append(sync(spec))
    append(table, batch(900, 50, seed=9), 9)
    version = rewrite_partition(table, 1992)  # two commits at once: adds and removes netted
    modes.append(sync(spec))
    assert [m.mode for m in modes] == ["incremental"] * 5
    assert modes[3].files_removed > 0 and modes[3].files_added == 1
    manifest = store_for(spec).manifest()
    assert manifest is not None and manifest.delta_version == version == DeltaTable(str(table)).version()
    assert len(manifest.segments) == 5
    live = store_for(spec).read_all()
    assert live.equals(rebuilt(spec, tmp_path))
    # and it describes exactly the table's live files, every indexed column for each
    files = set(DeltaTable(str(table)).get_add_actions(flatten=True).column("path").to_pylist())
    assert set(live["file"].to_pylist()) == files
    assert live.num_rows == len(files) * len(manifest.indexed)


def test_segments_are_merged_into_a_new_base_past_max_segments(tmp_path: Path) -> None:
    table = tmp_path / "t"
    spec = replace(IndexSpec.for_table(str(table)), max_segments=2)
    append(table, batch(0, 100, seed=1), 0)
    sync(spec)
    first_base = store_for(spec).manifest().base  # type: ignore[union-attr]
    counts = []
    for i in range(1, 5):
        append(table, batch(i * 100, 100, seed=i), i)
        sync(spec)
        counts.append(len(store_for(spec).manifest().segments))  # type: ignore[union-attr]
    assert counts == [1, 2, 0, 1]  # the third segment triggered a merge
    manifest = store_for(spec).manifest()
    assert manifest is not None and manifest.base != first_base
    on_disk = sorted(p.name for p in Path(spec.index_path).glob("*.parquet"))
    assert set(manifest.files) < set(on_disk)  # merged-away files wait out the grace period
    store_for(spec).gc(now=time.time() + spec.gc_grace_s + 1)
    on_disk = sorted(p.name for p in Path(spec.index_path).glob("*.parquet"))
    assert on_disk == sorted(manifest.files)  # ... and are deleted after it
    assert store_for(spec).read_all().equals(rebuilt(spec, tmp_path))


def test_a_checkpoint_that_hides_needed_commits_makes_sync_rebuild(tmp_path: Path) -> None:
    table = tmp_path / "t"
    spec = IndexSpec.for_table(str(table))
    append(table, batch(0, 100, seed=1), 0)
    sync(spec)
    for i in range(1, 4):
        append(table, batch(i * 100, 100, seed=i), i)
    dt = DeltaTable(str(table))
    dt.create_checkpoint()
    for v in range(1, dt.version() + 1):  # as log cleanup would: the JSON commits are gone
        os.remove(table / "_delta_log" / f"{v:020d}.json")
    result = sync(spec)
    assert result.mode == "rebuild" and "checkpoint" in result.reason
    assert store_for(spec).read_all().equals(rebuilt(spec, tmp_path))


def test_unreadable_manifest_or_changed_settings_rebuild(tmp_path: Path) -> None:
    table = tmp_path / "t"
    spec = IndexSpec.for_table(str(table))
    append(table, batch(0, 100, seed=1), 0)
    sync(spec)
    Path(spec.index_path, "manifest.json").write_text("{not json")
    with pytest.raises(StatsIndexError, match="unreadable"):
        store_for(spec).manifest()
    assert sync(spec).mode == "rebuild"
    narrower = replace(spec, max_columns=3)
    assert sync(narrower).mode == "rebuild"
    # year is the partition column and always indexed; the cap fills up in schema order
    assert store_for(narrower).manifest().indexed == ["year", "id", "city"]  # type: ignore[union-attr]


def test_one_column_is_read_from_its_own_row_groups_only(tmp_path: Path) -> None:
    table = tmp_path / "t"
    spec = replace(IndexSpec.for_table(str(table)), row_group_rows=64)
    append(table, batch(0, 3000, seed=1), 0, rows_per_file=10)  # 300 files, 8 columns
    sync(spec)
    store = store_for(spec)
    manifest = store.manifest()
    assert manifest is not None
    path = Path(spec.index_path) / manifest.base  # type: ignore[operator]
    md = pq.ParquetFile(path).metadata
    keys = [md.row_group(i).column(0).statistics for i in range(md.num_row_groups)]
    assert all(st.min == st.max for st in keys)  # no row group spans two columns
    read = store.read_column("city")
    assert read.rows.num_rows == 300 and set(read.rows["column"].to_pylist()) == {"city"}
    own = [i for i, st in enumerate(keys) if st.min == "city"]
    assert read.row_groups == len(own) == 5  # ceil(300 / 64) of the file's 40
    chunks = sum(md.row_group(i).column(j).total_compressed_size for i in own for j in range(md.num_columns))
    assert read.bytes_read == md.serialized_size + 8 + chunks  # the footer and city's row groups, nothing else
    assert read.bytes_read < path.stat().st_size / 2


def test_prune_syncs_a_stale_index_and_without_sync_refuses_it(tmp_path: Path) -> None:
    table = tmp_path / "t"
    spec = IndexSpec.for_table(str(table))
    append(table, batch(0, 100, seed=1), 0)
    sync(spec)
    version = append(table, batch(10_000, 10, seed=2), 1)  # ids 10000..10009, in new files
    assert not is_current(spec)
    with pytest.raises(StatsIndexError, match="behind"):
        prune(spec, "id >= 10000", sync_first=False)
    result = prune(spec, "id >= 10000")
    new_files = {
        a["add"]["path"]
        for a in map(json.loads, (table / "_delta_log" / f"{version:020d}.json").read_text().splitlines())
        if "add" in a
    }
    assert set(result.paths) == new_files
    assert result.files_total > len(new_files)
    assert int(pc.sum(result.files["value_count"]).as_py()) == 10
