"""A task's own files: sorted by the curve key per flush, cut per partition and record limit, with stats."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from lakecluster.config import StorageConfig
from lakecluster.parquet_files import WrittenFile
from lakecluster.stream.task_files import BufferedFiles, TaskFiles


def _files(tmp_path: Path, *, buffer_bytes: int, max_records: int = 0, partition_by: tuple[str, ...] = ()) -> TaskFiles:
    return TaskFiles(table_uri=str(tmp_path), quarantine_uri=str(tmp_path / "q"), partition_by=partition_by,
                     max_records_per_file=max_records, buffer_bytes=buffer_bytes, storage=StorageConfig(),
                     stream_id="s", batch_id=0)  # fmt: skip


def _batches(n_batches: int, rows: int, seed: int = 0) -> list[pa.Table]:
    rng = np.random.default_rng(seed)
    out = []
    for b in range(n_batches):
        keys = rng.integers(0, 1 << 40, rows)
        out.append(pa.table({
            "id": pa.array(np.arange(b * rows, (b + 1) * rows), pa.int64()),
            "region": pa.array(rng.choice(["ASIA", "EUROPE", "AFRICA"], rows)),
            "_lc_key": pa.array([int(k).to_bytes(8, "big") for k in keys], pa.binary()),
        }))  # fmt: skip
    return out


def _read(tmp_path: Path, f: WrittenFile) -> pa.Table:
    return pq.read_table(tmp_path / f.path)


def _keys_of(batches: list[pa.Table]) -> dict[int, bytes]:
    return dict(zip(pa.concat_tables(batches)["id"].to_pylist(), pa.concat_tables(batches)["_lc_key"].to_pylist(),
                    strict=True))  # fmt: skip


def test_one_flush_writes_each_partition_in_key_order_cut_at_the_record_limit(tmp_path: Path) -> None:
    batches = _batches(4, 500)
    schema = pa.schema([("id", pa.int64())])
    files = BufferedFiles(str(tmp_path), _files(tmp_path, buffer_bytes=1 << 30, max_records=300,
                                                partition_by=("region",)), schema, ("region",), "_lc_key")  # fmt: skip
    for b in batches:
        files.add(b)
    written = list(files.close())
    key = _keys_of(batches)
    regions = pa.concat_tables(batches)
    region_of = dict(zip(regions["id"].to_pylist(), regions["region"].to_pylist(), strict=True))
    seen: list[int] = []
    by_region: dict[str, list[int]] = {}
    for f in written:
        ids = _read(tmp_path, f)["id"].to_pylist()
        assert 0 < len(ids) <= 300 and f.num_records == len(ids)
        assert f.path.startswith(f"region={f.partition_values['region']}/")
        assert {region_of[i] for i in ids} == {f.partition_values["region"]}
        stats = json.loads(f.stats)
        assert (stats["numRecords"], stats["minValues"]["id"], stats["maxValues"]["id"]) == \
            (len(ids), min(ids), max(ids))
        by_region.setdefault(f.partition_values["region"], []).extend(ids)
        seen += ids
    assert sorted(seen) == sorted(key), "every row written once"
    for ids in by_region.values():  # files of a partition, in the order written, continue one key order
        keys = [key[i] for i in ids]
        assert keys == sorted(keys)


def test_a_full_buffer_is_written_before_more_rows_come_each_flush_sorted(tmp_path: Path) -> None:
    batches = _batches(6, 400, seed=1)
    schema = pa.schema([("id", pa.int64()), ("region", pa.string())])
    budget = max(b.nbytes for b in batches) + 1  # two batches per flush
    files = BufferedFiles(str(tmp_path), _files(tmp_path, buffer_bytes=budget), schema, (), "_lc_key")
    for b in batches:
        files.add(b)
    assert len(files.written) == 3 and not files.buffered, "each second batch fills the buffer"
    written = list(files.close())
    key = _keys_of(batches)
    assert len(written) == 3
    for n, f in enumerate(written):
        ids = _read(tmp_path, f)["id"].to_pylist()
        assert sorted(ids) == list(range(n * 800, (n + 1) * 800)), "a flush holds the rows that filled it"
        assert [key[i] for i in ids] == sorted(key[i] for i in ids)
        assert _read(tmp_path, f).column_names == ["id", "region"], "the key is not written"


def test_without_a_key_rows_keep_their_order(tmp_path: Path) -> None:
    batches = [b.drop_columns(["_lc_key"]) for b in _batches(2, 100, seed=2)]
    files = BufferedFiles(str(tmp_path), _files(tmp_path, buffer_bytes=1 << 30), batches[0].schema, (), None)
    for b in batches:
        files.add(b)
    (only,) = list(files.close())
    assert _read(tmp_path, only)["id"].to_pylist() == list(range(200))
