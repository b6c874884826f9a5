"""The index never skips a file that holds matching rows, on tables whose log it cannot read as
it reads its own: a table with column mapping, and a table created anew where an index was left."""

from __future__ import annotations

import shutil
from pathlib import Path

import pyarrow as pa
from deltalake import DeltaTable, write_deltalake

from lakecluster.index.prune import prune
from lakecluster.index.spec import IndexSpec
from lakecluster.index.sync import sync
from lakecluster.table import LakeTable


def _paths(table: Path, where: str, index: str = "latest") -> set[str]:
    spec = IndexSpec.for_location(LakeTable.at(str(table)))
    return set(prune(spec, where, index=index).paths)


def test_column_mapping_new_files_are_not_skipped_by_their_partition(tmp_path: Path) -> None:
    table = tmp_path / "t"
    write_deltalake(str(table), pa.table({"p": ["a", "a", "b"], "x": [1, 2, 3]}), partition_by=["p"],
                    configuration={"delta.columnMapping.mode": "name"})  # fmt: skip
    sync(IndexSpec.for_location(LakeTable.at(str(table))))
    write_deltalake(str(table), pa.table({"p": ["a"], "x": [4]}), mode="append")
    holding_a = {a["path"] for a in pa.table(DeltaTable(str(table)).get_add_actions(flatten=True)).to_pylist()
                 if a["partition.p"] == "a"}  # fmt: skip
    assert len(holding_a) == 2
    assert holding_a <= _paths(table, "p = 'a'")  # read from the log, in memory
    sync(IndexSpec.for_location(LakeTable.at(str(table))))
    assert holding_a <= _paths(table, "p = 'a'", index="stored")  # and once synced


def test_an_index_left_by_an_older_table_at_the_same_place_is_not_used(tmp_path: Path) -> None:
    table = tmp_path / "t"
    for i in range(3):
        write_deltalake(str(table), pa.table({"x": [i]}), mode="append")
    sync(IndexSpec.for_location(LakeTable.at(str(table))))  # the index at version 2
    for child in table.iterdir():
        if child.name != "_lakecluster":  # the table goes, its index stays
            shutil.rmtree(child) if child.is_dir() else child.unlink()
    write_deltalake(str(table), pa.table({"x": [100]}))  # a new table: version 0
    new_file = {a["path"] for a in pa.table(DeltaTable(str(table)).get_add_actions(flatten=True)).to_pylist()}
    assert _paths(table, "x = 100") == new_file
