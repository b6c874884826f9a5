"""The layout loop (``compaction.auto_layout``): the compactor scores layouts on the captured
workload, shows the best in ``advise`` mode, and in ``apply`` mode adopts one only past both
guardrails (the gain, the daily rewrite budget), then re-clusters the table to it, with every row
once whatever else writes and compacts the table meanwhile."""

from __future__ import annotations

import itertools
import json
import subprocess
import threading
import time
from dataclasses import replace
from decimal import Decimal
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import DeltaTable

from lakecluster import metrics
from lakecluster.cli.report import collect
from lakecluster.cli.status import format_text, layout_status, table_status
from lakecluster.clustering import layout_fingerprint
from lakecluster.compaction.loop import Compactor
from lakecluster.compaction.planner import Group
from lakecluster.compaction.relayout import relayout_groups, within_budget
from lakecluster.config import CompactionConfig, Config
from lakecluster.layout.adoptions import Adoption, AdoptionStore
from lakecluster.layout.auto_layout import file_hits, fingerprint_of, pending
from lakecluster.stream.generator import generate
from lakecluster.stream.job import StreamJob
from lakecluster.stream.source import open_source
from lakecluster.table import LakeTable, parse_user_metadata
from lakecluster.table.live_files import DataFile
from lakecluster.workload.queries import Predicate, Query
from tests.conftest import duckdb_connection, lakecluster_cmd, read_delta, subprocess_env
from tests.generated_tables import generator_config
from tests.workload_records import record, write

pytestmark = pytest.mark.integration

ROWS = 9_000
NATION = [{"column": "c_nation", "type": "string", "op": "=", "value": "FRANCE"}]
QUANTITY = [{"column": "lo_quantity", "type": "int", "op": ">=", "value": 10},
            {"column": "lo_quantity", "type": "int", "op": "<=", "value": 12}]  # fmt: skip


def _sample(name: str, labels: dict[str, str] | None = None) -> float | None:
    return metrics.REGISTRY.get_sample_value(name, labels or {})


def _config(table: Path, **settings: str) -> Config:
    # The stream id fixed: a copy of the filled table keeps the stream's checkpoint, so a stream
    # started on it goes on where the fill stopped.
    return generator_config(table, rows=ROWS, per_batch=3_000, **{
        "table.partition_by": "[]", "stream.id": '"orders"', "vacuum.interval_s": "0",
        "compaction.auto_layout_sample_rows": "5000", "compaction.auto_layout_confirmations": "1",
        **settings})  # fmt: skip


def _capture(table: Path) -> None:
    """Two hours of dashboards filtering on nations and quantities, never the clustering columns."""
    t0 = time.time() * 1000 - 7_200_000
    lines = [record(t0 + i * 60_000, i, filters=NATION if i % 3 else QUANTITY, files_read=6) for i in range(120)]
    write(table, t0, lines)


def _table(spark, filled, tmp_path: Path, **settings: str) -> Config:  # type: ignore[no-untyped-def]
    """9,000 streamed rows, compacted once under the configured layout (s_city, c_city, p_brand),
    and a captured workload that layout serves badly."""
    base = _config(tmp_path / "t")
    filled(base)
    Compactor(base, spark=spark).run_once()
    _capture(tmp_path / "t")
    return _config(tmp_path / "t", **settings)


def _keys(rows: pa.Table) -> list[tuple[int, int]]:
    return sorted(zip(rows["lo_orderkey"].to_pylist(), rows["lo_linenumber"].to_pylist(), strict=True))


def test_advise_shows_the_recommendation_in_metrics_the_log_and_status(spark, filled, tmp_path: Path,
                                                                        caplog: pytest.LogCaptureFixture) -> None:  # type: ignore[no-untyped-def]  # fmt: skip
    config = _table(spark, filled, tmp_path)  # compaction.auto_layout defaults to advise
    compactor = Compactor(config, spark=spark)
    assert compactor.auto.due(config)
    with caplog.at_level("INFO", logger="lakecluster.layout.auto_layout"):
        compactor.layout_loop()
    result = compactor.auto.last
    assert result is not None and result.scans == 120 and result.adopted is None
    assert result.decision.startswith("advise only")
    gain = _sample("lakecluster_auto_layout_predicted_gain_ratio")
    assert gain is not None and gain == result.gain and gain >= 0.2
    info = dict(metrics.AUTO_LAYOUT_RECOMMENDATION._value)  # type: ignore[attr-defined]
    assert set(info["clustering_columns"].split(",")) <= {"c_nation", "lo_quantity"} and info["mode"] == "advise"
    assert _sample("lakecluster_auto_layout_files_read_estimate", {"layout": "recommended"}) < _sample(
        "lakecluster_auto_layout_files_read_estimate", {"layout": "current"})  # type: ignore[operator]
    assert (_sample("lakecluster_auto_layout_evaluation_seconds") or 0) > 0
    lines = [r.getMessage() for r in caplog.records if "recommended clustering columns" in r.getMessage()]
    assert len(lines) == 1
    compactor.auto.last_time = None  # scored again: the same recommendation, no second line
    compactor.layout_loop()
    assert len([r for r in caplog.records if "recommended clustering columns" in r.getMessage()]) == 1
    assert not compactor.auto.due(config)  # the next one waits for the interval and 20 x its cost
    last = compactor.auto.last_time
    assert last is not None and compactor.auto.last_cost is not None
    # max_cost_share 0.05: 20 x the cost. A millisecond's slack: last + wait - last may round below wait
    later = last + max(config.compaction.auto_layout_interval_s, 20 * compactor.auto.last_cost)
    assert not compactor.auto.due(config, now=later - 1) and compactor.auto.due(config, now=later + 1e-3)
    assert AdoptionStore(LakeTable(config)).latest() is None  # advise changes nothing
    assert compactor.config.table.clustering_columns == ("s_city", "c_city", "p_brand")

    args = [f"--set=table.path={config.table.path}", "--set=table.partition_by=[]"]
    status = subprocess.run(lakecluster_cmd(*args, "--json", "status"), capture_output=True, text=True,
                            env=subprocess_env(), timeout=120)  # fmt: skip
    assert status.returncode == 0, status.stderr
    layout = json.loads(status.stdout)["layout"]
    assert layout["mode"] == "advise" and layout["adoption"] is None
    assert layout["recommendation"]["recommended"]["clustering_columns"] == info["clustering_columns"].split(",")
    text = subprocess.run(lakecluster_cmd(*args, "status"), capture_output=True, text=True, env=subprocess_env(),
                          timeout=120).stdout  # fmt: skip
    assert "layout     s_city, c_city, p_brand (configured); compaction.auto_layout = advise" in text
    assert "per column of the configured layout: " in text
    assert "recommended (" in text and "advise only" in text


def test_apply_adopts_a_layout_only_past_both_guardrails_and_re_clusters_to_it(spark, filled,
                                                                                tmp_path: Path) -> None:  # type: ignore[no-untyped-def]  # fmt: skip
    config = _table(spark, filled, tmp_path, **{"compaction.auto_layout": '"apply"'})
    rows_before = _keys(read_delta(config.table.path))
    store = AdoptionStore(LakeTable(config))

    # 1. The gain is below compaction.auto_layout_min_gain: nothing adopted.
    picky = replace(config, compaction=replace(config.compaction, auto_layout_min_gain=0.99))
    result = Compactor(picky, spark=spark).auto.evaluate(picky, None, *_live(picky))
    assert result.gain >= 0.2 and result.adopted is None
    assert "below compaction.auto_layout_min_gain (99%)" in result.decision and store.latest() is None

    # 2. The gain is enough, but the day's budget has no room for the re-cluster's first group.
    poor = replace(config, compaction=replace(config.compaction, rewrite_budget_bytes_per_day=1000))
    result = Compactor(poor, spark=spark).auto.evaluate(poor, None, *_live(poor))
    assert result.adopted is None and "does not fit" in result.decision and store.latest() is None
    assert result.recluster_bytes > 1000 and result.budget["limit"] == 1000

    # 3. Both pass: adopted, and the compactor re-clusters every compacted file to it.
    compactor = Compactor(config, spark=spark)
    compactor.layout_loop()
    adoption = store.latest()
    assert adoption is not None and adoption.number == 1 and compactor.auto.last.adopted == 1  # type: ignore[union-attr]
    assert set(adoption.clustering_columns) <= {"c_nation", "lo_quantity"}
    assert compactor.config.table.clustering_columns == adoption.clustering_columns
    assert compactor.fingerprint == adoption.fingerprint
    assert _sample("lakecluster_auto_layout_adoption") == 1
    # The default budget, half the table's bytes a day, lets the first round re-cluster part of it,
    # then the re-cluster pauses until the window moves on.
    assert any(r.group.relayout and r.result == "committed" for r in compactor.run_once())
    assert not any(r.group.relayout for r in compactor.run_once())  # paused
    budget = _sample("lakecluster_relayout_budget_bytes")
    assert budget is not None and 0 < (_sample("lakecluster_relayout_budget_used_bytes") or 0) <= budget
    assert _sample("lakecluster_relayout_budget_exhausted") == 1
    left = len(pending(_live(compactor.config)[0], adoption.fingerprint))
    assert left and _sample("lakecluster_relayout_pending_files") == left
    # A larger budget (reloaded): the re-cluster goes on and ends.
    compactor.base_config = replace(config, compaction=replace(config.compaction, rewrite_budget_bytes_per_day=10**9))
    compactor._apply_layout()
    for _ in range(10):
        compactor.run_once()
        if not len(pending(_live(compactor.config)[0], adoption.fingerprint)):
            break
    assert _sample("lakecluster_relayout_budget_exhausted") == 0
    live = DeltaTable(config.table.path).file_uris()
    assert all(f"-l{adoption.fingerprint}-" in p for p in live if "part-g" in p)
    assert _keys(read_delta(config.table.path)) == rows_before  # every row exactly once
    steps = [meta for meta in _metadata(config) if meta.get("adoption") == "1"]
    assert steps and all(m["adoption_id"] == adoption.id and "relayout_files_left" in m for m in steps)
    used = compactor.auto.ledger.used(DeltaTable(config.table.path).version(), time.time() - 86_400)
    assert used > 0  # the re-cluster's bytes count against the day's budget, from the log

    # A restarted compactor, `status` and `history` agree on the layout in effect.
    assert Compactor(config, spark=spark).config.table.clustering_columns == adoption.clustering_columns
    handle = LakeTable(config)
    status = layout_status(handle, _live(config)[0], handle.layout(), handle.adoption()[0])
    assert status["in_effect"]["adopted"] and status["adoption"]["id"] == adoption.id
    assert status["in_effect"]["clustering_columns"] == list(adoption.clustering_columns)
    assert status["relayout"] == {"files_left": 0, "bytes_left": 0}
    history = subprocess.run(lakecluster_cmd(f"--set=table.path={config.table.path}", "--json", "history"),
                             capture_output=True, text=True, env=subprocess_env(), timeout=120)  # fmt: skip
    data = json.loads(history.stdout)
    assert [a["number"] for a in data["adoptions"]] == [1]
    assert any("re-cluster to adopted layout 1" in v["service"] for v in data["versions"])


def test_a_much_better_layout_replaces_an_unfinished_adoption_and_a_little_better_one_waits(spark, filled,
                                                                                            tmp_path: Path) -> None:  # type: ignore[no-untyped-def]  # fmt: skip
    # Yesterday's dashboards filtered on nations and quantities; the table adopted a layout for
    # them and its re-cluster paused on the budget (half the table a day). Today's filter on brands.
    base = _config(tmp_path / "t")
    filled(base)
    Compactor(base, spark=spark).run_once()
    hour, now = 3_600_000, time.time() * 1000
    write(tmp_path / "t", now - 30 * hour, [record(now - 30 * hour + i * 60_000, i, filters=NATION if i % 3 else
                                                   QUANTITY, files_read=6) for i in range(120)])  # fmt: skip
    config = _config(tmp_path / "t", **{"compaction.auto_layout": '"apply"',
                                        "compaction.auto_layout_half_life_s": "3600"})  # fmt: skip
    rows_before = _keys(read_delta(config.table.path))
    store = AdoptionStore(LakeTable(config))
    compactor = Compactor(config, spark=spark)
    compactor.layout_loop()
    first = store.latest()
    assert first is not None and first.number == 1 and set(first.clustering_columns) <= {"c_nation", "lo_quantity"}
    compactor.run_once()
    assert len(pending(_live(compactor.config)[0], first.fingerprint)), "the re-cluster should have paused"
    brand = [{"column": "p_brand", "type": "string", "op": "=", "value": "MFGR#1213"}]
    write(tmp_path / "t", now - 2 * hour, [record(now - 2 * hour + i * 60_000, 1000 + i, filters=brand, files_read=6)
                                           for i in range(120)], seq=2)  # fmt: skip

    def scored(min_gain: float):  # type: ignore[no-untyped-def]
        effect = replace(compactor.config, compaction=replace(compactor.config.compaction,
                                                              auto_layout_min_gain=min_gain))  # fmt: skip
        return compactor.auto.evaluate(effect, compactor.adoption, *_live(effect))

    measured = scored(0.99)
    assert "p_brand" in measured.adoptable["clustering_columns"] and measured.gain >= 0.36  # type: ignore[index]
    # Past compaction.auto_layout_min_gain, but short of what two adoptions in a row gain: it waits.
    waiting = scored(round(0.9 * measured.gain, 4))
    assert waiting.adopted is None and store.latest() == first
    assert "still has" in waiting.decision and "replaces an unfinished adoption" in waiting.decision
    # Past that (the default min_gain 0.2 needs 36 %), with room in the budget (layout 1's re-cluster
    # used the day's): adopted, replacing layout 1 and its re-cluster.
    compactor.base_config = replace(config, compaction=replace(config.compaction, rewrite_budget_bytes_per_day=10**9))
    compactor._apply_layout()
    compactor.auto.last_time = None
    compactor.layout_loop()
    second = store.latest()
    assert compactor.auto.last is not None and compactor.auto.last.adopted == 2, compactor.auto.last.decision
    assert second is not None and second.number == 2 and "replaces" not in compactor.auto.last.decision
    assert "p_brand" in second.clustering_columns and compactor.fingerprint == second.fingerprint
    for _ in range(10):
        compactor.run_once()
        if not len(pending(_live(compactor.config)[0], second.fingerprint)):
            break
    assert not len(pending(_live(compactor.config)[0], second.fingerprint))
    assert _keys(read_delta(config.table.path)) == rows_before  # every row exactly once


def test_the_budget_counts_the_re_cluster_over_its_window(spark, filled, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    config = _table(spark, filled, tmp_path, **{"compaction.auto_layout": '"apply"'})
    compactor = Compactor(config, spark=spark)
    compactor.layout_loop()
    assert compactor.adoption is not None
    assert any(r.group.relayout and r.result == "committed" for r in compactor.run_once())
    files, version = _live(compactor.config)
    used = compactor.auto.budget(compactor.config, files, version)["used"]
    assert used > 0
    # An hour from now the day's window still holds the re-cluster; a window of half an hour does not.
    later = time.time() + 3600
    assert compactor.auto.budget(compactor.config, files, version, now=later)["used"] == used
    short = replace(compactor.config, compaction=replace(compactor.config.compaction, rewrite_budget_window_s=1800.0))
    narrow = compactor.auto.budget(short, files, version, now=later)
    assert narrow["used"] == 0
    # The budget is per day: a window of half an hour allows a 48th of it.
    day = compactor.auto.budget(compactor.config, files, version, now=later)
    assert abs(narrow["limit"] - day["limit"] / 48) <= 1
    # The window widened again (a configuration reload): the re-cluster's bytes count again.
    assert day["used"] == used


def test_apply_adopts_only_a_layout_the_scorings_agree_on_in_a_row(spark, filled, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    config = _table(spark, filled, tmp_path, **{"compaction.auto_layout": '"apply"',
                                                "compaction.auto_layout_confirmations": "2"})  # fmt: skip
    store = AdoptionStore(LakeTable(config))
    compactor = Compactor(config, spark=spark)
    compactor.layout_loop()
    first = compactor.auto.last
    assert first is not None and first.gain >= 0.2 and first.adopted is None and store.latest() is None
    assert first.decision.startswith("not adopted yet: ") and "in 1 scoring(s) in a row, of the 2" in first.decision
    # A scoring whose best layout falls short of the gain breaks the streak, and so does one that
    # ends otherwise (here: advise only).
    for other in (replace(config, compaction=replace(config.compaction, auto_layout_min_gain=0.99)),
                  replace(config, compaction=replace(config.compaction, auto_layout="advise"))):  # fmt: skip
        compactor.auto.evaluate(other, None, *_live(other))
        compactor.auto.last_time = None
        compactor.layout_loop()
        assert compactor.auto.last.adopted is None and "in 1 scoring(s) in a row" in compactor.auto.last.decision  # type: ignore[union-attr]
    # The same best layout again, right after: adopted.
    compactor.auto.last_time = None
    compactor.layout_loop()
    adopted = store.latest()
    assert compactor.auto.last.adopted == 1 and adopted is not None  # type: ignore[union-attr]
    assert list(adopted.clustering_columns) == first.adoptable["clustering_columns"]  # type: ignore[index]


def test_status_measures_the_clustering_depth_on_the_layout_in_effect(spark, filled, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    config = _table(spark, filled, tmp_path, **{"compaction.auto_layout": '"apply"'})
    configured = table_status(LakeTable(config), open_source(config))
    assert set(configured["clustering"]) == {"s_city", "c_city", "p_brand"}
    assert configured["clustering_layout"] == {"clustering_columns": ["s_city", "c_city", "p_brand"],
                                               "adoption": None, "without_sketches": []}  # fmt: skip
    assert "per column of the configured layout: s_city " in format_text(configured)

    # A layout adopted (as a compactor adopts it), before any compactor built its columns' sketches.
    columns = ("c_nation", "lo_quantity")
    fingerprint = layout_fingerprint(columns, dict.fromkeys(columns, 1.0), config.compaction.curve)
    _, won = AdoptionStore(LakeTable(config)).adopt(
        Adoption(1, "a1", columns, (1.0, 1.0), fingerprint, fingerprint_of(config), time.time()))
    assert won
    data = table_status(LakeTable(config), open_source(config))
    assert data["clustering_layout"] == {"clustering_columns": list(columns), "adoption": 1,
                                         "without_sketches": list(columns)}  # fmt: skip
    assert data["clustering"] == {} and data["layout"]["in_effect"]["adopted"]
    assert ("per column of adopted layout 1: no boundary sketches of c_nation, lo_quantity yet"
            in format_text(data))  # fmt: skip

    # The compactor's first round on it builds them: status and the compactor's gauges agree.
    compactor = Compactor(config, spark=spark)
    assert compactor.config.table.clustering_columns == columns
    compactor.sketches()
    compactor.monitor.observe()
    data = table_status(LakeTable(config), open_source(config))
    assert set(data["clustering"]) == set(columns) and data["clustering_layout"]["without_sketches"] == []
    for c in columns:
        gauge = _sample("lakecluster_point_query_files_estimate", {"column": c})
        assert gauge is not None and data["clustering"][c]["point_query_files"] == round(gauge, 1)
    depths = ", ".join(f"{c} {data['clustering'][c]['point_query_files']:g}" for c in columns)
    assert f"per column of adopted layout 1: {depths}" in format_text(data)
    assert set(collect(LakeTable(config), open_source(config))["key_ranges"]) == set(columns)  # `report` too

    # Not in effect: the configured layout's depth again, and status says why.
    advise = replace(config, compaction=replace(config.compaction, auto_layout="advise"))
    data = table_status(LakeTable(advise), open_source(advise))
    assert set(data["clustering"]) == {"s_city", "c_city", "p_brand"} and data["clustering_layout"]["adoption"] is None
    assert "adopted layout 1 (c_nation, lo_quantity) is not in effect: compaction.auto_layout is not apply" \
        in format_text(data)  # fmt: skip
    # An adoption the compactor refuses (a column the configuration no longer has): not in effect either.
    AdoptionStore(LakeTable(config)).adopt(Adoption(2, "a2", ("gone",), (1.0,), "fx", fingerprint, time.time()))
    data = table_status(LakeTable(config), open_source(config))
    assert data["clustering_layout"]["adoption"] is None and set(data["clustering"]) == {"s_city", "c_city", "p_brand"}
    assert "adopted layout 2 (gone) is not in effect: its columns are not data columns" in format_text(data)
    assert Compactor(config, spark=spark).config.table.clustering_columns == ("s_city", "c_city", "p_brand")


def _live(config: Config) -> tuple[pa.Table, int]:
    version, files = LakeTable(config).live_files().snapshot()
    return files, version


def _metadata(config: Config) -> list[dict]:
    return [parse_user_metadata(h.get("userMetadata")) or {} for h in DeltaTable(config.table.path).history()]


def test_racing_compactors_adopt_one_layout(tmp_path: Path) -> None:
    table = LakeTable.at(str(tmp_path / "t"))
    stores = [AdoptionStore(table) for _ in range(2)]
    barrier = threading.Barrier(2)
    results: list[tuple[Adoption, bool]] = []

    def adopt(i: int) -> None:
        mine = Adoption(1, f"id{i}", (f"c{i}",), (1.0,), f"f{i}", "old", time.time())
        barrier.wait()
        results.append(stores[i].adopt(mine))

    threads = [threading.Thread(target=adopt, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(won for _, won in results) == [False, True]
    assert len({winner.id for winner, _ in results}) == 1  # the loser follows the winner
    assert [a.number for a in stores[0].all()] == [1]
    assert sorted(p.name for p in (tmp_path / "t" / "_lakecluster" / "layout").iterdir()) == ["adoption-00000001.json"]
    # A compactor that comes later with number 1 (it scored on an old listing) loses, whatever the timing.
    winner = stores[0].latest()
    late, won = AdoptionStore(table).adopt(Adoption(1, "late", ("x",), (1.0,), "fx", "old", time.time()))
    assert not won and late == winner and stores[1].latest() == winner


def test_racing_compactors_adopt_one_layout_on_s3(s3, s3_prefix: str) -> None:  # type: ignore[no-untyped-def]
    from lakecluster.config import StorageConfig

    table = LakeTable.at(f"{s3_prefix}t", storage=StorageConfig(**s3.storage_settings()))
    stores = [AdoptionStore(table) for _ in range(2)]
    barrier = threading.Barrier(2)
    results: list[tuple[Adoption, bool]] = []

    def adopt(i: int) -> None:
        barrier.wait()
        results.append(stores[i].adopt(Adoption(1, f"id{i}", (f"c{i}",), (1.0,), f"f{i}", "old", time.time())))

    threads = [threading.Thread(target=adopt, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(won for _, won in results) == [False, True]
    assert len({winner.id for winner, _ in results}) == 1
    latest = stores[1].latest()
    assert latest is not None and latest.id == next(w.id for w, won in results if won)


def test_a_writer_that_checked_before_another_adopted_cannot_replace_that_adoption_on_s3(
    s3, s3_prefix: str, monkeypatch: pytest.MonkeyPatch
) -> None:  # type: ignore[no-untyped-def]
    """B finds number 1 free; A then adopts number 1 from start to end; only then does B write. The
    conditional create refuses B's PUT however long after its check it comes, so B follows A and
    A's file stays. (Check, PUT, wait and read back let B replace A's file here, and told both they
    had won.)"""
    from lakecluster.config import StorageConfig

    table = LakeTable.at(f"{s3_prefix}t", storage=StorageConfig(**s3.storage_settings()))
    a_store, b_store = AdoptionStore(table), AdoptionStore(table)
    a = Adoption(1, "a", ("ca",), (1.0,), "fa", "old", time.time())
    b = Adoption(1, "b", ("cb",), (1.0,), "fb", "old", time.time())
    read, checks, a_result = b_store._read, [], []

    def check_then_let_a_adopt(path: str) -> dict | None:
        found = read(path)
        if not checks:  # B's check before its write: A adopts between the two
            checks.append(found)
            a_result.append(a_store.adopt(a))
        return found

    monkeypatch.setattr(b_store, "_read", check_then_let_a_adopt)
    b_result = b_store.adopt(b)
    assert checks == [None], "B checked before A wrote"
    assert a_result == [(a, True)]
    assert b_result == (a, False), "B lost to A and follows A's layout"
    assert a_store.latest() == a and [x.id for x in a_store.all()] == ["a"]
    with s3.filesystem().open_input_stream(f"{a_store.folder}/adoption-00000001.json") as f:
        assert json.loads(f.read())["id"] == "a"
    # The create alone decides: B's create of the number A holds is refused, A's file left as it was.
    assert not b_store.create(1, json.dumps(b.as_dict()).encode())
    assert a_store.latest() == a


def test_the_re_cluster_takes_the_files_the_workload_reads_most_first_within_the_budget() -> None:
    actions = pa.table({"path": ["a", "b", "c"], "min.q": [0, 10, 20], "max.q": [9, 19, 29],
                        "partition.y": ["1", "1", "2"]})  # fmt: skip
    hot = Query(1, "q <= 12", (Predicate("q", "range", high=Decimal(12)),), weight=10)
    cold = Query(2, "q = 25 AND y = 2", (Predicate("q", "eq", (Decimal(25),)), Predicate("y", "eq", (Decimal(2),))))
    hits = file_hits(actions, [hot, cold])
    assert hits == {"a": 10.0, "b": 10.0, "c": 1.0}
    files = [DataFile(p, 100, 10, (), 1, "r") for p in ("c", "b", "a")]
    one_each = replace(CompactionConfig(), max_group_bytes=100)
    groups = relayout_groups(files, one_each, priority={"a": 10.0, "b": 5.0, "c": 1.0})
    assert [g.files[0].path for g in groups] == ["a", "b", "c"] and all(g.relayout for g in groups)
    kept, cut = within_budget([*groups, Group((), (files[0],), 1, "planner")], 250)
    assert [g.files[0].path for g in kept] == ["a", "b", "c"] and not kept[-1].relayout and cut


def test_a_layout_change_beside_the_stream_and_a_second_compactor_keeps_every_row_once(spark, filled,
                                                                                        tmp_path: Path) -> None:  # type: ignore[no-untyped-def]  # fmt: skip
    # Groups of a few files: the re-cluster takes several commits, between the stream's.
    config = _table(spark, filled, tmp_path, **{"compaction.auto_layout": '"apply"',
                                                "compaction.max_groups_per_run": "2",
                                                "compaction.max_group_bytes": "180000",
                                                "compaction.rewrite_budget_bytes_per_day": "1000000000"})  # fmt: skip
    first, second = Compactor(config, spark=spark), Compactor(config, spark=spark)

    # Both score at once; one layout is adopted, the other compactor follows it.
    threads = [threading.Thread(target=c.layout_loop) for c in (first, second)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    adoptions = AdoptionStore(LakeTable(config)).all()
    assert [a.number for a in adoptions] == [1]
    assert sum(c.auto.last.adopted == 1 for c in (first, second)) == 1  # type: ignore[union-attr]
    second.follow_adoption()
    assert first.fingerprint == second.fingerprint == adoptions[0].fingerprint

    # The stream goes on from its checkpoint (copied with the table, the stream id fixed): small
    # batches on a short trigger, while both compactors re-cluster to the adopted layout.
    g = config.source.generator
    streamed = replace(config, source=replace(config.source, generator=replace(
        g, max_rows=ROWS + 30_000, max_rows_per_trigger=400, rows_per_second=800)),
        stream=replace(config.stream, trigger_interval_s=0.3))  # fmt: skip
    stream = StreamJob(streamed, spark=spark)
    failures: list[BaseException] = []

    def run_stream() -> None:
        try:
            stream.run()
        except BaseException as e:  # reported by the assertion below
            failures.append(e)

    def committed() -> int:
        return sum(1 for r in stream.reports if not r.skipped and r.rows)

    streaming = threading.Thread(target=run_stream)
    streaming.start()
    runners = [threading.Thread(target=c.run_forever) for c in (first, second)]
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and not committed() and not failures:
            time.sleep(0.2)
        assert committed(), f"the stream committed no batch in 120 s: {failures}"
        for r in runners:
            r.start()
        # Until the re-cluster is done and the stream committed after its first step.
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline and not failures and (
                len(pending(_live(config)[0], adoptions[0].fingerprint))
                or not _streamed_beside(_commits(config))):  # fmt: skip
            time.sleep(0.3)
    finally:
        stream.request_stop()  # the batch in flight is finished, then the query stops
        streaming.join(60)
        for c in (first, second):
            c.request_stop()
        for r in runners:
            if r.is_alive():
                r.join(60)
    assert not streaming.is_alive() and not any(r.is_alive() for r in runners)
    assert not failures and stream.restarts == 0, failures
    assert not len(pending(_live(config)[0], adoptions[0].fingerprint)), "the re-cluster did not finish in 90 s"

    # What the stream committed, from its commits' metadata: offset ranges [start, end) of the
    # generator, one after the other from 0 (the fill) to the last; the generator's rows are a
    # pure function of their offset, so those are the rows the table must hold, each once.
    commits = _commits(config)
    assert _streamed_beside(commits), "the stream committed nothing after the re-cluster's first step"
    ranges = [((m["start_offsets"] or {"rows": 0})["rows"], m["offsets"]["rows"]) for _, m in commits
              if m.get("stream") == "orders"]  # fmt: skip
    assert ranges[0][0] == 0 and all(a[1] == b[0] for a, b in itertools.pairwise(ranges)), ranges
    end = ranges[-1][1]
    mine = [r for r in stream.reports if not r.skipped and r.rows]
    assert end - ROWS == sum(r.rows for r in mine) > 0 and json.loads(mine[-1].offsets or "{}") == {"rows": end}

    expected = pa.Table.from_batches([generate(0, end, config.source.generator, config.table.columns)])
    rows = read_delta(config.table.path)  # delta-rs
    assert rows.num_rows == end
    # Every column of every row as generated (the table's schema only differs in nullability).
    assert rows.select(expected.column_names).sort_by("lo_orderkey").cast(expected.schema).equals(expected)
    duck = duckdb_connection().execute(
        f"SELECT lo_orderkey, lo_linenumber FROM delta_scan('{config.table.path}')").fetchall()
    assert sorted(duck) == _keys(expected)  # DuckDB's own Delta reader


def _commits(config: Config) -> list[tuple[int, dict]]:
    """Every commit's version and lakecluster metadata, oldest first."""
    return sorted(((int(h["version"]), parse_user_metadata(h.get("userMetadata")) or {})
                   for h in DeltaTable(config.table.path).history()), key=lambda c: c[0])  # fmt: skip


def _streamed_beside(commits: list[tuple[int, dict]]) -> bool:
    """Whether the stream committed after the re-cluster to adopted layout 1 began."""
    relaid = [v for v, m in commits if m.get("adoption") == "1"]
    return bool(relaid) and any(v > min(relaid) and m.get("stream") == "orders" for v, m in commits)


def test_turning_parents_off_is_another_layout_and_on_keeps_the_files_of_before(tmp_path: Path) -> None:
    """``compact --full`` and an adoption's re-clustering find the files of another layout by the
    fingerprint in their names: with ``group_by_parents`` off, files cut by their parents are off
    the layout; on (the default), the id is the one files carried before the setting existed."""
    on = _config(tmp_path / "t")
    off = _config(tmp_path / "t", **{"compaction.group_by_parents": "false"})
    c = on.compaction
    assert fingerprint_of(on) != fingerprint_of(off)
    assert fingerprint_of(on) == layout_fingerprint(on.table.clustering_columns, c.weights(), c.curve)
