"""File numbers: a path's number depends only on the path and the seed; two live files never share
one (a build that would number two files alike renumbers or rebuilds), so prune stays sound."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from lakecluster.index import file_ids as ids_module
from lakecluster.index import stats as stats_module
from lakecluster.index import sync as sync_module
from lakecluster.index.file_ids import distinct, file_ids
from lakecluster.index.prune import prune
from lakecluster.index.spec import IndexSpec
from lakecluster.index.sync import rebuild, store_for, sync
from lakecluster.table import LakeTable
from tests.index.tables import append, batch, rewrite_partition
from tests.index.test_sync import rebuilt


def delta_paths(n: int, seed: int = 1) -> list[str]:
    rng = np.random.default_rng(seed)
    return [f"year={1990 + i % 7}/part-{i % 3:05d}-{rng.bytes(16).hex()}-c000.snappy.parquet" for i in range(n)]


def test_a_number_depends_only_on_the_path_and_the_seed() -> None:
    paths = delta_paths(2_000)
    a = file_ids(pa.array(paths), 0)
    shuffled = np.random.default_rng(2).permutation(len(paths))
    b = file_ids(pa.array([paths[i] for i in shuffled]), 0)
    assert (a[shuffled] == b).all()  # order, and the other paths around, change nothing
    chunked = file_ids(pa.chunked_array([pa.array(paths[:700]), pa.array(paths[700:])]), 0)
    assert (chunked == a).all()
    assert distinct(a) and not (file_ids(pa.array(paths), 1) == a).any()  # another seed: other numbers


def test_numbers_are_the_same_whatever_the_block_of_bytes_hashed_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    paths = ["", "a", "é/ü/ø.parquet", "x" * 300, *delta_paths(500)]
    whole = file_ids(pa.array(paths), 7)
    for block in (1, 13, 64, 4096):
        monkeypatch.setattr(ids_module, "_BLOCK_BYTES", block)
        assert (file_ids(pa.array(paths), 7) == whole).all(), block
    assert len(np.unique(whole)) == len(paths)


def test_paths_of_one_length_get_the_numbers_they_get_among_paths_of_other_lengths() -> None:
    """Paths all of one length are hashed from Arrow's bytes as they lie, mixed lengths by
    gathering each length's bytes: the same numbers either way."""
    same = [p.replace("year=", "y=") for p in delta_paths(300)]
    assert len({len(p) for p in same}) == 1
    alone = file_ids(pa.array(same), 3)
    mixed = file_ids(pa.array(["", "ab", *same, "x" * 90]), 3)
    assert (mixed[2:-1] == alone).all()
    assert (file_ids(pa.array(same).slice(5, 100), 3) == alone[5:105]).all()  # an array slice: its offset


def test_the_numbers_of_paths_never_change() -> None:
    """Indexes on storage hold the numbers of their files: a sync numbers new and removed files
    with the same function, so it must give what earlier code gave (pinned from the first release
    of file numbers)."""
    paths = ["", "a", "é/ü/ø.parquet", "part-00000-1b2c3d4e-0000-4000-8000-000000000000-c000.snappy.parquet",
             "year=1992/part-g06-0123456789ab-00001-l00ff-x.c000.zstd.parquet"]  # fmt: skip
    assert file_ids(pa.array(paths), 0).tolist() == [
        -2152535657050944081, -2525487740999491430, 468683214787072691, -584278665989568825, -4607401923048371488
    ]  # fmt: skip
    assert file_ids(pa.array(paths), 7).tolist() == [
        7191089600892374487, 5808139794038648948, 7002786201618843717, -8106234038424138637, -484752497224811210
    ]  # fmt: skip


def test_paths_differing_in_one_byte_or_in_length_get_other_numbers() -> None:
    base = delta_paths(1)[0]
    variants = [base, base[:-1], base + "\x00", base[:10] + "0" + base[11:], base.upper(), "\x00" + base]
    assert distinct(file_ids(pa.array(variants), 0))
    assert distinct(file_ids(pa.array(["", "\x00", "\x00\x00"]), 0))


def weak_numbers(monkeypatch: pytest.MonkeyPatch) -> None:
    """Numbers that collide for real under seed 0 (a 64-bit clash cannot be produced on purpose):
    the path's length modulo 3, for the seed 0 only."""
    real = file_ids

    def weak(paths: pa.Array | pa.ChunkedArray, seed: int) -> np.ndarray:
        if seed == 0:
            return np.array([len(p) % 3 for p in paths.to_pylist()], dtype=np.int64)
        return real(paths, seed)

    for module in (stats_module, sync_module):
        monkeypatch.setattr(module, "file_ids", weak)


def test_a_rebuild_renumbers_with_the_next_seed_when_two_files_would_share_a_number(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    weak_numbers(monkeypatch)
    table = tmp_path / "t"
    spec = IndexSpec.for_location(LakeTable.at(str(table)))
    append(table, batch(0, 400, seed=1), 0)
    result = rebuild(spec)
    manifest = store_for(spec).manifest()
    assert result.mode == "rebuild" and manifest is not None and manifest.fid_seed == 1
    files = store_for(spec).read_files(["file"])
    assert files.num_rows == 12 and distinct(files["fid"].to_numpy())  # 400 rows, 40 per file and year
    r = prune(spec, "id = 5", index="stored")
    assert holds_id(table, r.paths, 5) and len(r.paths) < r.files_total == 12


def holds_id(table: Path, paths: list[str], wanted: int) -> bool:
    return any(wanted in pq.read_table(table / p, columns=["id"])["id"].to_pylist() for p in paths)


def test_a_sync_adding_a_file_whose_number_a_live_file_has_rebuilds_and_stays_sound(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    table = tmp_path / "t"
    spec = IndexSpec.for_location(LakeTable.at(str(table)))
    append(table, batch(0, 40, seed=1), 0)
    sync(spec)
    assert store_for(spec).manifest().fid_seed == 0  # type: ignore[union-attr]
    taken = int(store_for(spec).read_files([])["fid"].to_numpy()[0])

    def clashing(paths: pa.Array | pa.ChunkedArray, seed: int) -> np.ndarray:
        """Under seed 0 every new path gets a number a live file already has."""
        return np.full(len(paths), taken, dtype=np.int64) if seed == 0 else file_ids(paths, seed)

    for module in (stats_module, sync_module):
        monkeypatch.setattr(module, "file_ids", clashing)
    append(table, batch(40, 40, seed=2), 1)
    result = sync(spec)
    assert result.mode == "rebuild" and "share a file number" in result.reason
    assert store_for(spec).manifest().fid_seed == 1  # type: ignore[union-attr]
    assert store_for(spec).read_all().equals(rebuilt(spec, tmp_path))
    rewrite_partition(table, 1992)
    assert sync(spec).mode == "incremental"
    assert store_for(spec).read_all().equals(rebuilt(spec, tmp_path))
    for wanted in (5, 45, 79):
        r = prune(spec, f"id = {wanted}", index="stored")
        assert holds_id(table, r.paths, wanted) and len(r.paths) < r.files_total


def test_a_snapshot_naming_a_file_twice_is_refused_not_renumbered_forever() -> None:
    from lakecluster.errors import StatsIndexError
    from lakecluster.index.sync import distinct_seed

    with pytest.raises(StatsIndexError, match="twice"):
        distinct_seed(pa.array(["a.parquet", "b.parquet", "a.parquet"]), 0)
    assert distinct_seed(pa.array(delta_paths(100)), 3)[0] == 3
