"""The index belongs to one Delta table: the one whose id (``metaData.id``) it records.

A table deleted and created anew at the same location (its ``_lakecluster`` folder kept, or the
index elsewhere through ``index.path``) starts its versions at 0 again: once it reaches the
index's version, that number says nothing about which files the index describes. Sync rebuilds
such an index, ``prune`` never answers from it, and an index written before the id was recorded
(``fixtures/format2_table``) is rebuilt by its next sync. Real Delta tables written by delta-rs.
"""

from __future__ import annotations

import shutil
import time
from dataclasses import replace
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable, write_deltalake

from lakecluster.errors import StatsIndexError
from lakecluster.index.prune import PruneResult, prune
from lakecluster.index.spec import IndexSpec
from lakecluster.index.sync import store_for, sync
from lakecluster.table import LakeTable
from tests.index.tables import fixture_copy

WHERE = {  # the predicate, and the same as a pyarrow expression
    "id >= 1000 AND id < 1004": (pc.field("id") >= 1000) & (pc.field("id") < 1004),
    "city = 'b3'": pc.field("city") == "b3",
    "id < 10": pc.field("id") < 10,
    "city = 'city3'": pc.field("city") == "city3",
}


def rows(start: int, n: int, city: str) -> pa.Table:
    ids = list(range(start, start + n))
    return pa.table({"id": pa.array(ids, pa.int64()), "city": [f"{city}{i % 5}" for i in ids]})


def write(table: Path, commits: int, *, first_id: int, city: str) -> str:
    """``commits`` appends of 10 rows each (one file per commit); the table's id."""
    for i in range(commits):
        write_deltalake(str(table), rows(first_id + 10 * i, 10, city), mode="append")
    return DeltaTable(str(table)).metadata().id


def delete_table(table: Path) -> None:
    """The table goes (its log and data files); ``_lakecluster`` stays."""
    for child in table.iterdir():
        if child.name != "_lakecluster":
            shutil.rmtree(child) if child.is_dir() else child.unlink()


def assert_sound(table: Path, result: PruneResult, where: str) -> None:
    """The answer is the table's: it names only live files, counts all of them, and keeps every
    file holding a row that matches ``where`` (read from the data files themselves)."""
    live = set(DeltaTable(str(table)).file_uris())
    kept = {str(table / p) for p in result.paths}
    assert result.version == DeltaTable(str(table)).version(), where
    assert result.files_total == len(live) and kept <= live, where
    holding = {path for path in live if pq.read_table(path).filter(WHERE[where]).num_rows}
    assert holding <= kept, where


@pytest.mark.parametrize("index_inside", [True, False], ids=["in-table", "index-path-elsewhere"])
@pytest.mark.parametrize("b_commits", [3, 5], ids=["same-version", "past-the-version"])
def test_a_table_created_anew_at_or_past_the_index_version_is_rebuilt_never_read(
    tmp_path: Path, b_commits: int, index_inside: bool
) -> None:
    table = tmp_path / "t"
    spec = IndexSpec.for_location(LakeTable.at(str(table)))
    if not index_inside:
        spec = replace(spec, index_path=str(tmp_path / "elsewhere" / "index"))
    a_id = write(table, 3, first_id=0, city="a")  # versions 0..2
    assert sync(spec).mode == "rebuild" and store_for(spec).manifest().delta_version == 2  # type: ignore[union-attr]
    delete_table(table)
    b_id = write(table, b_commits, first_id=1000, city="b")  # versions 0..b_commits-1: at or past 2
    assert a_id != b_id

    # Before any sync: the answer at the latest version is B's, and the stored index is refused.
    for where in WHERE:
        latest = prune(spec, where)
        assert_sound(table, latest, where)
        assert "table id" in latest.built_in_memory
    with pytest.raises(StatsIndexError, match="table id"):
        prune(spec, "id < 10", index="stored")

    result = sync(spec)
    assert result.mode == "rebuild" and result.published, result
    assert "table id" in result.reason and a_id in result.reason and b_id in result.reason
    manifest = store_for(spec).manifest()
    assert manifest is not None and manifest.table_id == b_id and manifest.delta_version == b_commits - 1
    for where in WHERE:
        for index in ("stored", "latest"):
            assert_sound(table, prune(spec, where, index=index), where)
    assert sync(spec).mode == "current"
    write_deltalake(str(table), rows(2000, 10, "b"), mode="append")
    assert sync(spec).mode == "incremental"  # B's own index goes on incrementally
    assert_sound(table, prune(spec, "id >= 1000 AND id < 1004", index="stored"), "id >= 1000 AND id < 1004")


def test_a_table_created_anew_below_the_index_version_is_rebuilt_and_the_rebuild_published(tmp_path: Path) -> None:
    table = tmp_path / "t"
    spec = IndexSpec.for_location(LakeTable.at(str(table)))
    a_id = write(table, 5, first_id=0, city="a")  # versions 0..4
    sync(spec)
    delete_table(table)
    b_id = write(table, 2, first_id=1000, city="b")  # versions 0..1: the log lacks the index's version
    with pytest.raises(StatsIndexError):
        prune(spec, "id < 10", index="stored")
    assert_sound(table, prune(spec, "city = 'b3'"), "city = 'b3'")
    result = sync(spec)
    assert result.mode == "rebuild" and result.to_version == 1, result
    # The index at version 4 is another table's: the rebuild at version 1 replaces it.
    assert result.published and a_id in result.reason and b_id in result.reason, result
    manifest = store_for(spec).manifest()
    assert manifest is not None and manifest.table_id == b_id and manifest.delta_version == 1
    for where in WHERE:
        assert_sound(table, prune(spec, where, index="stored"), where)
    assert sync(spec).mode == "current"


def test_the_table_id_is_read_from_the_checkpoint_once_the_first_commit_is_cleaned_up(tmp_path: Path) -> None:
    table = tmp_path / "t"
    spec = IndexSpec.for_location(LakeTable.at(str(table)))
    a_id = write(table, 2, first_id=0, city="a")
    sync(spec)  # version 1
    delete_table(table)
    b_id = write(table, 2, first_id=1000, city="b")  # version 1 again
    DeltaTable(str(table)).create_checkpoint()
    (table / "_delta_log" / f"{0:020d}.json").unlink()  # log cleanup: only the checkpoint has metaData
    assert spec.table.delta.table_id() == b_id
    result = sync(spec)
    assert result.mode == "rebuild" and a_id in result.reason and b_id in result.reason, result
    assert_sound(table, prune(spec, "id >= 1000 AND id < 1004", index="stored"), "id >= 1000 AND id < 1004")
    # The same table, its log cleaned up: the index stays in use (incremental, never rebuilt).
    write_deltalake(str(table), rows(2000, 10, "b"), mode="append")
    assert sync(spec).mode == "incremental" and sync(spec).mode == "current"


# -- an index written before the table id was recorded ------------------------------------------


@pytest.fixture
def unidentified(tmp_path: Path) -> tuple[Path, IndexSpec]:
    return fixture_copy("format2_table", tmp_path)


def test_the_fixture_is_an_index_without_a_table_id_behind_its_table(unidentified: tuple[Path, IndexSpec]) -> None:
    table, spec = unidentified
    manifest = (Path(spec.index_path) / "manifest.json").read_text()
    assert '"format": 2' in manifest and "table_id" not in manifest
    assert '"delta_version": 2' in manifest and DeltaTable(str(table)).version() == 3


def test_an_index_without_a_table_id_is_not_trusted_and_rebuilt_once(unidentified: tuple[Path, IndexSpec]) -> None:
    table, spec = unidentified
    old_files = {p.name for p in Path(spec.index_path).glob("*.parquet")}
    with pytest.raises(StatsIndexError, match=r"no table id.*lakecluster index sync"):
        prune(spec, "id < 10", index="stored")
    latest = prune(spec, "id < 10")  # built from the log in memory, nothing written
    assert "no table id" in latest.built_in_memory
    assert_sound(table, latest, "id < 10")
    assert {p.name for p in Path(spec.index_path).iterdir()} == {*old_files, "manifest.json"}

    result = sync(spec)
    assert result.mode == "rebuild" and "no table id" in result.reason and result.published, result
    manifest = store_for(spec).manifest()
    assert manifest is not None and manifest.table_id == DeltaTable(str(table)).metadata().id
    assert manifest.delta_version == 3 and old_files <= set(manifest.retired)
    for where in ("id < 10", "city = 'city3'"):
        assert_sound(table, prune(spec, where, index="stored"), where)
    assert sync(spec).mode == "current"  # once
    more = rows(80, 10, "city").append_column("price", pa.array([1.5] * 10))
    write_deltalake(str(table), more, mode="append")
    assert sync(spec).mode == "incremental"
    deleted = store_for(spec).gc(now=time.time() + spec.gc_grace_s + 1)
    assert old_files <= set(deleted)


def test_read_candidates_never_reads_through_another_tables_index_nor_one_lacking_the_files(tmp_path: Path) -> None:
    from lakecluster.index.reader import read_candidates  # Spark is never reached: both are refused first

    table = tmp_path / "t"
    spec = IndexSpec.for_location(LakeTable.at(str(table)))
    write_deltalake(str(table), rows(0, 10, "a").append_column("p", pa.array(["x"] * 10)), partition_by=["p"])
    sync(spec)
    write_deltalake(str(table), rows(10, 10, "a").append_column("p", pa.array(["y"] * 10)), mode="append")
    pending_files = prune(spec, "id >= 10")  # the new file, read from the log: not in the stored index
    assert pending_files.commits_from_log == 1 and pending_files.paths
    with pytest.raises(StatsIndexError, match="not in the stored index"):
        read_candidates(None, spec, pending_files)  # type: ignore[arg-type]
    delete_table(table)
    write_deltalake(str(table), rows(1000, 10, "b").append_column("p", pa.array(["z"] * 10)), partition_by=["p"])
    write_deltalake(str(table), rows(1010, 10, "b").append_column("p", pa.array(["z"] * 10)), mode="append")
    other = prune(spec, "id >= 1000")  # built in memory: the stored index is the old table's
    with pytest.raises(StatsIndexError, match="table id"):
        read_candidates(None, spec, other)  # type: ignore[arg-type]
