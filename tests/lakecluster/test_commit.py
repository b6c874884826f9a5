"""The commit protocol on a real Delta table: an app transaction read from the snapshot's checksum
still makes a concurrent commit of the same transaction fail, a replay commits nothing, and the
commit's userMetadata never stays behind on the session."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import DeltaTable

from lakecluster import delta_txn
from lakecluster.commit import USER_METADATA_CONF, Transaction
from lakecluster.config import StorageConfig
from lakecluster.stream.append import AppendCommit, AppendTarget, commit_append
from lakecluster.table import DeltaLocation
from tests.parquet_writes import write_files

pytestmark = pytest.mark.integration

DDL = "`id` bigint, `k` string"


def _table(spark, path: Path) -> DeltaLocation:  # type: ignore[no-untyped-def]
    spark.sql(f"CREATE TABLE delta.`{path}` ({DDL}) USING delta")
    return DeltaLocation(str(path), StorageConfig())


def _files(path: Path, start: int) -> list:  # type: ignore[type-arg]
    rows = pa.table({"id": pa.array(range(start, start + 5), pa.int64()), "k": pa.array(["a"] * 5)})
    return write_files(str(path), rows, partition_by=(), prefix=f"t{start}", max_rows_per_file=10)


def _append(spark, location: DeltaLocation, path: Path, txn: int, start: int):  # type: ignore[no-untyped-def]
    target = AppendTarget.of(spark, location, DDL, ())
    return commit_append(spark, target, _files(path, start), app_id="s", txn_version=txn, details={"txn": txn})


def test_an_app_transaction_read_from_the_checksum_conflicts_with_a_concurrent_one(spark, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    path = tmp_path / "t"
    location = _table(spark, path)
    _append(spark, location, path, 0, 0)
    jvm = spark._jvm
    delta_log = jvm.org.apache.spark.sql.delta.DeltaLog.forTable(spark._jsparkSession, str(path))
    slow = Transaction(jvm, delta_log.startTransaction())
    assert slow._checksum_transactions() == {"s": 0}, "the commit's checksum carries its app transaction"
    assert slow.app_version("s") == 0
    _append(spark, location, path, 1, 100)  # another writer of the same stream commits txn 1 first
    # The slow transaction commits the same txn 1: Delta must refuse it, as when it read the
    # version itself (``txnVersion``).
    plan = AppendCommit(AppendTarget.of(spark, location, DDL, ()), _files(path, 200), "s", 1, {})
    with pytest.raises(Exception, match="ConcurrentTransactionException"):
        slow.txn.commit(delta_txn.actions(jvm, plan.actions(0)), plan.operation(jvm))
    assert DeltaTable(str(path)).transaction_version("s") == 1
    assert DeltaTable(str(path)).to_pyarrow_table().num_rows == 10


def test_a_replayed_append_commits_nothing_and_leaves_no_user_metadata_on_the_session(spark, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    path = tmp_path / "t"
    location = _table(spark, path)
    first = _append(spark, location, path, 0, 0)
    again = _append(spark, location, path, 0, 0)  # a batch replayed after a crash: the same txn version
    assert first.version == 1 and again.version is None
    history = DeltaTable(str(path)).history()
    assert len(history) == 2 and json.loads(history[0]["userMetadata"]) == {"lakecluster": {"txn": 0}}
    assert spark.conf.get(USER_METADATA_CONF, None) is None, "the commit's userMetadata stayed on the session"
