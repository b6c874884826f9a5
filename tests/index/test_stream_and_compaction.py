"""The index kept by the compactor over a table the stream fills: equal to a rebuild, readable by
Spark through the pruned files; the compactor's own view of the live files (kept current from the
log's new commits) gives the same clustering depth as the log read afresh."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import DeltaTable

from lakecluster.clustering import clustering_depth
from lakecluster.compaction.loop import Compactor
from lakecluster.config import StorageConfig
from lakecluster.index.prune import prune
from lakecluster.index.reader import read_candidates
from lakecluster.index.spec import IndexSpec
from lakecluster.index.sync import rebuild, store_for, sync
from lakecluster.table import LakeTable
from lakecluster.table.location import DeltaLocation
from tests.conftest import duckdb_connection
from tests.generated_tables import fill, generator_config
from tests.snapshot_files import snapshot_files

pytestmark = pytest.mark.integration


def test_index_kept_through_stream_and_compaction_equals_rebuild_and_prunes_for_spark(spark, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    table = tmp_path / "t"
    config = generator_config(table, rows=12_000, per_batch=3_000, **{"index.max_segments": "3"})
    spec = IndexSpec.of(LakeTable(config))
    fill(spark, config)
    assert sync(spec).mode == "rebuild"  # first sync: no index yet
    compactor = Compactor(config, spark=spark)
    results = compactor.run_once()  # syncs the index after every commit
    assert results and all(r.result == "committed" for r in results)
    # a second stream run adds files on top; the compactor's next round picks them up
    fill(spark, replace(config, source=replace(config.source, generator=replace(
        config.source.generator, max_rows=18_000))))  # fmt: skip
    compactor.run_once()

    version = DeltaTable(str(table)).version()
    manifest = store_for(spec).manifest()
    assert manifest is not None and manifest.delta_version == version  # the compactor kept it current
    other = replace(spec, index_path=str(tmp_path / "rebuilt"))
    rebuild(other)
    assert store_for(spec).read_all().equals(store_for(other).read_all())

    # Reading only the pruned files gives exactly the matching rows (DuckDB reads the whole table).
    where = "s_city = 'UNITED KI1' AND d_year >= 1995"
    result = prune(spec, where)
    assert 0 < result.files.num_rows < result.files_total
    got = read_candidates(spark, spec, result).where(where).select("lo_orderkey").toPandas()["lo_orderkey"]
    duck = duckdb_connection().execute(f"SELECT lo_orderkey FROM delta_scan('{table}') WHERE {where}").fetchall()
    assert sorted(got.tolist()) == sorted(r[0] for r in duck) and len(duck) > 0

    # The compactor's live files (followed commit by commit) give the log's depth exactly.
    _, files = snapshot_files(DeltaLocation(str(table), StorageConfig()), compactor.config.table.columns,
                              compactor.spec.partition_by)
    actions = pa.table(DeltaTable(str(table)).get_add_actions(flatten=True))  # an independent reader
    ranges = compactor.ranges()
    assert sorted(ranges["path"].to_pylist()) == sorted(f.path for f in files)
    assert compactor.live.full_reads == 1
    sketches = compactor.sketches()
    paths = [f.path for f in files]
    for c in config.table.clustering_columns:
        assert clustering_depth(ranges, paths, sketches, c) == clustering_depth(actions, paths, sketches, c)


def test_stream_keeps_the_index_current_when_asked(spark, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    table = tmp_path / "t"
    config = generator_config(table, rows=6_000, per_batch=2_000, **{"index.sync_after_stream": "true"})
    spec = IndexSpec.of(LakeTable(config))
    fill(spark, config)
    manifest = store_for(spec).manifest()
    assert manifest is not None and manifest.delta_version == DeltaTable(str(table)).version()
    other = replace(spec, index_path=str(tmp_path / "rebuilt"))
    rebuild(other)
    assert store_for(spec).read_all().equals(store_for(other).read_all())
