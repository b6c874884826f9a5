"""Cluster on write: the stream sorts each micro-batch by the curve key before writing it."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import DeltaTable

from lakecluster.clustering import clustering_depth
from lakecluster.config import load_config
from lakecluster.stream.job import StreamJob
from lakecluster.table import LakeTable

pytestmark = pytest.mark.integration


def _depth(table: Path) -> float:
    actions = pa.table(DeltaTable(str(table)).get_add_actions(flatten=True))
    # files of batches after the first (the first batch has no boundaries yet)
    paths = [p for p in actions["path"].to_pylist() if "part-s0000000000-" not in p]
    sketches = LakeTable.at(str(table)).sketches().latest()
    assert sketches is not None
    cols = ("s_city", "c_city", "p_brand")
    return sum(clustering_depth(actions, paths, sketches, c) for c in cols) / len(cols)


def test_files_cut_from_a_sorted_batch_are_narrower(spark, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    depth = {}
    for on in (False, True):
        table = tmp_path / f"t_{on}"
        config = load_config(overrides={
            "table.path": str(table), "table.partition_by": "[]", "stream.max_records_per_file": "500",
            "source.generator.max_rows": "12000", "source.generator.max_rows_per_trigger": "4000",
            "source.generator.partitions": "1", "stream.cluster_on_write": str(on).lower(),
            "stream.progress": "false", "stream.trigger_interval_s": "0", "metrics.port": "0",
        }, environ={})  # fmt: skip
        StreamJob(config, spark=spark, available_now=True).run()
        assert DeltaTable(str(table)).to_pyarrow_table().num_rows == 12_000
        depth[on] = _depth(table)
    # Unsorted, each of the 24 files spans every value: depth ~24. Sorted, each of the batch's two
    # write tasks cuts 4 files from its half of the batch in curve order; a file covers about half
    # of the range of two of the three columns: ~16.
    assert depth[False] > 22
    assert depth[True] < 0.8 * depth[False], depth
