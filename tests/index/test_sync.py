"""The index on a real Delta table: incremental sync equals a rebuild, LSM segments, fallbacks."""

from __future__ import annotations

import json
import os
import time
from dataclasses import replace
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable, write_deltalake

from lakecluster.errors import StatsIndexError
from lakecluster.index.prune import prune
from lakecluster.index.spec import IndexSpec
from lakecluster.index.stats import ENTRY_FIELDS, FILE_FIELDS
from lakecluster.index.store import merge_plan
from lakecluster.index.sync import rebuild, store_for, stored_unusable, sync
from lakecluster.table import LakeTable
from tests.index.tables import append, batch, rewrite_partition


def rebuilt(spec: IndexSpec, tmp_path: Path):  # type: ignore[no-untyped-def]
    """Every live row of an index rebuilt from scratch into a separate directory."""
    other = replace(spec, index_path=str(tmp_path / "rebuilt-index"))
    rebuild(other)
    return store_for(other).read_all()


def test_incremental_sync_after_appends_and_rewrites_equals_a_rebuild(tmp_path: Path) -> None:
    table = tmp_path / "t"
    spec = replace(IndexSpec.for_location(LakeTable.at(str(table))), max_segments=100)
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
    live = store_for(spec).read_all()
    assert live.equals(rebuilt(spec, tmp_path))
    # and it describes exactly the table's live files, every indexed column for each
    files = set(DeltaTable(str(table)).get_add_actions(flatten=True).column("path").to_pylist())
    assert set(live["file"].to_pylist()) == files
    assert live.num_rows == len(files) * len(manifest.indexed)


def test_segments_merge_by_size_and_keep_tombstones_until_the_base_is_rewritten(tmp_path: Path) -> None:
    table = tmp_path / "t"
    spec = IndexSpec.for_location(LakeTable.at(str(table)))  # max_segments 8
    append(table, batch(0, 3000, seed=1), 0, rows_per_file=20)
    sync(spec)
    first_base = store_for(spec).manifest().base  # type: ignore[union-attr]
    history = []  # (base, segments) after each sync
    for i in range(1, 40):
        if i == 3:
            rewrite_partition(table, 1993)  # tombstones for the base's files of 1993
        append(table, batch(3000 + i * 40, 40, seed=i), i, rows_per_file=20)
        assert sync(spec).mode == "incremental"
        manifest = store_for(spec).manifest()
        assert manifest is not None and len(manifest.segments) <= spec.max_segments
        history.append((manifest.base, manifest.segments))
        assert store_for(spec).read_all().equals(rebuilt(spec, tmp_path)), f"sync {i}"
        if manifest.base != first_base:
            break
    # Segments merged among themselves, the base untouched, after the rewrite's tombstones came
    # in (equality with a rebuild after each sync shows that merges kept them) ...
    merges = [i for i in range(3, len(history)) if history[i][0] == first_base
              and len(history[i][1]) < len(history[i - 1][1]) + 1]  # fmt: skip
    assert merges, history
    # ... until they held half as many rows as the base: then one new base, no segments.
    assert history[-1][0] != first_base and history[-1][1] == [] and len(history) > 5, history
    manifest = store_for(spec).manifest()
    on_disk = sorted(p.name for p in Path(spec.index_path).glob("*.parquet"))
    assert set(manifest.files) < set(on_disk)  # type: ignore[union-attr]  # merged-away files wait ...
    store_for(spec).gc(now=time.time() + spec.gc_grace_s + 1)
    on_disk = sorted(p.name for p in Path(spec.index_path).glob("*.parquet"))
    assert on_disk == sorted(manifest.files)  # type: ignore[union-attr]  # ... the grace period, then go


def test_merge_plan_is_a_binary_counter_with_bounded_work() -> None:
    base, segments, rewritten = 10**9, [], 0
    for syncs in range(1, 1025):
        segments.append(1)
        merge = merge_plan(base, segments, max_segments=64)
        if merge:
            segments[-merge:] = [sum(segments[-merge:])]
            rewritten += segments[-1]
        assert len(segments) == bin(syncs).count("1")  # about log2(syncs) segments
    assert rewritten <= 1024 * 10  # each row rewritten at most log2(1024) times, the base never
    assert merge_plan(100, [30, 20], max_segments=8) == 2  # half the base's rows: everything merges
    assert merge_plan(10**9, [8, 4, 2, 1], max_segments=3) == 4  # past max_segments: all segments
    assert merge_plan(10**9, [8, 4, 2], max_segments=8) == 0


def test_an_empty_partition_value_is_indexed_as_null_incrementally_as_in_a_rebuild(tmp_path: Path) -> None:
    table = str(tmp_path / "t")
    rows = pa.table({"s": pa.array(["", "x"]), "v": pa.array([1, 2], pa.int64())})
    write_deltalake(table, rows, partition_by=["s"])  # "" in partitionValues: Delta's null
    spec = IndexSpec.for_location(LakeTable.at(table))
    assert sync(spec).mode == "rebuild"
    write_deltalake(table, rows, partition_by=["s"], mode="append")
    assert sync(spec).mode == "incremental"
    kept = prune(spec, "s IS NULL", index="stored")
    assert kept.files.num_rows == 2 and kept.files_total == 4  # both files of the null partition
    assert store_for(spec).read_all().equals(rebuilt(spec, tmp_path))


def test_a_checkpoint_that_hides_needed_commits_makes_sync_rebuild(tmp_path: Path) -> None:
    table = tmp_path / "t"
    spec = IndexSpec.for_location(LakeTable.at(str(table)))
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
    spec = IndexSpec.for_location(LakeTable.at(str(table)))
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


def test_boolean_columns_are_indexed_only_when_named_or_clustered_on(tmp_path: Path) -> None:
    table = tmp_path / "t"
    spec = IndexSpec.for_location(LakeTable.at(str(table)))
    append(table, batch(0, 100, seed=1), 0)
    sync(spec)
    by_default = store_for(spec).manifest().indexed  # type: ignore[union-attr]
    assert "flag" not in by_default and {"id", "city", "x", "amount", "day"} <= set(by_default)
    # A query on the column keeps every file: nothing is known of it.
    assert prune(spec, "flag = true", index="stored").files.num_rows == len(DeltaTable(str(table)).file_uris())
    for named in (replace(spec, columns=("flag",)), replace(spec, clustering_columns=("flag",))):
        assert sync(named).mode == "rebuild"  # other settings
        assert "flag" in store_for(named).manifest().indexed  # type: ignore[union-attr]


def test_one_column_is_read_from_its_own_row_groups_and_the_file_rows_only(tmp_path: Path) -> None:
    table = tmp_path / "t"
    spec = replace(IndexSpec.for_location(LakeTable.at(str(table))), row_group_rows=64)
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
    assert sorted(read.rows["file"].to_pylist()) == sorted(store.read_files(["file"])["file"].to_pylist())
    schema = md.schema.to_arrow_schema()
    wanted = {"": ["column", "fid", "deleted", *FILE_FIELDS], "city": ["column", "fid", *ENTRY_FIELDS]}
    groups = {name: [i for i, st in enumerate(keys) if st.min == name] for name in wanted}
    assert len(groups["city"]) == len(groups[""]) == 5  # ceil(300 / 64) of the file's 45
    assert read.row_groups == 10
    chunks = sum(md.row_group(i).column(schema.get_field_index(c)).total_compressed_size
                 for name, fields in wanted.items() for i in groups[name] for c in fields)  # fmt: skip
    # the footer (once) and those row groups' chunks, nothing else
    assert read.bytes_read == md.serialized_size + 8 + chunks
    assert read.bytes_read < path.stat().st_size / 2
    again = store.read_column("city")  # data files never change: what was read is kept
    assert again.bytes_read == 0 and again.rows.equals(read.rows)


def snapshot_of(directory: Path) -> dict[str, bytes]:
    """Every file under ``directory`` (relative path -> content)."""
    return {str(p.relative_to(directory)): p.read_bytes() for p in sorted(directory.rglob("*")) if p.is_file()}


def test_prune_reads_what_a_stale_index_lacks_from_the_log_writes_only_with_sync_and_stored_refuses(
    tmp_path: Path,
) -> None:
    table = tmp_path / "t"
    spec = IndexSpec.for_location(LakeTable.at(str(table)))
    append(table, batch(0, 100, seed=1), 0)
    sync(spec)
    version = append(table, batch(10_000, 10, seed=2), 1)  # ids 10000..10009, in new files
    assert not is_current(spec)
    with pytest.raises(StatsIndexError, match="behind"):
        prune(spec, "id >= 10000", index="stored")
    before = snapshot_of(table)
    result = prune(spec, "id >= 10000")
    assert snapshot_of(table) == before and not is_current(spec)  # nothing written
    assert result.version == version and result.index_version == version - 1 and result.commits_from_log == 1
    synced = prune(spec, "id >= 10000", index="sync")
    assert is_current(spec) and synced.paths == result.paths and synced.commits_from_log == 0
    new_files = {
        a["add"]["path"]
        for a in map(json.loads, (table / "_delta_log" / f"{version:020d}.json").read_text().splitlines())
        if "add" in a
    }
    assert set(result.paths) == new_files
    assert result.files_total > len(new_files)
    assert int(pc.sum(result.files["value_count"]).as_py()) == 10


WHERE_CLAUSES = ["id >= 150", "id < 40 OR id >= 10005", "city = 'city3'", "year = 1992 AND id < 300", "id IS NULL"]


def test_without_sync_prune_answers_as_after_a_sync_over_appends_rewrites_and_no_index(tmp_path: Path) -> None:
    table = tmp_path / "t"
    spec = IndexSpec.for_location(LakeTable.at(str(table)))
    append(table, batch(0, 200, seed=1), 0)

    def answers(index: str) -> list[tuple[int, list[str], int]]:
        return [(r.version, sorted(r.paths), r.files_total) for r in (prune(spec, w, index=index)
                                                                       for w in WHERE_CLAUSES)]  # fmt: skip

    before = snapshot_of(table)
    in_memory = answers("latest")  # no index: built from the log in memory
    assert snapshot_of(table) == before and not (table / "_lakecluster").exists()
    assert prune(spec, "id >= 0").built_in_memory == "no index yet"
    assert in_memory == answers("sync")
    append(table, batch(200, 120, seed=2), 1)
    rewrite_partition(table, 1992)  # removes files the index holds, adds their rewrite
    append(table, batch(10_000, 10, seed=3), 2)
    before = snapshot_of(table)
    in_memory = answers("latest")
    assert snapshot_of(table) == before
    assert prune(spec, "id >= 0").commits_from_log == 3
    assert in_memory == answers("sync")


def is_current(spec: IndexSpec) -> bool:
    """Whether the stored index answers for the table's latest version as it is."""
    manifest = store_for(spec).manifest()
    return manifest is not None and not stored_unusable(spec, manifest)
