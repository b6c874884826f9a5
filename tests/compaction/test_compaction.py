"""The compactor on real Delta tables: rows kept exactly, files fewer and narrower, safe commits."""

from __future__ import annotations

import json
import logging
import subprocess
import threading
import time
from collections import Counter
from dataclasses import replace
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable

from lakecluster.clustering import ClusteringLayout
from lakecluster.compaction.commit import commit_rewrite
from lakecluster.compaction.loop import Compactor
from lakecluster.compaction.rewrite import RewriteSpec, rewrite
from lakecluster.compaction.rewrite_local import rewrite_local
from lakecluster.compaction.rewrite_tasks import rewrite_in_tasks
from lakecluster.config import load_config
from lakecluster.errors import CompactionConflictError, NoBoundariesError
from lakecluster.sketches import BoundarySketches
from lakecluster.stream.generator import GeneratorSettings, generate
from lakecluster.stream.job import StreamJob
from lakecluster.table import LakeTable, create_table, parse_user_metadata
from lakecluster.table.delta_schema import DeltaSchema
from tests.conftest import duckdb_connection, lakecluster_cmd, read_delta, subprocess_env
from tests.generated_tables import SMALL, fill, filled_for_subprocesses, generator_config, row_multiset
from tests.services.kafka import KafkaBroker
from tests.stream import kafka_records as kr

pytestmark = pytest.mark.integration

# The two rewrite engines groups go to: in the compactor's process (small groups, the default for
# these tests' tables) and Spark tasks (every group above compaction.local_rewrite_max_bytes). The
# third, Spark's own reader and shuffle, takes what pyarrow cannot read (tests below).
ENGINES = {"local": {}, "tasks": {"compaction.local_rewrite_max_bytes": "0"}}


def log_entries(table: Path, version: int) -> list[dict]:
    return [json.loads(line) for line in (table / "_delta_log" / f"{version:020d}.json").read_text().splitlines()]


def removed_paths(table: Path) -> list[str]:
    """Every path any commit removed (a path removed twice means two rewrites of the same rows)."""
    out = []
    for v in range(DeltaTable(str(table)).version() + 1):
        out.extend(e["remove"]["path"] for e in log_entries(table, v) if "remove" in e)
    return out


@pytest.mark.parametrize("engine", ENGINES)
def test_compaction_keeps_every_row_and_cuts_files_and_depth(spark, filled, tmp_path: Path, engine: str) -> None:  # type: ignore[no-untyped-def]
    table = tmp_path / "t"
    config = generator_config(table, rows=24_000, per_batch=6_000, **ENGINES[engine])
    filled(config)
    before = read_delta(table)
    files_before = len(DeltaTable(str(table)).file_uris())

    compactor = Compactor(config, spark=spark)
    results = compactor.run_once()
    assert results and all(r.result == "committed" for r in results)

    after = read_delta(table)
    assert row_multiset(after) == row_multiset(before)
    assert after.num_rows == 24_000
    duck = duckdb_connection().execute(f"SELECT count(*), sum(lo_orderkey) FROM delta_scan('{table}')").fetchone()
    assert duck == (24_000, sum(before["lo_orderkey"].to_pylist()))
    assert len(DeltaTable(str(table)).file_uris()) < files_before
    assert all(r.scanned_after < r.scanned_before for r in results)

    # The commit says what it is: OPTIMIZE with its metrics, every action dataChange=false, and
    # lakecluster's details in userMetadata.
    entries = log_entries(table, results[0].version)
    info = next(e["commitInfo"] for e in entries if "commitInfo" in e)
    assert info["operation"] == "OPTIMIZE"
    metrics = info["operationMetrics"]
    assert int(metrics["numRemovedFiles"]) == len(results[0].group.files)
    assert int(metrics["numAddedFiles"]) == results[0].files_out
    meta = json.loads(info["userMetadata"])["lakecluster"]
    assert meta["operation"] == "compaction" and meta["curve"] == "hilbert"
    assert meta["columns"] == "s_city,c_city,p_brand" and meta["attempt"]
    assert meta["rewrite"] == engine
    changes = [e.get("add", e.get("remove")) for e in entries if "add" in e or "remove" in e]
    assert changes and all(c["dataChange"] is False for c in changes)
    # Spark SQL through delta-spark sees the rewrite as what it is.
    history = spark.sql(f"DESCRIBE HISTORY delta.`{table}`").collect()
    assert {h["operation"] for h in history} >= {"OPTIMIZE", "WRITE"}

    # Nothing left to do for the same data: a second round finds no unclustered files.
    assert all(g.reason.startswith("merge") for g in compactor.plan().groups)


@pytest.mark.parametrize("engine", ENGINES)
def test_a_value_heavier_than_a_file_is_spread_over_several_files(spark, filled, tmp_path: Path, engine: str) -> None:  # type: ignore[no-untyped-def]
    table = tmp_path / "t"
    # Extreme brand skew: a few brands hold most rows; one partition so all rows meet in one group.
    config = generator_config(table, rows=20_000, per_batch=5_000, **{"source.generator.brand_skew": "3.0",
                              "table.partition_by": "[]"}, **ENGINES[engine])  # fmt: skip
    filled(config)
    Compactor(config, spark=spark).run_once()
    actions = pa.table(DeltaTable(str(table)).get_add_actions(flatten=True))
    rows = actions["num_records"].to_pylist()
    top = Counter(read_delta(table)["p_brand"].to_pylist()).most_common(1)[0]
    lows, highs = actions["min.p_brand"].to_pylist(), actions["max.p_brand"].to_pylist()
    holding_top = [n for n, lo, hi in zip(rows, lows, highs, strict=True) if lo <= top[0] <= hi]
    assert top[1] > max(rows)  # the value alone is bigger than a file
    assert len(holding_top) >= 2 and max(rows) <= 2 * sum(rows) / len(rows) + 1


def test_a_group_already_rewritten_by_another_compactor_is_dropped_before_any_work(spark, filled, tmp_path) -> None:  # type: ignore[no-untyped-def]
    table = tmp_path / "t"
    config = generator_config(table, rows=12_000, per_batch=3_000)
    filled(config)
    first, second = Compactor(config, spark=spark), Compactor(config, spark=spark)
    group = first.plan().groups[0]
    same = next(g for g in second.plan().groups if g.files == group.files)
    sketches = first.sketches()
    assert first.compact_group(group, sketches).result == "committed"
    files_before = {p.name for p in table.rglob("*.parquet")}
    lost = second.compact_group(same, sketches)
    assert lost.result == "skipped" and "already rewritten" in lost.message
    assert {p.name for p in table.rglob("*.parquet")} == files_before, "the dropped group still wrote files"


def test_a_rewrite_whose_inputs_went_meanwhile_commits_nothing(spark, filled, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    table = tmp_path / "t"
    config = generator_config(table, rows=12_000, per_batch=3_000)
    filled(config)
    before = read_delta(table)
    first, second = Compactor(config, spark=spark), Compactor(config, spark=spark)
    group = first.plan().groups[0]
    sketches = first.sketches()
    layout = ClusteringLayout.build(sketches, config.table.clustering_columns, curve="hilbert", target_cells=2)
    spec = RewriteSpec.for_columns(str(table), config.table.columns, ("d_year",), layout, target_files=2,
                                   file_prefix="g01-abc")
    assert second.plan().groups[0] == group  # the second compactor's view of the files: before the commit
    written = rewrite(second.spark, group, spec)  # the second compactor is mid-rewrite ...
    assert first.compact_group(group, sketches).result == "committed"  # ... when the first commits
    version = DeltaTable(str(table)).version()
    with pytest.raises(CompactionConflictError, match="no longer in the table"):  # a snapshot at the read version
        commit_rewrite(second.spark, LakeTable(config).delta, group, written, details={"operation": "compaction"})
    with pytest.raises(CompactionConflictError, match="no longer in the table"):  # the compactor's own view
        commit_rewrite(second.spark, LakeTable(config).delta, group, written, details={"operation": "compaction"},
                       gone_since=second.rewriter.gone_since)  # fmt: skip
    assert second.live.full_reads == 1  # it followed the first compactor's commit from the log
    assert DeltaTable(str(table)).version() == version
    assert row_multiset(read_delta(table)) == row_multiset(before)
    assert all((table / f.path).exists() for f in written), "an abandoned rewrite deletes nothing (vacuum does)"


def test_a_rewrite_losing_the_race_inside_its_transaction_names_the_conflict(spark, filled, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """The first compactor commits the same group after the second's transaction started (while
    the second checks its inputs, from a view taken before): Delta's conflict checker refuses the
    second commit, and the error says what happened and that nothing was lost."""
    table = tmp_path / "t"
    config = generator_config(table, rows=12_000, per_batch=3_000)
    filled(config)
    first, second = Compactor(config, spark=spark), Compactor(config, spark=spark)
    group = first.plan().groups[0]
    sketches = first.sketches()
    layout = ClusteringLayout.build(sketches, config.table.clustering_columns, curve="hilbert", target_cells=2)
    spec = RewriteSpec.for_columns(str(table), config.table.columns, ("d_year",), layout, target_files=2,
                                   file_prefix="g01-race")
    written = rewrite(second.spark, group, spec)

    def first_commits_meanwhile(version: int, paths: list[str]) -> list[str]:
        assert first.compact_group(group, sketches).result == "committed"
        return []  # the second compactor's view, from before that commit

    with pytest.raises(CompactionConflictError) as lost:
        commit_rewrite(second.spark, LakeTable(config).delta, group, written, details={"operation": "compaction"},
                       gone_since=first_commits_meanwhile)  # fmt: skip
    message = str(lost.value)
    assert message.startswith("another commit (a second compactor, a delete) removed input files of the group "
                              "after this rewrite's transaction started; the rewrite is abandoned and nothing was "
                              "lost")  # fmt: skip
    assert "ConcurrentDeleteDeleteException: [DELTA_CONCURRENT_DELETE_DELETE" in message
    assert "An error occurred while calling" not in message
    committed = DeltaTable(str(table)).history(1)[0]
    assert committed["operation"] == "OPTIMIZE" and read_delta(table).num_rows == 12_000


def test_an_output_file_gone_before_the_commit_abandons_the_rewrite(spark, filled, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    table = tmp_path / "t"
    config = generator_config(table, rows=12_000, per_batch=3_000)
    filled(config)
    compactor = Compactor(config, spark=spark)
    group = compactor.plan().groups[0]
    layout = ClusteringLayout.build(compactor.sketches(), config.table.clustering_columns, curve="hilbert",
                                    target_cells=2)  # fmt: skip
    spec = RewriteSpec.for_columns(str(table), config.table.columns, ("d_year",), layout, target_files=2,
                                   file_prefix="g01-def")
    written = rewrite(compactor.spark, group, spec)
    (table / written[0].path).unlink()  # e.g. another process's cleanup
    version = DeltaTable(str(table)).version()
    with pytest.raises(CompactionConflictError, match="missing"):
        commit_rewrite(compactor.spark, LakeTable(config).delta, group, written, details={"operation": "compaction"})
    assert DeltaTable(str(table)).version() == version
    assert read_delta(table).num_rows == 12_000


def _first_group_and_layout(spark, filled, table: Path, per_batch: int):  # type: ignore[no-untyped-def]
    """An unpartitioned table of 9,000 generated rows, the first group its compactor plans and a
    Hilbert layout of 12 cells for it: (config, compactor, group, layout)."""
    config = generator_config(table, rows=9_000, per_batch=per_batch, **{"table.partition_by": "[]"})
    filled(config)
    compactor = Compactor(config, spark=spark)
    group = compactor.plan().groups[0]
    layout = ClusteringLayout.build(compactor.sketches(), config.table.clustering_columns, curve="hilbert",
                                    target_cells=12)  # fmt: skip
    return config, compactor, group, layout


def test_the_local_the_in_task_and_the_spark_rewrite_lay_out_the_same_files(spark, filled, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    table = tmp_path / "t"
    config, compactor, group, layout = _first_group_and_layout(spark, filled, table, per_batch=3_000)
    out = {}
    for engine, write in (("spark", lambda spec: rewrite(compactor.spark, group, spec)),
                          ("tasks", lambda spec: rewrite_in_tasks(compactor.spark, group, spec)),
                          ("local", lambda spec: rewrite_local(group, spec))):  # fmt: skip
        spec = RewriteSpec.for_columns(str(table), config.table.columns, (), layout, target_files=12,
                                   file_prefix=f"g01-{engine}",
                           stats_columns=("lo_revenue", "s_city"))  # fmt: skip
        written = write(spec)
        rows = {f.path: pq.read_table(table / f.path) for f in written}
        assert [f.num_records for f in written] == [rows[f.path].num_rows for f in written]
        for f in written:  # each engine writes the stats the table's properties ask for, and only those
            stats = json.loads(f.stats)
            assert all(set(stats[side]) == {"lo_revenue", "s_city"} for side in ("minValues", "maxValues", "nullCount"))
        out[engine] = (sorted(f.num_records for f in written), row_multiset(pa.concat_tables(rows.values())),
                       sorted(sorted(row_multiset(t).items()) for t in rows.values()))  # fmt: skip
    assert out["local"][0] == out["spark"][0] == out["tasks"][0] and len(out["local"][0]) >= 10
    assert out["local"][1] == out["spark"][1] == out["tasks"][1] == row_multiset(read_delta(table))
    assert out["tasks"][2] == out["local"][2], "the in-task rewrite puts each row in the file the local one does"


def test_the_in_task_rewrite_ships_a_record_per_run_and_batch_of_rows_not_per_input_file(  # type: ignore[no-untyped-def]
    spark, filled, tmp_path: Path
) -> None:
    from lakecluster.compaction import rewrite_tasks
    from lakecluster.compaction.runs import plan_runs
    from lakecluster.file_plan import file_plan

    table = tmp_path / "t"
    config, _, group, layout = _first_group_and_layout(spark, filled, table, per_batch=1_000)
    spec = RewriteSpec.for_columns(str(table), config.table.columns, (), layout, target_files=12,
                                   file_prefix="g01-batches")
    paths = group.files
    counted = rewrite_tasks._count_task(spec, paths)
    cells, counts = rewrite_tasks._merge_counts([counted])
    file_of_cell, _ = file_plan(counts, spec.target_files)
    runs = plan_runs(cells, counts, file_of_cell, counted.samples,
                     bytes_per_row=counted.sample_bytes / counted.sample_rows, run_bytes=spec.task_memory_bytes // 4)
    assert runs.runs == len(set(file_of_cell.tolist())), "a run per file: each file's rows fit a task's memory"
    records = list(rewrite_tasks._split_task(spec, runs, rewrite_tasks.BATCH_ROWS, 0, paths))
    # Every stream file spans the whole key range, so split file by file each would send a record
    # to nearly every output file; gathered into batches of BATCH_ROWS (all 9,000 rows here), one
    # record per run.
    assert len(paths) >= 6 and len(records) == runs.runs <= 12
    shipped = pa.concat_tables(rewrite_tasks._decode(blob) for _, (_, _, _, _, blob) in records)
    assert shipped.num_rows == sum(rows for _, (_, _, rows, _, _) in records) == group.rows == 9_000


def test_the_in_task_rewrite_in_a_small_memory_budget_spills_and_writes_the_same_files_row_for_row(  # type: ignore[no-untyped-def]
    spark, filled, tmp_path: Path
) -> None:
    """With a budget far below a file's rows, each file is cut into many runs, the reducers spill
    what they receive, runs the estimate got wrong are cut again: the files hold the same rows in
    the same order as with room for whole files, and the spill directory is left empty."""
    from lakecluster import metrics

    table = tmp_path / "t"
    config, compactor, group, layout = _first_group_and_layout(spark, filled, table, per_batch=1_000)
    spill = tmp_path / "spill"
    spilled = metrics.REGISTRY.get_sample_value("lakecluster_compaction_spilled_bytes_total") or 0.0
    out = {}
    for name, memory in (("roomy", 512 << 20), ("small", 64 << 10)):
        spec = RewriteSpec.for_columns(str(table), config.table.columns, (), layout, target_files=6,
                                       file_prefix=f"g01-{name}", task_memory_bytes=memory,
                                       spill_dir=str(spill))  # fmt: skip
        written = rewrite_in_tasks(compactor.spark, group, spec)
        # The file's number and piece end its name: the same in both runs.
        out[name] = {f.path.rsplit("-c", 1)[1]: pq.read_table(table / f.path) for f in written}
        now = metrics.REGISTRY.get_sample_value("lakecluster_compaction_spilled_bytes_total") or 0.0
        out[name + " spilled"], spilled = now - spilled, now
    assert out["roomy spilled"] == 0 and out["small spilled"] > 100_000
    assert sorted(out["roomy"]) == sorted(out["small"]) and len(out["roomy"]) >= 5
    for piece, rows in out["roomy"].items():
        assert rows.equals(out["small"][piece]), piece
    assert sum(t.num_rows for t in out["small"].values()) == 9_000
    assert list(spill.iterdir()) == [], "spill files have no name: nothing is left behind"


def test_a_group_the_spark_tasks_cannot_read_is_rewritten_by_sparks_reader(  # type: ignore[no-untyped-def]
    spark, filled, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    table = tmp_path / "t"
    config = generator_config(table, rows=9_000, per_batch=3_000,
                              **{"table.partition_by": "[]", **ENGINES["tasks"]})  # fmt: skip
    filled(config)
    before = read_delta(table)
    tried = []

    def unreadable(spark, group, spec):  # type: ignore[no-untyped-def]
        # The tasks read a text column as a number: pyarrow fails inside the Spark tasks, for real.
        columns = tuple(replace(c, type="int") if c.name == "lo_shipmode" else c for c in config.table.columns)
        tried.append(spec.file_prefix)
        return rewrite_in_tasks(spark, group, replace(spec, table_schema=DeltaSchema.of_columns(columns, ())))

    monkeypatch.setattr("lakecluster.compaction.group_rewrite.rewrite_in_tasks", unreadable)
    results = Compactor(config, spark=spark).run_once()
    assert [r.result for r in results] == ["committed"], results
    assert tried, "the Spark tasks were tried first"
    info = next(e["commitInfo"] for e in log_entries(table, results[0].version) if "commitInfo" in e)
    assert json.loads(info["userMetadata"])["lakecluster"]["rewrite"] == "spark"
    assert row_multiset(read_delta(table)) == row_multiset(before)


def test_rewritten_files_follow_the_tables_stats_properties_as_they_change(spark, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    # The engines share the writer and are handed the same stats columns (the test above checks
    # that each honours them); this follows the table's properties through two rounds.
    table = tmp_path / "t"
    config = generator_config(table, rows=8_000, per_batch=2_000, **{"table.partition_by": "[]"})
    lake = LakeTable(config)
    create_table(spark, lake.delta, lake.spec, properties={"delta.dataSkippingNumIndexedCols": "2"})
    fill(spark, config)
    compactor = Compactor(config, spark=spark)

    def stats_of_round() -> set[str]:
        results = compactor.run_once()
        assert results and all(r.result == "committed" for r in results)
        adds = [e["add"] for r in results for e in log_entries(table, r.version) if "add" in e]
        keys = [set(json.loads(a["stats"])[side]) for a in adds for side in ("minValues", "maxValues", "nullCount")]
        assert all(k == keys[0] for k in keys)
        return keys[0]

    assert stats_of_round() == {"lo_orderkey", "lo_linenumber"}
    columns = ", ".join(["lo_revenue", *config.table.clustering_columns])
    spark.sql(f"ALTER TABLE delta.`{table}` SET TBLPROPERTIES ('delta.dataSkippingStatsColumns' = '{columns}')")
    fill(spark, generator_config(table, rows=4_000, per_batch=1_000, **{"table.partition_by": "[]",
                                                                           "source.generator.seed": "7"}))  # fmt: skip
    assert stats_of_round() == {"lo_revenue", *config.table.clustering_columns}
    assert read_delta(table).num_rows == 12_000


def test_a_group_the_local_rewrite_cannot_read_is_rewritten_by_spark(  # type: ignore[no-untyped-def]
    spark, filled, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    table = tmp_path / "t"
    config = generator_config(table, rows=9_000, per_batch=3_000, **{"table.partition_by": "[]"})
    filled(config)
    before = read_delta(table)

    def unreadable(*args: object, **kwargs: object) -> None:
        # what pyarrow says of a file it cannot read as declared (Spark's reader may)
        raise pa.ArrowInvalid("Casting from timestamp[ns] to timestamp[us] would lose data")

    monkeypatch.setattr("lakecluster.compaction.group_rewrite.rewrite_local", unreadable)
    results = Compactor(config, spark=spark).run_once()
    assert [r.result for r in results] == ["committed"], results
    info = next(e["commitInfo"] for e in log_entries(table, results[0].version) if "commitInfo" in e)
    assert json.loads(info["userMetadata"])["lakecluster"]["rewrite"] == "spark"
    assert row_multiset(read_delta(table)) == row_multiset(before)


@pytest.mark.parametrize("engine", ENGINES)
def test_partition_values_that_need_uri_encoding_are_compacted(spark, tmp_path: Path, engine: str) -> None:  # type: ignore[no-untyped-def]
    from deltalake import write_deltalake

    table = tmp_path / "t"
    config = generator_config(table, rows=1, per_batch=1, **{"table.partition_by": '["c_region"]'}, **ENGINES[engine])
    data = pa.Table.from_batches([generate(0, 9_000, GeneratorSettings(), config.table.columns)])
    # a space and a percent sign are encoded in the log; brackets, braces and stars are glob patterns to Spark
    regions = pa.array(["ASIA PACIFIC", "50% EUROPE", "A[1]{b,c}*?"] * (data.num_rows // 3))
    data = data.set_column(data.column_names.index("c_region"), "c_region", regions)
    for start in range(0, data.num_rows, 1_000):  # another writer's table: delta-rs encodes the paths
        write_deltalake(str(table), data.slice(start, 1_000), mode="append", partition_by=["c_region"])
    assert any("%25" in p for p in DeltaTable(str(table)).get_add_actions(flatten=True).column("path").to_pylist())
    sketches = BoundarySketches.empty([config.table.column(c) for c in config.table.clustering_columns])
    for c in config.table.clustering_columns:
        sketches.sketches[c].update(data[c])
    sketches.delta_version = DeltaTable(str(table)).version()
    LakeTable.at(str(table)).sketches().write(sketches)
    results = Compactor(config, spark=spark).run_once()
    assert [r.result for r in results] == ["committed"] * 3, results
    assert row_multiset(read_delta(table)) == row_multiset(data)
    assert len(DeltaTable(str(table)).file_uris()) < 27


def test_a_commit_whose_answer_is_lost_is_resolved_from_the_log(spark, filled, tmp_path: Path,  # type: ignore[no-untyped-def]
                                                                monkeypatch: pytest.MonkeyPatch,
                                                                caplog: pytest.LogCaptureFixture) -> None:  # fmt: skip
    table = tmp_path / "t"
    config = generator_config(table, rows=12_000, per_batch=3_000)
    filled(config)
    before = read_delta(table)
    monkeypatch.setenv("LAKECLUSTER_TEST_FAIL_AT", "compaction_after_commit_call")
    with caplog.at_level(logging.WARNING, logger="lakecluster.compaction.commit"):
        results = Compactor(config, spark=spark).run_once()
    assert results and all(r.result == "committed" for r in results)
    # Every commit call "failed" after landing, and each was found in the log by its attempt id.
    resolved = [r for r in caplog.records if "is in the log at version" in r.getMessage()]
    assert len(resolved) == len(results), [r.getMessage() for r in caplog.records]
    dt = DeltaTable(str(table))
    attempts = [parse_user_metadata(h.get("userMetadata"))["attempt"] for h in dt.history()
                if h["operation"] == "OPTIMIZE"]  # fmt: skip
    assert len(attempts) == len(set(attempts)) == len(results), "each rewrite is committed exactly once"
    # Every output the log references exists: nothing live was deleted after the "failed" call.
    assert all((table / p).exists() for p in dt.get_add_actions(flatten=True).column("path").to_pylist())
    assert row_multiset(read_delta(table)) == row_multiset(before)


def test_two_compactor_processes_at_once_never_rewrite_the_same_rows_twice(spark, filled, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    table = tmp_path / "t"
    args = filled_for_subprocesses(filled, table)
    before = read_delta(table)
    # Both plan from the same snapshot and hold each rewrite for 15 s before committing: they
    # overlap for sure, and only one may win each group.
    env = subprocess_env(LAKECLUSTER_TEST_PAUSE_AT="compaction_before_commit:15")
    procs = [subprocess.Popen(lakecluster_cmd(*args, "compact", "--once"), env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(2)]  # fmt: skip
    outs = [p.communicate(timeout=600) for p in procs]
    codes = [p.returncode for p in procs]
    assert set(codes) <= {0, 3} and 3 in codes, outs  # 3: finished having lost a group to the other
    assert row_multiset(read_delta(table)) == row_multiset(before)
    removed = removed_paths(table)
    assert removed and len(removed) == len(set(removed)), "a file was rewritten by both compactors"
    assert duckdb_connection().execute(f"SELECT count(*) FROM delta_scan('{table}')").fetchone() == (9_000,)


def test_compactor_killed_before_commit_leaves_the_table_intact_and_its_files_to_vacuum(  # type: ignore[no-untyped-def]
    spark, filled, tmp_path: Path
) -> None:
    table = tmp_path / "t"
    args = filled_for_subprocesses(filled, table)
    before = read_delta(table)
    version = DeltaTable(str(table)).version()
    crashed = subprocess.run(lakecluster_cmd(*args, "compact", "--once"), capture_output=True,
                             env=subprocess_env(LAKECLUSTER_TEST_CRASH_AT="compaction_before_commit"))  # fmt: skip
    assert crashed.returncode == 137, crashed.stderr[-2000:]
    assert DeltaTable(str(table)).version() == version
    assert row_multiset(read_delta(table)) == row_multiset(before)
    leftovers = list(table.rglob("part-g*.parquet"))
    assert leftovers, "the killed rewrite should have written files before dying"

    # The next compactor (here in this process: a fresh Compactor, as after a restart) rewrites the
    # group for real and leaves the dead one's files alone.
    restarted = Compactor(generator_config(table, rows=9_000, per_batch=3_000, **{"table.partition_by": "[]"}),
                          spark=spark)  # fmt: skip
    assert [r.result for r in restarted.run_once()] == ["committed"]
    assert all(p.exists() for p in leftovers), "only vacuum deletes files, after the retention period"
    assert row_multiset(read_delta(table)) == row_multiset(before)
    # A vacuum that keeps nothing older than "now" removes them; the table reads the same.
    swept = subprocess.run(lakecluster_cmd(*args, "vacuum", "--retention", "0", "--force"), capture_output=True,
                           env=subprocess_env(), text=True)  # fmt: skip
    assert swept.returncode == 0, swept.stderr[-2000:]
    assert "directories in a total of" not in swept.stdout, "Delta's own console note reached the user's output"
    assert not [p for p in leftovers if p.exists()]
    assert row_multiset(read_delta(table)) == row_multiset(before)


def test_stream_and_compactor_side_by_side_on_kafka(spark, kafka: KafkaBroker, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    topic = "compact-live"
    kafka.create_topic(topic, 3)
    table = tmp_path / "t"
    cfg_file = kr.write_config(tmp_path / "c.toml", bootstrap=kafka.bootstrap, topic=topic, table=table,
                               max_offsets=150)  # fmt: skip
    config = load_config(cfg_file, overrides={**SMALL, "compaction.target_file_bytes": "20000",
                                              "compaction.min_file_bytes": "10000"}, environ={})  # fmt: skip
    stream = StreamJob(config, spark=spark)
    produced: list[kr.Produced] = []
    compactions: list = []
    compactor: list[Compactor] = []

    def compact_loop() -> None:
        c = Compactor(config, spark=spark)
        compactor.append(c)
        while not c.stopping:
            try:
                compactions.extend(c.run_once())
            except NoBoundariesError:
                pass  # the stream has not committed its first batch yet; `run_forever` waits the same way
            except Exception as e:
                compactions.append(e)
                return
            time.sleep(0.5)

    stream.on_started = threading.Thread(target=compact_loop).start
    stream_thread = threading.Thread(target=stream.run)
    stream_thread.start()
    try:
        for wave in range(4):
            records = kr.build(wave * 1000, 250, partitions=3, seed=wave, with_malformed=False)
            kafka.produce(topic, [(r.partition, r.value) for r in records])
            produced.extend(records)
            time.sleep(3)
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline and (not (table / "_delta_log").exists()
                                               or read_delta(table).num_rows < len(produced)):  # fmt: skip
            time.sleep(1)
        time.sleep(3)
    finally:
        for c in compactor:
            c.request_stop()
        stream.request_stop()
        stream_thread.join(timeout=300)
        time.sleep(1)
    errors = [c for c in compactions if isinstance(c, Exception)]
    assert not errors, errors
    assert kr.table_rows(read_delta(table)) == kr.expected_rows(produced)
    committed = [c for c in compactions if c.result == "committed"]
    assert committed, "the compactor committed nothing while the stream ran"
    assert all(c.scanned_after <= c.scanned_before for c in committed)


@pytest.mark.parametrize("engine", ENGINES)
def test_a_stop_during_a_rewrite_abandons_it_within_the_stop_timeout(spark, filled, tmp_path, engine: str) -> None:  # type: ignore[no-untyped-def]
    table = tmp_path / "t"
    # A timeout far shorter than any rewrite: the rewrite is always still running when it expires.
    settings = {"table.partition_by": "[]", "compaction.stop_timeout_s": "0.01",
                "compaction.target_file_bytes": "3000000", "compaction.min_file_bytes": "3000000",
                **ENGINES[engine]}  # fmt: skip
    config = generator_config(table, rows=60_000, per_batch=15_000, **settings)
    filled(config)
    before = read_delta(table)
    version = DeltaTable(str(table)).version()
    compactor = Compactor(config, spark=spark)
    results: list = []  # type: ignore[type-arg]
    worker = threading.Thread(target=lambda: results.extend(compactor.run_once()))
    worker.start()
    assert compactor._busy.wait(120), "the rewrite never started"
    stopped_at = time.monotonic()
    compactor.request_stop()
    worker.join(60)
    took = time.monotonic() - stopped_at
    assert not worker.is_alive()
    assert [r.result for r in results] == ["abandoned"], results
    assert took < 10, f"stopping took {took:.1f}s"
    assert DeltaTable(str(table)).version() == version, "an abandoned rewrite commits nothing"
    assert row_multiset(read_delta(table)) == row_multiset(before)
    # Later rounds (here: a new compactor) still compact the table.
    assert [r.result for r in Compactor(config, spark=spark).run_once()] == ["committed"]
    assert row_multiset(read_delta(table)) == row_multiset(before)
