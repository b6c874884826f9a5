"""The layout in effect as a fact of the table: an adoption recorded in the table's log (Delta
domain metadata) through the commit protocol, read by every handle without rebuilding it, its file
still written for compactors of earlier versions, and an adoption only a file has (written by such
a compactor) followed and then recorded."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake

from lakecluster.commit import commit
from lakecluster.config import Config, load_config
from lakecluster.errors import UnsupportedTableError
from lakecluster.layout.adoptions import AdoptionStore, LayoutRecordCommit, record_adoption
from lakecluster.table import LAYOUT_DOMAIN, Adoption, LakeTable

COLUMNS = '[{name = "a", type = "int"}, {name = "b", type = "int"}, {name = "c", type = "string"}]'


def _config(path: Path, mode: str = "apply") -> Config:
    return load_config(overrides={"table.path": str(path), "table.columns": COLUMNS, "table.partition_by": "[]",
                                  "table.clustering_columns": '["a", "b"]', "compaction.auto_layout": mode,
                                  "source.kind": "kafka", "source.kafka.topics": '["t"]'},
                       environ={})  # fmt: skip


def _table(path: Path) -> None:
    rows = pa.table({"a": pa.array([1, 2, 3], pa.int32()), "b": pa.array([4, 5, 6], pa.int32()),
                     "c": ["x", "y", "z"]})  # fmt: skip
    write_deltalake(str(path), rows)


def _adoption(number: int, columns: tuple[str, ...] = ("c", "a")) -> Adoption:
    return Adoption(number, f"id-{number}", columns, (2.0, 1.0)[: len(columns)], f"fp{number}", "before",
                    time.time(), {"gain": 0.5}, "host:1")  # fmt: skip


def _domain_actions(path: Path) -> list[dict]:
    found = []
    for commit_file in sorted((path / "_delta_log").glob("*.json")):
        for line in commit_file.read_text().splitlines():
            action = json.loads(line)
            if "domainMetadata" in action and action["domainMetadata"]["domain"] == LAYOUT_DOMAIN:
                found.append(action["domainMetadata"])
    return found


def test_an_adoption_is_recorded_in_the_log_and_a_handle_made_before_follows_it(spark, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    path = tmp_path / "t"
    _table(path)
    config = _config(path)
    watching = LakeTable(config)  # a status or a second compactor, up before the adoption
    before = watching.layout()
    assert not before.is_adopted and before.clustering_columns == ("a", "b")

    adoption = _adoption(1)
    winner, won = AdoptionStore(LakeTable(config), spark=lambda: spark).adopt(adoption)
    assert won and winner == adoption

    # The record: one domainMetadata action, committed by Delta (the table gained the writer feature).
    records = _domain_actions(path)
    assert len(records) == 1 and not records[0]["removed"]
    record = json.loads(records[0]["configuration"])
    assert record["adoption"] == adoption.as_dict() and record["curve"] == config.compaction.curve
    assert record["partition_by"] == [] and record["format"] == 1
    protocol = DeltaTable(str(path)).protocol()
    assert "domainMetadata" in (protocol.writer_features or [])
    detail = spark.sql(f"DESCRIBE DETAIL delta.`{path}`").collect()[0]
    assert "domainMetadata" in detail["tableFeatures"]  # Spark's own reader sees the upgraded protocol
    assert spark.read.format("delta").load(str(path)).count() == 3  # and the rows as they were

    # The handle made before reads it from the log's new commits: no new handle.
    after = watching.layout()
    assert after.is_adopted and after.recorded and after.adoption == adoption
    assert after.clustering_columns == ("c", "a") and dict(after.column_weights) == {"c": 2.0, "a": 1.0}
    assert watching.live_files().full_reads == 2  # once at start, once for the new clustering column's stats
    _, files = watching.live_files().snapshot()
    assert {"min.c", "max.c", "min.a"} <= set(files.column_names)
    state = watching.state()
    assert state.layout == after  # status, report and the gauges render this record

    # A compactor of the earlier version reads only the files: the adoption's file is there.
    written = json.loads((path / "_lakecluster" / "layout" / "adoption-00000001.json").read_text())
    assert Adoption.from_dict(written) == adoption

    # With auto_layout off the configured layout is in effect, the record notwithstanding.
    assert not LakeTable(_config(path, "advise")).layout().is_adopted


def test_an_adoption_only_a_file_has_is_in_effect_and_is_recorded_once(spark, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """A compactor of the earlier version adopted layout 1: its file only, as it wrote it."""
    path = tmp_path / "t"
    _table(path)
    config = _config(path)
    folder = path / "_lakecluster" / "layout"
    folder.mkdir(parents=True)
    old = {"by": "old-host:7", "clustering_columns": ["b"], "fingerprint": "0123abcd", "id": "old-1",
           "number": 1, "predicted": {"gain": 0.3}, "replaced": "fffe", "time": 1764000000.0, "weights": [1.0]}
    (folder / "adoption-00000001.json").write_text(json.dumps(old, sort_keys=True))

    table = LakeTable(config)
    layout = table.layout()
    assert layout.is_adopted and not layout.recorded and layout.clustering_columns == ("b",)
    assert _domain_actions(path) == []

    store = AdoptionStore(table, spark=lambda: spark)
    store.record_pending()
    recorded = _domain_actions(path)
    assert len(recorded) == 1 and json.loads(recorded[0]["configuration"])["adoption"] == old
    assert table.layout().recorded and table.layout().adoption == Adoption.from_dict(old)
    versions = DeltaTable(str(path)).version()
    store.record_pending()  # recorded already: nothing to commit
    assert record_adoption(spark, table, Adoption.from_dict(old)) is None
    assert DeltaTable(str(path)).version() == versions

    # The earlier version adopts layout 2 (a file only): it is newer than the record, so in effect.
    newer = {**old, "number": 2, "id": "old-2", "clustering_columns": ["c"]}
    (folder / "adoption-00000002.json").write_text(json.dumps(newer, sort_keys=True))
    assert table.layout().adoption == Adoption.from_dict(newer) and not table.layout().recorded
    store.record_pending()
    assert table.layout().recorded and len(_domain_actions(path)) == 2


def test_a_layout_record_of_a_newer_format_is_refused_with_one_line(spark, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    path = tmp_path / "t"
    _table(path)
    table = LakeTable(_config(path))
    record_adoption(spark, table, _adoption(1))  # the feature and a first record
    newer = json.dumps({"format": 2, "adoption": _adoption(2).as_dict(), "shape": "tree"})
    commit(spark, LayoutRecordCommit(table.delta, _adoption(2), newer))
    with pytest.raises(UnsupportedTableError, match=r"format 2, newer than this version of lakecluster reads \(1\)"):
        table.layout()
    with pytest.raises(UnsupportedTableError, match="format 2"):
        LakeTable(_config(path)).layout()
    assert LakeTable(_config(path, "off")).layout().clustering_columns == ("a", "b")  # not asked: not read


def test_two_compactors_recording_at_once_on_a_table_without_the_feature_record_it_once(  # type: ignore[no-untyped-def]
    spark, tmp_path: Path
) -> None:
    """Both give the table the domainMetadata feature at the same moment: Delta lets one protocol
    change through and refuses the other (ProtocolChangedException). The refused one leaves the
    record to its next look instead of failing its round; the layout is in effect from its file
    meanwhile. (A full run once failed a compactor here.)"""
    import threading

    path = tmp_path / "t"
    _table(path)
    config = _config(path)
    folder = path / "_lakecluster" / "layout"
    folder.mkdir(parents=True)
    (folder / "adoption-00000001.json").write_text(json.dumps(_adoption(1).as_dict(), sort_keys=True))
    stores = [AdoptionStore(LakeTable(config), spark=lambda: spark) for _ in range(3)]
    barrier = threading.Barrier(len(stores))
    failures: list[BaseException] = []

    def record(store: AdoptionStore) -> None:
        try:
            barrier.wait()
            store.record_pending()
        except BaseException as e:  # what escapes is the finding
            failures.append(e)

    threads = [threading.Thread(target=record, args=(s,)) for s in stores]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert failures == []
    for store in stores:  # the next look of each: recorded by now, or by this one
        store.record_pending()
    assert len(_domain_actions(path)) == 1
    assert LakeTable(config).layout().recorded
