"""The table handle: where a table's companions live, and the table's state read from its log
(the record ``status``, ``report`` and the gauges show), incrementally equal to a fresh read."""

from __future__ import annotations

import json
import pickle
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import CommitProperties, DeltaTable, write_deltalake

from lakecluster.config import load_config
from lakecluster.table import LakeTable, user_metadata


def test_a_streams_id_and_its_folders_are_those_earlier_versions_derived() -> None:
    """A stream keeps its identity across versions of lakecluster: the same id (its commits and
    offsets in the table are found under it) and the same checkpoint, lease and sketch folders."""
    assert LakeTable(load_config(environ={})).stream_id == "generator-1ad1938bb293"  # the defaults' id before
    config = load_config(overrides={
        "source.kind": "kafka", "source.kafka.topics": '["orders", "a"]', "table.path": "s3a://bucket/t/",
        "source.kafka.bootstrap_servers": "b2:9092, b1:9092",
    }, environ={})  # fmt: skip
    table = LakeTable(config)
    assert table.stream_id == "kafka-a16848dd7a05"
    home = "s3://bucket/t/_lakecluster/streams/kafka-a16848dd7a05"  # s3a:// is read as s3:// by every reader
    assert table.paths.stream_home() == home
    assert table.paths.checkpoint == f"{home}/checkpoint"
    assert table.paths.lease() == f"{home}/lease"
    assert table.paths.sketches(table.stream_id) == f"{home}/sketches"
    assert table.paths.sketches(None) == "s3://bucket/t/_lakecluster/sketches"
    assert table.paths.quarantine == "s3://bucket/t_quarantine"
    assert table.paths.index == "s3://bucket/t/_lakecluster/index"
    assert table.uses_s3


def test_configured_locations_win_and_relative_paths_are_made_absolute(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    config = load_config(overrides={"table.path": "data/t", "table.quarantine_path": "bad/q", "index.path": "idx",
                                    "stream.checkpoint_location": "cp", "stream.id": "s1"}, environ={})  # fmt: skip
    paths = LakeTable(config).paths
    assert (paths.table, paths.quarantine, paths.index, paths.checkpoint) == tuple(
        str(tmp_path / p) for p in ("data/t", "bad/q", "idx", "cp"))
    assert paths.lease() == str(tmp_path / "data/t/_lakecluster/streams/s1/lease")
    assert not LakeTable(config).uses_s3


def test_the_tables_name_is_the_configured_one_or_the_last_segment_of_its_location(tmp_path: Path) -> None:
    """The ``table`` label of every metric: short and the same however the location is spelled."""

    def name(**overrides: str) -> str:
        return LakeTable(load_config(overrides=overrides, environ={})).name

    assert name(**{"table.path": "s3a://lake/sales/lineorder/"}) == "lineorder"
    assert name(**{"table.path": "s3://lake"}) == "lake"
    assert name(**{"table.path": str(tmp_path / "t")}) == "t"
    assert name(**{"table.path": "s3://lake/sales/lineorder", "table.name": "sales.lineorder"}) == "sales.lineorder"


def test_a_handle_sent_to_another_process_is_a_fresh_handle_of_the_same_table(tmp_path: Path) -> None:
    table = LakeTable.at(str(tmp_path / "t"))
    table.live_files()  # a view with a lock: not what a pickle carries
    copy = pickle.loads(pickle.dumps(table))
    assert copy.config == table.config and copy.uri == table.uri and copy is not table


def _commit(path: Path, rows: int, start: int, **meta: object) -> None:
    data = pa.table({"id": pa.array(range(start, start + rows), pa.int64())})
    props = CommitProperties(custom_metadata={"userMetadata": user_metadata(**meta)}) if meta else None
    write_deltalake(str(path), data, mode="append", commit_properties=props)


def test_the_state_follows_new_commits_and_equals_a_fresh_read(tmp_path: Path) -> None:
    path = tmp_path / "t"
    _commit(path, 10, 0, stream="a", txn=0)
    _commit(path, 10, 10, stream="b", txn=0)
    kept = LakeTable.at(str(path))
    first = kept.state(small_file_bytes=10**9)
    assert (first.version, first.files, first.rows, first.small_files) == (1, 2, 20, 2)
    assert set(first.streams) == {"a", "b"} and first.last_rewrite is None and first.last_vacuum is None
    assert first.oldest_commit_ms == DeltaTable(str(path)).history()[-1]["timestamp"]  # version 0: the creation
    # A rewrite (as any writer commits one) and two more stream commits, read incrementally.
    DeltaTable(str(path)).optimize.compact()
    _commit(path, 5, 20, stream="a", txn=1)
    _commit(path, 5, 25, stream="c", txn=0)
    later = kept.state(small_file_bytes=10**9)
    fresh = LakeTable.at(str(path)).state(small_file_bytes=10**9)
    assert later.version == fresh.version == 4
    for field in ("files", "rows", "bytes", "small_files", "last_commit_ms", "last_rewrite", "streams"):
        assert getattr(later, field) == getattr(fresh, field), field
    assert later.rows == 30 and later.last_rewrite is not None and later.last_rewrite.version == 2
    assert later.streams["a"].version == 3 and later.streams["b"].version == 1 and later.streams["c"].version == 4
    assert sorted(later.file_sizes.tolist()) == sorted(fresh.file_sizes.tolist())
    assert kept.live_files().full_reads == 1, "the later look read only the new commits"


def test_the_history_ends_where_log_cleanup_removed_commits(tmp_path: Path) -> None:
    path = tmp_path / "t"
    for i in range(4):
        _commit(path, 3, 3 * i, stream="s", txn=i)
    dt = DeltaTable(str(path))
    dt.create_checkpoint()
    for version in (0, 1):
        (path / "_delta_log" / f"{version:020d}.json").unlink()
    state = LakeTable.at(str(path)).state()
    assert state.version == 3 and state.rows == 12
    oldest = json.loads((path / "_delta_log" / f"{2:020d}.json").read_text().splitlines()[0])["commitInfo"]
    assert state.oldest_commit_ms == oldest["timestamp"], "the history starts at the oldest commit left"
    assert state.streams["s"].version == 3
