"""The live files read from the log directly (checkpoint column-pruned, then the JSON commits)
equal delta-rs's snapshot, and the vectorised reading of the stats equals the value-by-value one."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable

from lakecluster.table import snapshot
from lakecluster.table.snapshot import Unsupported, read_live_adds
from tests.index.tables import COLUMNS, append, batch, checkpoint_and_clean_up, rewrite_partition

PARTITIONS = [c for c in COLUMNS if c.name == "year"]
STATS = [c for c in COLUMNS if c.name != "year"]


def read(table: Path, **kwargs: object) -> snapshot.LiveAdds:
    return read_live_adds(pafs_local(), str(table / "_delta_log"), PARTITIONS, STATS, **kwargs)  # type: ignore[arg-type]


def pafs_local():  # type: ignore[no-untyped-def]
    from pyarrow import fs

    return fs.LocalFileSystem()


def by_path(t: pa.Table) -> pa.Table:
    return t.sort_by("path")


def delta_rs(table: Path) -> pa.Table:
    """delta-rs's flattened add actions, cast to the reader's schema (the reference)."""
    actions = pa.table(DeltaTable(str(table)).get_add_actions(flatten=True))
    mine = read(table).actions.schema  # delta-rs has no deletion vectors nor row tracking's fields
    theirs = pa.schema([f for f in mine
                        if f.name not in ("deletion_vector", "base_row_id", "default_row_commit_version")])
    return by_path(pa.table({f.name: actions[f.name].cast(f.type) for f in theirs}, schema=theirs))


@pytest.fixture(params=[False, True], ids=["stats-json", "stats-struct"])
def table(tmp_path: Path, request: pytest.FixtureRequest) -> Path:
    """A partitioned table of every column type: commits, a checkpoint with older commits cleaned
    up (its stats as JSON text only, or also as ``stats_parsed`` structs as Delta-Spark writes
    them), then appends and a rewrite after it (files of the checkpoint removed)."""
    path = tmp_path / "t"
    for i in range(4):
        append(path, batch(i * 100, 100, seed=i), i)
    if request.param:
        DeltaTable(str(path)).alter.set_table_properties({"delta.checkpoint.writeStatsAsStruct": "true"})
    checkpoint_and_clean_up(path)
    append(path, batch(400, 100, seed=9), 4)
    rewrite_partition(path, 1993)
    return path


def test_the_live_files_equal_delta_rs_s_snapshot(table: Path) -> None:
    live = read(table, null_counts=True)
    assert live.metadata.version == DeltaTable(str(table)).version()
    assert live.metadata.partition_columns == ("year",)
    reference = pa.table(DeltaTable(str(table)).get_add_actions(flatten=True))
    ours = by_path(live.actions)
    assert ours["deletion_vector"].null_count == ours.num_rows  # delta-rs wrote no deletion vectors
    assert ours.num_rows == reference.num_rows
    assert ours["path"].to_pylist() == sorted(reference["path"].to_pylist())
    expected = delta_rs(table)
    for name in expected.column_names:
        mine, theirs = ours[name], expected[name]
        if name.startswith(("min.at", "max.at")):  # delta-rs reads millisecond stats as they are; so do we
            mine, theirs = mine.cast(pa.int64()), theirs.cast(pa.int64())
        if name.endswith(".flag"):
            # delta-rs 1.6 drops boolean bounds it reads from stats_parsed: where it has one, it agrees
            # delta-rs 1.6 drops boolean bounds when it reads stats_parsed (and writes none there):
            # each side either knows the bound or leaves it unknown, and they never disagree
            pairs = zip(mine.to_pylist(), theirs.to_pylist(), strict=True)
            assert all(a is None or b is None or a == b for a, b in pairs), name
            continue
        assert mine.equals(theirs), name


def test_stats_structs_read_as_the_stats_json_does(table: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    structs = by_path(read(table, null_counts=True).actions)
    original = snapshot._field

    def without_structs(struct: pa.DataType, name: str) -> pa.DataType | None:
        return None if name == "stats_parsed" else original(struct, name)

    monkeypatch.setattr(snapshot, "_field", without_structs)
    json_only = by_path(read(table, null_counts=True).actions)
    # the structs lack the boolean bounds (delta-rs and Delta-Spark keep none there): read from the text
    assert structs.equals(json_only)
    assert structs["min.flag"].null_count == 0


def test_the_vectorised_stats_equal_the_value_by_value_reading(table: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    vectorised = snapshot._fast
    batches = []

    def counted(*args: object) -> dict:
        out = vectorised(*args)  # type: ignore[arg-type]
        batches.append(len(out["num_records"]))
        return out

    structs = []
    from_parsed = snapshot._from_parsed

    def counted_structs(parsed: pa.Array, *args: object) -> dict:
        structs.append(len(parsed))
        return from_parsed(parsed, *args)  # type: ignore[arg-type]

    monkeypatch.setattr(snapshot, "_fast", counted)
    monkeypatch.setattr(snapshot, "_from_parsed", counted_structs)
    fast = by_path(read(table, null_counts=True).actions)
    # every file's stats were read vectorised: from the checkpoint's structs when it has them
    struct_checkpoint = "stats_parsed" in str(pq.read_schema(next((table / "_delta_log").glob("*.checkpoint.parquet"))))
    assert bool(structs) == struct_checkpoint
    assert sum(batches) + sum(structs) >= fast.num_rows and sum(batches) > 0

    def refuse(*args: object) -> dict:
        raise pa.ArrowInvalid("read value by value")

    monkeypatch.setattr(snapshot, "_fast", refuse)
    slow = by_path(read(table, null_counts=True).actions)
    assert fast.equals(slow)


def test_a_batch_arrow_cannot_parse_is_read_value_by_value(tmp_path: Path) -> None:
    """Bounds written as text where a number is expected, NaN, a number off an integer: those
    bounds are unknown (null), the rest of the batch is read as usual."""
    stats = [
        {"numRecords": 3, "minValues": {"id": 1, "x": 0.5, "city": "A"}, "maxValues": {"id": 9, "x": 2.5, "city": "Z"}},
        {"numRecords": 2, "minValues": {"id": "7", "x": "NaN", "city": 5}, "maxValues": {"id": 7.5, "x": 1}},
        {"numRecords": 1},
    ]
    texts = pa.array([json.dumps(s) for s in stats], pa.string())
    cols = [c for c in STATS if c.name in ("id", "x", "city")]
    parsed = snapshot.parse_stats(texts, cols, False)
    assert parsed["num_records"].to_pylist() == [3, 2, 1]
    assert parsed["min.id"].to_pylist() == [1, 7, None]  # "7" reads as 7, as typed_stat reads it
    assert parsed["max.id"].to_pylist() == [9, None, None]  # 7.5 is no long: unknown
    assert parsed["min.city"].to_pylist() == ["A", None, None]
    assert pc.is_nan(parsed["min.x"]).to_pylist()[1] and parsed["max.x"].to_pylist() == [2.5, 1.0, None]
    broken = snapshot.parse_stats(pa.array(["null", "  ", "[1]", None], pa.string()), cols, False)
    assert broken["num_records"].to_pylist() == [None] * 4  # text that is no JSON object: no stats


def test_timestamps_without_a_zone_offset_read_as_utc_vectorised(monkeypatch: pytest.MonkeyPatch) -> None:
    at = [c for c in STATS if c.name == "at"]
    texts = pa.array([json.dumps({"numRecords": 1, "minValues": {"at": "2024-01-01T00:00:00.123"},
                                  "maxValues": {"at": "2024-01-01T05:00:00"}})] * 3)  # fmt: skip
    fast = snapshot.parse_stats(texts, at, False)
    monkeypatch.setattr(snapshot, "_fast", lambda *a: (_ for _ in ()).throw(pa.ArrowInvalid("slow")))
    slow = snapshot.parse_stats(texts, at, False)
    assert fast["min.at"].equals(slow["min.at"]) and fast["max.at"].equals(slow["max.at"])
    assert str(fast["min.at"][0].as_py()) == "2024-01-01 00:00:00.123000+00:00"


def test_a_log_this_reader_cannot_read_is_left_to_delta_rs(tmp_path: Path) -> None:
    from lakecluster.config import StorageConfig
    from lakecluster.table.live_files import LiveFiles
    from lakecluster.table.location import DeltaLocation

    path = tmp_path / "t"
    append(path, batch(0, 50, seed=1), 0)
    checkpoint_and_clean_up(path)
    (path / "_delta_log" / "_last_checkpoint").write_text('{"size": 3}')  # no version
    with pytest.raises(Unsupported):
        read(path)
    live = LiveFiles(DeltaLocation(str(path), StorageConfig()), PARTITIONS, STATS)
    assert live.snapshot()[1].num_rows == len(DeltaTable(str(path)).file_uris())


def test_a_v2_checkpoint_that_is_gone_is_not_read_as_an_empty_table(tmp_path: Path) -> None:
    """V2 checkpoints are read (tests/lakecluster/test_shared_table_reads.py has delta-spark's,
    with sidecars); one ``_last_checkpoint`` names but that is gone is refused, not read as nothing."""
    path = tmp_path / "t"
    append(path, batch(0, 50, seed=1), 0)
    checkpoint_and_clean_up(path)
    log = path / "_delta_log"
    info = json.loads((log / "_last_checkpoint").read_text())
    (log / "_last_checkpoint").write_text(json.dumps({**info, "v2Checkpoint": {"path": "x.json", "sizeInBytes": 1}}))
    with pytest.raises(Unsupported, match=r"missing x\.json"):
        read(path)


def test_a_table_with_column_mapping_is_read_by_its_physical_names(tmp_path: Path) -> None:
    """Its stats and partition values are keyed by physical names: read by those, named as asked."""
    from deltalake import write_deltalake

    from lakecluster.config import StorageConfig
    from lakecluster.schema import ColumnSpec
    from lakecluster.table.live_files import LiveFiles
    from lakecluster.table.location import DeltaLocation

    path = tmp_path / "t"
    mapped = {"delta.columnMapping.mode": "name"}
    write_deltalake(str(path), pa.table({"a": [1, 5], "b": ["x", "y"]}), configuration=mapped)
    logged = json.loads((path / "_delta_log" / f"{0:020d}.json").read_text().splitlines()[-1])["add"]["stats"]
    assert '"a"' not in logged  # the log names the column by its physical name
    live = read_live_adds(pafs_local(), str(path / "_delta_log"), [], [ColumnSpec("a", "long")])
    assert live.actions["min.a"].to_pylist() == [1] and live.actions["max.a"].to_pylist() == [5]
    files = LiveFiles(DeltaLocation(str(path), StorageConfig()), [], [ColumnSpec("a", "long")])
    version, rows = files.snapshot()
    assert version == 0 and rows["rows"].to_pylist() == [2] and rows["max.a"].to_pylist() == [5]


