"""Following a table's log commit by commit: the version, an application's transaction version and
the commit infos equal what delta-rs reads from the whole snapshot, and a gap means one full read."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
from deltalake import DeltaTable

from lakecluster.table import DeltaLocation, LakeTable, NetChanges, TableLog
from lakecluster.table.log import commit_info
from tests.index.tables import append, batch, checkpoint_and_clean_up, rewrite_partition


def location(table: Path) -> DeltaLocation:
    return LakeTable.at(str(table)).delta


def test_table_log_follows_versions_transactions_and_commit_infos(tmp_path: Path) -> None:
    table = tmp_path / "t"
    append(table, batch(0, 50, seed=1), 0)
    followed = TableLog(location(table), "test")
    other_app = TableLog(location(table), "another")
    assert (followed.version, followed.txn_version, other_app.txn_version) == (1, 0, None)
    for batch_id in (1, 2):
        append(table, batch(50 * batch_id, 50, seed=batch_id), batch_id)
    rewrite_partition(table, 1993)  # no transaction of the app
    assert followed.refresh() == other_app.refresh() == DeltaTable(str(table)).version() == 4
    assert followed.txn_version == DeltaTable(str(table)).transaction_version("test") == 2
    assert other_app.txn_version is None
    history = {h["version"]: h for h in DeltaTable(str(table)).history()}
    infos = followed.commit_infos_after(1)
    assert [v for v, _ in infos] == [2, 3, 4]
    for version, info in infos:
        assert info["operation"] == history[version]["operation"]
        assert info["timestamp"] == history[version]["timestamp"]
    assert followed.full_reads == 1


def test_table_log_reads_the_snapshot_again_after_a_gap(tmp_path: Path) -> None:
    table = tmp_path / "t"
    append(table, batch(0, 50, seed=1), 0)
    followed = TableLog(location(table), "test")
    for batch_id in (1, 2, 3):
        append(table, batch(50 * batch_id, 50, seed=batch_id), batch_id)
    version = checkpoint_and_clean_up(table, keep_from=2)
    assert followed.refresh() == version
    assert (followed.full_reads, followed.txn_version) == (2, 3)
    (table / "_delta_log" / f"{0:020d}.json").unlink()  # only the checkpoint tells there is a table now
    assert location(table).exists() and not location(tmp_path / "elsewhere").exists()


def test_net_changes_and_commit_info_read_from_the_json_commits(tmp_path: Path) -> None:
    table = tmp_path / "t"
    append(table, batch(0, 120, seed=1), 0)
    first = DeltaTable(str(table)).version()
    append(table, batch(120, 120, seed=2), 1)
    rewrite_partition(table, 1992)
    changes = NetChanges.of(location(table).commits_after(first))
    live = set(DeltaTable(str(table)).file_uris())
    at_first = set(DeltaTable(str(table), version=first).file_uris())
    root = str(table)
    assert {f"{root}/{p}" for p in changes.added} == live - at_first
    removed = {f"{root}/{p}" for p in changes.removed}
    assert at_first - live <= removed and not removed & live  # (and files added, then removed, within)
    log = location(table)
    info = commit_info(log.fs, log.log_dir, first + 2, chunk=7)  # a small chunk: lines cut across reads
    assert info is not None and info["operation"] == DeltaTable(root).history(1)[0]["operation"]
    assert log.commit_info(first + 3) is None


def test_a_line_separator_inside_a_string_of_a_commit_does_not_cut_the_action(tmp_path: Path) -> None:
    table = tmp_path / "t"
    append(table, batch(0, 10, seed=1), 0)
    followed = TableLog(location(table), "test")
    # Unicode line and paragraph separators and NEL: writers leave them unescaped in the stats
    odd = batch(10, 10, seed=2).set_column(1, "city", pa.array(["a\u2028b", "c\u2029d", "e\x85f"] + ["x"] * 7))
    append(table, odd, 1)
    assert "\u2028".encode() in (table / "_delta_log" / f"{2:020d}.json").read_bytes(), "the test needs it raw"
    changes = NetChanges.of(location(table).commits_after(1))
    assert {f"{table}/{p}" for p in changes.added} == set(DeltaTable(str(table)).file_uris()) - \
        set(DeltaTable(str(table), version=1).file_uris())  # fmt: skip
    assert followed.refresh() == 2 and followed.txn_version == 1 and followed.full_reads == 1
