"""The captured workload as tune's queries (``workload.captured``): scans grouped by their
predicates into queries weighted by their scans, ranked by what they read now, and when the
capture is too little to decide on."""

from __future__ import annotations

import time
from dataclasses import replace
from decimal import Decimal
from pathlib import Path

import numpy as np
import pyarrow as pa

from lakecluster.config import CompactionConfig, WorkloadConfig
from lakecluster.layout.model import Candidate, WorkloadModel
from lakecluster.table import LakeTable
from lakecluster.workload.capture import read_capture
from lakecluster.workload.captured import captured_queries, describe, effective_scans, too_little
from lakecluster.workload.queries import Predicate, Query
from tests.workload_records import record, write

NOW = time.time() * 1000
CITY = {"column": "c_city", "type": "string", "op": "="}
QTY = [{"column": "q", "type": "int", "op": ">=", "value": 10}, {"column": "q", "type": "int", "op": "<", "value": 20}]


def _capture(tmp_path: Path, records: list[dict]):  # type: ignore[no-untyped-def]
    write(tmp_path, NOW - 1000, records)
    return read_capture(LakeTable.at(str(tmp_path)), WorkloadConfig(), now=NOW / 1000)


def test_scans_with_the_same_predicates_are_one_query_weighted_by_its_scans(tmp_path: Path) -> None:
    t0 = NOW - 7_200_000
    records = [record(t0 + i, i, filters=[{**CITY, "value": "A"}], files_read=2) for i in range(3)]
    records += [record(t0 + 10 + i, 10 + i, filters=QTY, files_read=30) for i in range(2)]
    records += [record(t0 + 20, 20, filters=[{**CITY, "value": "B"}], files_read=None)]  # other value: other query
    records += [record(t0 + 30, 30, filters=[{"column": "gone", "type": "int", "op": "=", "value": 1}])]
    capture = _capture(tmp_path, records)

    queries = captured_queries(capture.scans, ["c_city", "q"])

    # Costliest now first: 2 scans x 30 files, then 3 x 2; then those without files read.
    assert [(q.query.text, q.scans, q.query.weight) for q in queries] == [
        ("q BETWEEN 10 AND 20", 2, 2.0), ("c_city = 'A'", 3, 3.0), ("(no filter a layout can use)", 1, 1.0),
        ("c_city = 'B'", 1, 1.0)]
    assert [q.query.line for q in queries] == [1, 2, 3, 4]
    assert queries[0].query.predicates == (Predicate("q", "range", low=Decimal(10), high=Decimal(20)),)
    assert queries[0].mean_files_read == 30 and queries[3].mean_files_read is None and queries[3].cost == 0
    assert queries[1].shape == "c_city ="


def test_the_model_scores_the_weighted_mean_and_ranks_columns_by_weighted_use() -> None:
    sample = pa.table({"a": pa.array(np.arange(1000) % 50), "b": pa.array(np.arange(1000) // 20)})
    weights = np.ones(1000)
    qa = Query(1, "a", (Predicate("a", "eq", (Decimal(3),)),))
    qb = Query(2, "b", (Predicate("b", "eq", (Decimal(3),)),))
    plain = WorkloadModel([qa, qb, qb], sample, weights, 100 * 60_000, 60_000)
    weighted = WorkloadModel([qa, replace(qb, weight=2.0)], sample, weights, 100 * 60_000, 60_000)
    one = Candidate(("a",), (1.0,), ())
    # A query repeated twice in a file counts as one query of weight 2.
    assert plain.score(one).mean_files_read == weighted.score(one).mean_files_read
    assert list(weighted.usage()) == ["b", "a"] and weighted.usage()["b"] == 2.0


def test_too_little_to_decide_says_why(tmp_path: Path) -> None:
    cfg = CompactionConfig(auto_layout_min_scans=3, auto_layout_min_span_s=600)
    t0 = NOW - 7_200_000
    few = _capture(tmp_path / "few", [record(t0 + i, i, filters=[{**CITY, "value": "A"}]) for i in range(2)])
    assert "2 scan(s), fewer than compaction.auto_layout_min_scans (3)" in str(too_little(few, [], cfg))
    burst = _capture(tmp_path / "burst", [record(t0 + i, i, filters=[{**CITY, "value": "A"}]) for i in range(5)])
    assert "less than compaction.auto_layout_min_span_s (10.0 min)" in str(too_little(burst, [], cfg))
    unfiltered = _capture(tmp_path / "none", [record(t0 + i * 300_000, i, filters=[]) for i in range(5)])
    queries = captured_queries(unfiltered.scans, ["c_city"])
    assert "no captured scan (of 5) filters on a column" in str(too_little(unfiltered, queries, cfg))
    enough = _capture(tmp_path / "ok", [record(t0 + i * 300_000, i, filters=[{**CITY, "value": "A"}])
                                        for i in range(5)])  # fmt: skip
    assert too_little(enough, captured_queries(enough.scans, ["c_city"]), cfg) is None


def test_predicates_read_back_as_a_where_clause() -> None:
    assert describe([Predicate("c", "eq", ("A", "O'B")), Predicate("q", "range", high=Decimal("2.5"))]) == (
        "c IN ('A', 'O''B') AND q <= 2.5")


def test_scans_weigh_less_with_age_so_a_changed_mix_counts_as_the_new_one(tmp_path: Path) -> None:
    # A day of the old mix (48 scans filtering on c_city), then the last 4 hours of the new one (8
    # scans on q): by count the old mix is 6 times the new; with a half-life of 2 hours the new mix
    # is the workload.
    hour = 3_600_000
    old = [record(NOW - 28 * hour + i * 1_800_000, i, filters=[{**CITY, "value": "A"}]) for i in range(48)]
    new = [record(NOW - 4 * hour + i * 1_800_000 + 1, 100 + i, filters=QTY) for i in range(8)]
    capture = _capture(tmp_path, old + new)

    counted = {q.query.text: q.query.weight for q in captured_queries(capture.scans, ["c_city", "q"])}
    assert counted == {"c_city = 'A'": 48.0, "q BETWEEN 10 AND 20": 8.0}
    decayed = {q.query.text: q.query.weight
               for q in captured_queries(capture.scans, ["c_city", "q"], half_life_s=7200)}  # fmt: skip
    # The newest scan weighs 1, one 2 hours older 0.5: the new mix's 8 scans, half an hour apart.
    newest = new[-1]["time_ms"]
    expected_new = sum(0.5 ** ((newest - r["time_ms"]) / 7_200_000) for r in new)
    expected_old = sum(0.5 ** ((newest - r["time_ms"]) / 7_200_000) for r in old)
    assert abs(decayed["q BETWEEN 10 AND 20"] - expected_new) < 1e-9
    assert abs(decayed["c_city = 'A'"] - expected_old) < 1e-9
    assert decayed["q BETWEEN 10 AND 20"] > 3 * decayed["c_city = 'A'"]
    # Scans keep their count: the guardrails (auto_layout_min_scans) count scans, not weight.
    assert sorted(q.scans for q in captured_queries(capture.scans, ["c_city", "q"], half_life_s=7200)) == [8, 48]


def test_a_reader_whose_clock_runs_ahead_does_not_make_the_workload_old(tmp_path: Path) -> None:
    hour = 3_600_000
    today = [record(NOW - hour + i * 60_000, i, filters=[{**CITY, "value": "A"}]) for i in range(50)]
    ahead = [record(NOW + 10 * 24 * hour, 999, filters=QTY)]  # a driver's clock 10 days ahead
    capture = _capture(tmp_path, today + ahead)
    weights = {q.query.text: q.query.weight for q in
               captured_queries(capture.scans, ["c_city", "q"], half_life_s=86_400, now_ms=NOW)}  # fmt: skip
    # Ages are counted from now, not from the scan ahead of it: today's 50 scans weigh almost 50.
    assert weights["c_city = 'A'"] > 49 and weights["q BETWEEN 10 AND 20"] == 1.0


def test_a_half_life_short_against_the_scans_spacing_is_too_little_to_decide(tmp_path: Path) -> None:
    # 200 scans a minute apart: with a half-life of a day they are worth almost 200 equal ones;
    # with one of a minute, the last few decide alone (about 3 equal ones).
    records = [record(NOW - 200 * 60_000 + i * 60_000, i, filters=[{**CITY, "value": "A"}]) for i in range(200)]
    capture = _capture(tmp_path, records)
    queries = captured_queries(capture.scans, ["c_city"])
    daily = CompactionConfig(auto_layout_min_scans=100, auto_layout_min_span_s=600)
    assert too_little(capture, queries, daily, now_ms=NOW) is None
    assert 199 < effective_scans(capture.scans, 86_400, NOW) <= 200
    minute = replace(daily, auto_layout_half_life_s=60)
    assert 2 < effective_scans(capture.scans, 60, NOW) < 4
    assert "weigh as 3 equal ones with compaction.auto_layout_half_life_s (1.0 min)" in str(
        too_little(capture, queries, minute, now_ms=NOW))
