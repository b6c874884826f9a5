"""The stream sink's own bookkeeping of what its commits wrote."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from deltalake import DeltaTable

from lakecluster.table import LakeTable, TableLog, user_metadata
from stream.sink import files_written

pytestmark = pytest.mark.integration


def test_files_written_counts_the_streams_commit_even_when_a_compaction_commits_after_it(spark, tmp_path: Path) -> None:
    path = str(tmp_path / "t")
    spark.range(0, 400).selectExpr("id", "id % 7 AS k").repartition(4).write.format("delta").save(path)
    table_log = TableLog(LakeTable.at(path).delta, "s")  # what the sink follows the table with
    before = table_log.version
    meta = user_metadata(stream="s", batch=1, txn=1)
    (spark.range(400, 1000).selectExpr("id", "id % 7 AS k").repartition(3).write.format("delta").mode("append")
     .option("userMetadata", meta).save(path))  # fmt: skip
    # A compactor commits between the stream's write and its look at the log.
    spark.sql(f"OPTIMIZE delta.`{path}`")
    assert table_log.refresh() == DeltaTable(path).version() == before + 2

    entry = (Path(path) / "_delta_log" / f"{before + 1:020d}.json").read_text().splitlines()
    added = sum("add" in json.loads(line) for line in entry)
    assert added == 3
    files, written = files_written(table_log, before, meta)
    assert files == added
    sizes = [json.loads(line)["add"]["size"] for line in entry if "add" in json.loads(line)]
    assert written == sum(sizes)
    # A write Delta skipped as already committed made no commit: nothing was written.
    assert files_written(table_log, before + 2, meta) == (0, 0)
