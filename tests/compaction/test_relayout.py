"""A layout change on an existing table: sketches built from the table for the new clustering
columns, and ``compact --full`` re-clustering what the change left behind, killed and resumed."""

from __future__ import annotations

import json
import subprocess
from dataclasses import replace
from pathlib import Path

import pytest
from deltalake import DeltaTable

from lakecluster.compaction.loop import Compactor
from lakecluster.config import load_config
from lakecluster.sketches import BoundarySketches
from lakecluster.stream.job import StreamJob
from lakecluster.table import LakeTable
from lakecluster.table.sketch_store import load_or_empty
from tests.cli.conftest import write_ssb_table
from tests.conftest import lakecluster_cmd, read_delta, subprocess_env
from tests.generated_tables import SMALL, generator_config, row_multiset

pytestmark = pytest.mark.integration

NEW_COLUMNS = ["lo_quantity", "lo_shipmode", "lo_orderdate", "c_nation"]  # what users got told: no sketches


def _relaid(config, columns: list[str]):  # type: ignore[no-untyped-def]
    """``config`` with ``tune``'s advice applied: other clustering columns (their weights reset)."""
    return replace(config, table=replace(config.table, clustering_columns=tuple(columns)),
                   compaction=replace(config.compaction, column_weights={}))  # fmt: skip


def _filled(filled, tmp_path: Path):  # type: ignore[no-untyped-def]
    """A table the stream filled (6,000 rows in 4 batches, 7 partitions), its stream id fixed so the
    copy keeps it; the stream sketched s_city, c_city, p_brand."""
    config = generator_config(tmp_path / "t", rows=6_000, per_batch=1_500, **{"stream.id": '"orders"'})
    filled(config)
    return config


def test_new_clustering_columns_get_sketches_from_the_table_and_compaction_runs(spark, filled,
                                                                                tmp_path: Path) -> None:  # type: ignore[no-untyped-def]  # fmt: skip
    config = _filled(filled, tmp_path)
    table = LakeTable(config)
    before = table.sketches("orders").latest()
    assert before is not None and set(before.sketches) == {"s_city", "c_city", "p_brand"}
    relaid = _relaid(config, NEW_COLUMNS)

    compactor = Compactor(relaid, spark=spark)
    results = compactor.run_once()  # the old code: NoBoundariesError

    assert results and all(r.result == "committed" for r in results)
    stored = LakeTable(relaid).sketches("orders").latest()
    assert stored is not None
    # Merged into the stream's own sketch file: its columns kept as they were, the new ones from
    # every row of this small table (it has fewer than the sample's 100,000).
    assert set(stored.sketches) == {"s_city", "c_city", "p_brand", *NEW_COLUMNS}
    assert {c: stored.sketches[c].n for c in before.sketches} == {c: s.n for c, s in before.sketches.items()}
    assert all(stored.sketches[c].n == 6_000 for c in NEW_COLUMNS)
    assert stored.stream_batch_id == before.stream_batch_id  # a replayed batch is judged as before
    # The stream started with the new columns loads them: it and the compactor agree.
    stream_view = load_or_empty(LakeTable(relaid).sketches("orders"),
                                tuple(relaid.table.column(c) for c in NEW_COLUMNS), k=relaid.sketches.k)  # fmt: skip
    assert all(stream_view.sketches[c].n == 6_000 for c in NEW_COLUMNS)
    # Done once: the next compactor finds them and builds nothing.
    folder = Path(config.table.path) / "_lakecluster/streams/orders/sketches"
    sketch_files = sorted(p.name for p in folder.iterdir())
    assert set(Compactor(relaid, spark=spark).sketches().sketches) >= set(NEW_COLUMNS)
    assert sorted(p.name for p in folder.iterdir()) == sketch_files
    written = {p for p in DeltaTable(config.table.path).file_uris() if "-g01-" in p}
    assert written and all(f"-l{compactor.fingerprint}-" in p for p in written)


def test_a_stream_still_on_the_old_columns_keeps_the_sketches_built_from_the_table(spark, filled,
                                                                                    tmp_path: Path) -> None:  # type: ignore[no-untyped-def]  # fmt: skip
    config = _filled(filled, tmp_path)
    relaid = _relaid(config, NEW_COLUMNS)
    built = Compactor(relaid, spark=spark).sketches()  # what compact --full's first round does
    assert set(built.from_table) == set(NEW_COLUMNS)

    # The stream, not restarted yet, streams one more batch with the old clustering columns.
    more = replace(config, source=replace(config.source, generator=replace(config.source.generator, max_rows=7_500)))
    reports = StreamJob(more, spark=spark, available_now=True).run()

    assert sum(r.rows for r in reports) == 1_500
    newest = LakeTable(config).sketches("orders").latest()
    assert newest is not None and newest.stream_batch_id > built.stream_batch_id  # the stream's own file
    # Carried on, and kept up to date with the stream's batches from the next one on, as its own.
    assert {c: newest.sketches[c].n for c in NEW_COLUMNS} == dict.fromkeys(NEW_COLUMNS, 7_500)
    assert newest.from_table == built.from_table
    assert all(newest.sketches[c].n == 7_500 for c in ("s_city", "c_city", "p_brand"))
    before = sorted(p.name for p in (Path(config.table.path) / "_lakecluster/streams/orders/sketches").iterdir())
    Compactor(relaid, spark=spark).sketches()  # nothing lacks: nothing is built again
    assert sorted(p.name for p in (Path(config.table.path) / "_lakecluster/streams/orders/sketches").iterdir()) \
        == before  # fmt: skip


def test_a_sketch_of_only_the_newest_rows_gets_the_table_sample_merged_in_once(tmp_path: Path) -> None:
    # A stream restarted with the new column before the compactor ran: it sketched 500 rows of 3,000.
    table = write_ssb_table(tmp_path / "lineorder", rows=3_000)
    layout = {"table.path": json.dumps(str(table)), "table.clustering_columns": '["c_nation", "lo_quantity"]'}
    config = load_config(None, overrides=layout, environ={})
    rows = DeltaTable(str(table)).to_pyarrow_table()
    partial = BoundarySketches.empty([config.table.column(c) for c in ("c_nation", "lo_quantity")])
    for c in ("c_nation", "lo_quantity"):
        partial.sketches[c].update(rows[c].slice(0, 500))
    partial.stream_batch_id = 7
    LakeTable(config).sketches(LakeTable(config).stream_id).write(partial)

    first = Compactor(config).sketches()
    again = Compactor(config).sketches()

    def seen(sketches: BoundarySketches) -> dict[str, int]:
        return {c: sketches.sketches[c].n + sketches.sketches[c].nulls for c in ("c_nation", "lo_quantity")}

    assert seen(first) == {"c_nation": 3_500, "lo_quantity": 3_500}  # its 500 rows and the table's 3,000
    assert first.stream_batch_id == 7 and set(first.from_table) == {"c_nation", "lo_quantity"}
    assert seen(again) == seen(first)  # once


def test_killed_full_pass_resumes_on_the_files_left_and_keeps_every_row_once(spark, filled,
                                                                             tmp_path: Path) -> None:  # type: ignore[no-untyped-def]  # fmt: skip
    # Compacted once under the old layout: settled runs the tiered planner would leave alone.
    config = _filled(filled, tmp_path)
    Compactor(config, spark=spark).run_once()
    rows_before = row_multiset(read_delta(config.table.path))
    old_files = set(DeltaTable(config.table.path).file_uris())
    relaid = _relaid(config, ["c_nation", "lo_quantity"])
    # Files the planner alone would never touch again (settled runs): --full rewrites them too.
    planned = {f.path for g in Compactor(relaid, spark=spark).plan().groups for f in g.files}
    settled = {p for p in old_files if p.rsplit("/", 2)[-2] + "/" + p.rsplit("/", 1)[-1] not in planned}
    assert settled
    flags = [f"--set=table.path={config.table.path}", '--set=stream.id="orders"', '--set=table.partition_by=["d_year"]',
             '--set=table.clustering_columns=["c_nation", "lo_quantity"]', "--set=compaction.max_groups_per_run=1",
             *[f"--set={k}={v}" for k, v in SMALL.items()]]  # fmt: skip

    # Dies for real right after its first commit (before its index sync, with rounds left).
    crash = subprocess_env(LAKECLUSTER_TEST_CRASH_AT="compaction_after_commit")
    killed = subprocess.run(lakecluster_cmd(*flags, "compact", "--full"), capture_output=True, text=True, env=crash,
                            timeout=300)  # fmt: skip
    assert killed.returncode == 137, killed.stderr
    one_group = replace(relaid, compaction=replace(relaid.compaction, max_groups_per_run=1))  # as the killed run
    full = Compactor(one_group, spark=spark, full=True)
    files_left, _ = full.relayout_left()
    assert 0 < files_left < len(old_files)  # killed mid-way: some of the pass done, some left

    lines: list[str] = []
    full.on_progress = lines.append
    full.run_forever()  # the re-run: ends by itself once no file is left on another layout

    assert full.relayout_left() == (0, 0)
    assert sum("left on other layouts" in line for line in lines) >= 1  # each round says what is left
    fingerprint = full.fingerprint
    live = DeltaTable(config.table.path).file_uris()
    assert live and all(f"-l{fingerprint}-" in path for path in live)
    assert not settled & set(live)
    assert row_multiset(read_delta(config.table.path)) == rows_before  # delta-rs: every row exactly once
    spark_rows = spark.read.format("delta").load(config.table.path)
    assert spark_rows.count() == sum(rows_before.values())
    assert spark_rows.select("lo_orderkey", "lo_linenumber").distinct().count() == sum(rows_before.values())
    history = DeltaTable(config.table.path).history()
    metadata = [json.loads(h["userMetadata"])["lakecluster"] for h in history
                if h.get("operation") == "OPTIMIZE" and "userMetadata" in h]  # fmt: skip
    assert any(m.get("layout") == fingerprint and m.get("columns") == "c_nation,lo_quantity" for m in metadata)
