"""The compactor on real Delta tables: rows kept exactly, files fewer and narrower, safe commits."""

from __future__ import annotations

import json
import subprocess
import threading
import time
from collections import Counter
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import DeltaTable

from lakecluster.compaction.loop import Compactor
from lakecluster.config import Config, load_config
from lakecluster.errors import NoBoundariesError
from lakecluster.stream.job import StreamJob
from tests.conftest import duckdb_connection, lakecluster_cmd, read_delta, subprocess_env
from tests.services.kafka import KafkaBroker as Broker
from tests.stream import kafka_records as kr

pytestmark = pytest.mark.integration

SMALL = {
    "compaction.target_file_bytes": "60000",
    "compaction.min_file_bytes": "30000",
    "compaction.min_input_files": "2",
    "compaction.max_groups_per_run": "50",
    "compaction.orphan_min_age_s": "0",
    "compaction.interval_s": "0.5",
    "metrics.port": "0",
    "stream.progress": "false",
    "stream.trigger_interval_s": "0",
}


def generator_config(table: Path, rows: int, per_batch: int, **extra: str) -> Config:
    overrides = {
        "table.path": str(table), "table.partition_by": '["d_year"]',
        "source.generator.max_rows": str(rows), "source.generator.max_rows_per_trigger": str(per_batch),
        **SMALL, **extra,
    }  # fmt: skip
    return load_config(overrides=overrides, environ={})


def fill(spark, config: Config) -> None:  # type: ignore[no-untyped-def]
    StreamJob(config, spark=spark, available_now=True).run()


def row_multiset(table: pa.Table) -> Counter:
    """Every row, all columns, as a multiset (duplicates count)."""
    columns = sorted(table.column_names)
    return Counter(tuple(row[c] for c in columns) for row in table.select(columns).to_pylist())


def log_entries(table: Path, version: int) -> list[dict]:
    return [json.loads(line) for line in (table / "_delta_log" / f"{version:020d}.json").read_text().splitlines()]


def test_compaction_keeps_every_row_and_cuts_files_and_depth(spark, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    table = tmp_path / "t"
    config = generator_config(table, rows=24_000, per_batch=3_000)
    fill(spark, config)
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
    files_after = len(DeltaTable(str(table)).file_uris())
    assert files_after < files_before
    assert all(r.scanned_after < r.scanned_before for r in results)

    # The commit is a rewrite: removes and adds with dataChange=false, tagged as a compaction.
    entries = log_entries(table, results[0].version)
    info = next(e["commitInfo"] for e in entries if "commitInfo" in e)
    assert info["lakecluster.operation"] == "compaction" and info["lakecluster.curve"] == "hilbert"
    assert info["lakecluster.columns"] == "s_city,c_city,p_brand"
    changes = [e.get("add", e.get("remove")) for e in entries if "add" in e or "remove" in e]
    assert changes and all(c["dataChange"] is False for c in changes)

    # Nothing left to do for the same data: a second round finds no unclustered files.
    assert compactor.plan().groups == [] or all(g.reason.startswith("merge") for g in compactor.plan().groups)


def test_a_value_heavier_than_a_file_is_spread_over_several_files(spark, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    table = tmp_path / "t"
    # Extreme brand skew: a few brands hold most rows; one partition so all rows meet in one group.
    config = generator_config(table, rows=20_000, per_batch=2_500, **{"source.generator.brand_skew": "3.0",
                              "table.partition_by": "[]"})  # fmt: skip
    fill(spark, config)
    Compactor(config, spark=spark).run_once()
    actions = pa.table(DeltaTable(str(table)).get_add_actions(flatten=True))
    rows = actions["num_records"].to_pylist()
    top = Counter(read_delta(table)["p_brand"].to_pylist()).most_common(1)[0]
    lows, highs = actions["min.p_brand"].to_pylist(), actions["max.p_brand"].to_pylist()
    holding_top = [n for n, lo, hi in zip(rows, lows, highs, strict=True) if lo <= top[0] <= hi]
    assert top[1] > 2 * max(rows) / 2  # the value alone is bigger than a file
    assert len(holding_top) >= 2 and max(rows) <= 2 * sum(rows) / len(rows) + 1


def test_second_compactor_of_the_same_files_conflicts_and_commits_nothing(spark, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    table = tmp_path / "t"
    config = generator_config(table, rows=12_000, per_batch=3_000)
    fill(spark, config)
    before = read_delta(table)
    first, second = Compactor(config, spark=spark), Compactor(config, spark=spark)
    group = first.plan().groups[0]
    same = next(g for g in second.plan().groups if g.files == group.files)
    sketches = first.sketches()
    won = first.compact_group(group, sketches)
    lost = second.compact_group(same, sketches)
    assert won.result == "committed"
    assert lost.result == "conflict" and "removed by another commit" in lost.message
    assert row_multiset(read_delta(table)) == row_multiset(before)
    # the loser's output files were deleted: every parquet file on disk is referenced
    referenced = set(DeltaTable(str(table)).get_add_actions(flatten=True).column("path").to_pylist())
    on_disk = {str(p.relative_to(table)) for p in table.rglob("part-g*.parquet")}
    assert on_disk <= referenced


def stream_in_subprocess(table: Path) -> list[str]:
    """Fill ``table`` with 9,000 generator rows by a `lakecluster stream` process; its CLI args."""
    args = [f"--set=table.path={table}", *[f"--set={k}={v}" for k, v in SMALL.items()]]
    subprocess.run(lakecluster_cmd(*args, "--set=source.generator.max_rows=9000",
                                   "--set=source.generator.max_rows_per_trigger=3000", "stream", "--available-now"),
                   check=True, env=subprocess_env(), capture_output=True)  # fmt: skip
    return args


def test_two_compactor_processes_at_once_never_duplicate_rows(tmp_path: Path) -> None:
    table = tmp_path / "t"
    args = stream_in_subprocess(table)
    before = read_delta(table)
    procs = [subprocess.Popen(lakecluster_cmd(*args, "compact", "--once"), env=subprocess_env(),
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(2)]  # fmt: skip
    outs = [p.communicate(timeout=300) for p in procs]
    codes = [p.returncode for p in procs]
    assert set(codes) <= {0, 3}, outs  # 3: finished with conflicts
    assert row_multiset(read_delta(table)) == row_multiset(before)
    text = "".join(o for o, _ in outs)
    # Both planned the same groups from the same snapshot: each group was committed once.
    assert "conflict" in text


def test_compactor_killed_before_commit_leaves_table_intact_and_leftovers_are_removed(tmp_path: Path) -> None:
    table = tmp_path / "t"
    args = stream_in_subprocess(table)
    before = read_delta(table)
    version = DeltaTable(str(table)).version()
    crashed = subprocess.run(lakecluster_cmd(*args, "compact", "--once"), capture_output=True,
                             env=subprocess_env(LAKECLUSTER_TEST_CRASH_AT="compaction_before_commit"))  # fmt: skip
    assert crashed.returncode == 137, crashed.stderr[-2000:]
    assert DeltaTable(str(table)).version() == version
    assert row_multiset(read_delta(table)) == row_multiset(before)
    leftovers = list(table.rglob("part-g*.parquet"))
    assert leftovers, "the killed rewrite should have written files before dying"

    done = subprocess.run(lakecluster_cmd(*args, "compact", "--once"), capture_output=True, env=subprocess_env())
    assert done.returncode == 0, done.stderr[-2000:]
    assert not [p for p in leftovers if p.exists()]
    assert row_multiset(read_delta(table)) == row_multiset(before)


def test_stream_and_compactor_side_by_side_on_kafka(spark, broker: Broker, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    topic = "compact-live"
    broker.create_topic(topic, 3)
    table = tmp_path / "t"
    cfg_file = kr.write_config(tmp_path / "c.toml", bootstrap=broker.bootstrap, topic=topic, table=table,
                               max_offsets=150)  # fmt: skip
    config = load_config(cfg_file, overrides={**SMALL, "compaction.target_file_bytes": "20000",
                                              "compaction.min_file_bytes": "10000"}, environ={})  # fmt: skip
    stream = StreamJob(config, spark=spark)
    compactor = Compactor(config, spark=spark)
    produced: list[kr.Produced] = []
    stream_thread = threading.Thread(target=stream.run)
    stream_thread.start()
    compactions: list = []

    def compact_loop() -> None:
        while not compactor.stopping:
            try:
                compactions.extend(compactor.run_once())
            except NoBoundariesError:
                pass  # the stream has not committed its first batch yet; `run_forever` waits the same way
            except Exception as e:
                compactions.append(e)
                return
            time.sleep(0.5)

    compactor_thread = threading.Thread(target=compact_loop)
    try:
        for wave in range(4):
            records = kr.build(wave * 1000, 250, partitions=3, seed=wave, with_malformed=False)
            broker.produce(topic, [(r.partition, r.value) for r in records])
            produced.extend(records)
            if wave == 0:
                time.sleep(8)
                compactor_thread.start()
            time.sleep(6)
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and read_delta(table).num_rows < len(produced):
            time.sleep(1)
        time.sleep(3)
    finally:
        compactor.request_stop()
        if compactor_thread.is_alive():
            compactor_thread.join(timeout=300)
        stream.request_stop()
        stream_thread.join(timeout=120)
    errors = [c for c in compactions if isinstance(c, Exception)]
    assert not errors, errors
    assert kr.table_rows(read_delta(table)) == kr.expected_rows(produced)
    committed = [c for c in compactions if c.result == "committed"]
    assert committed, "the compactor committed nothing while the stream ran"
    stream_files = sum(1 for v in range(DeltaTable(str(table)).version() + 1)
                       for e in log_entries(table, v) if "add" in e and e["add"]["dataChange"])  # fmt: skip
    assert len(DeltaTable(str(table)).file_uris()) < stream_files
    assert all(c.scanned_after <= c.scanned_before for c in committed)
