"""Workload files and the layout advisor of ``lakecluster tune --queries``."""

from __future__ import annotations

import datetime as dt

import numpy as np
import pyarrow as pa
import pytest

from lakecluster.compaction.advise import Candidate, WorkloadModel, recommend
from lakecluster.compaction.workload import Predicate, WorkloadError, parse_workload
from lakecluster.config import load_config

COLUMNS = load_config(None).table.columns  # the SSB-like schema


def _one(clause: str) -> tuple[Predicate, ...]:
    (query,) = parse_workload([clause], COLUMNS)
    return query.predicates


def test_clauses_reduce_to_the_predicates_skipping_can_use() -> None:
    assert _one("s_city = 'UNITED KI1'") == (Predicate("s_city", "eq", ("UNITED KI1",)),)
    assert _one("WHERE d_year BETWEEN 1993 AND 1995") == (Predicate("d_year", "range", low=1993, high=1995),)
    # Bounds on one column intersect; literals are typed by the column (a date, not a string).
    assert _one("lo_orderdate >= '1994-01-01' AND lo_orderdate < '1995-01-01' AND lo_orderdate > '1993-06-01'") == (
        Predicate("lo_orderdate", "range", low=dt.date(1994, 1, 1), high=dt.date(1995, 1, 1)),
    )
    assert _one("c_city = 'A' OR c_city = 'B' OR c_city IN ('C')") == (Predicate("c_city", "eq", ("A", "B", "C")),)
    assert _one("p_brand LIKE 'MFGR#22%'") == (Predicate("p_brand", "range", low="MFGR#22", high="MFGR#22\U0010ffff"),)
    # An equality wins over a range on the same column; two equalities intersect.
    assert _one("d_year > 1990 AND d_year = 1994") == (Predicate("d_year", "eq", (1994,)),)
    assert _one("d_year IN (1993, 1994) AND d_year = 1994") == (Predicate("d_year", "eq", (1994,)),)


@pytest.mark.parametrize("clause", ["s_city = 'A' OR c_city = 'B'", "NOT (s_city = 'A')", "s_city != 'A'",
                                    "s_city IS NULL", "p_brand LIKE '%22'", "d_year NOT BETWEEN 1 AND 2"])  # fmt: skip
def test_predicates_that_restrict_no_range_of_a_column_are_dropped(clause: str) -> None:
    assert _one(clause) == ()


def test_comments_and_blank_lines_are_skipped_and_lines_keep_their_numbers() -> None:
    queries = parse_workload(["-- the dashboard", "", "# nightly", "d_year = 1994", "  s_city = 'X'  "], COLUMNS)
    assert [(q.line, q.text) for q in queries] == [(4, "d_year = 1994"), (5, "s_city = 'X'")]


def test_a_bad_line_is_named_by_its_number() -> None:
    with pytest.raises(WorkloadError, match=r"line 2: unknown column 'city'.*s_city"):
        parse_workload(["d_year = 1994", "city = 'X'"], COLUMNS)
    with pytest.raises(WorkloadError, match="line 1: "):
        parse_workload(["d_year = 'not a year'"], COLUMNS)
    with pytest.raises(WorkloadError, match="no WHERE clause"):
        parse_workload(["-- nothing", ""], COLUMNS)


def _model(clauses: list[str], files: int = 100, rows: int = 100_000) -> WorkloadModel:
    """A sample of ``rows`` with two 1000-value columns and a 5-value year, in a table of ``files`` files."""
    rng = np.random.default_rng(0)
    sample = pa.table({
        "s_city": pa.array([f"city{i:04d}" for i in rng.integers(0, 1000, rows)]),
        "c_city": pa.array([f"city{i:04d}" for i in rng.integers(0, 1000, rows)]),
        "d_year": pa.array(rng.integers(1992, 1997, rows), pa.int32()),
    })  # fmt: skip
    return WorkloadModel(parse_workload(clauses, COLUMNS), sample, table_bytes=files * 1000, target_file_bytes=1000)


def test_a_query_without_a_predicate_reads_every_file_and_a_point_query_about_one() -> None:
    model = _model(["d_year >= 1992 OR s_city = 'x'", "s_city = 'city0007'"])
    scored = model.score(Candidate(("s_city",), (1.0,), ()))
    assert scored.files == 100
    assert scored.files_read[0] == 100
    assert 1.0 <= scored.files_read[1] <= 1.5  # one range of 100, plus the value's own share


def test_the_filtered_column_is_recommended_over_the_current_layout() -> None:
    model = _model([f"c_city = 'city{i:04d}'" for i in range(10)])
    current = Candidate(("s_city",), (1.0,), (), current=True)
    ranked = recommend(model, current)
    best = ranked[0].candidate
    assert best.clustering_columns == ("c_city",) and best.partition_by == ()
    now = next(s for s in ranked if s.candidate.current)
    assert now.mean_files_read == 100 and ranked[0].mean_files_read < 1.5


def test_weights_favour_the_column_queried_more_often() -> None:
    model = _model([f"s_city = 'city{i:04d}'" for i in range(8)] + ["c_city = 'city0001'", "c_city = 'city0002'"])
    ranked = recommend(model, None)
    best = ranked[0]
    assert best.candidate.clustering_columns == ("s_city", "c_city")
    s_weight, c_weight = best.candidate.weights
    assert s_weight > c_weight
    even = model.score(Candidate(("s_city", "c_city"), (1.0, 1.0), ()))
    alone = model.score(Candidate(("s_city",), (1.0,), ()))
    assert best.mean_files_read < even.mean_files_read and best.mean_files_read < alone.mean_files_read


def test_partitioning_prunes_only_queries_that_filter_on_it() -> None:
    yearly = _model(["d_year = 1994 AND s_city = 'city0001'"] * 3)
    by_year = yearly.score(Candidate(("s_city",), (1.0,), ("d_year",)))
    assert by_year.files == 100  # 5 partitions of 20 files
    assert by_year.files_read[0] < 2  # one partition's one range
    # Without a year predicate every partition is read, at least one file each.
    other = _model(["s_city = 'city0001'"])
    assert other.score(Candidate(("s_city",), (1.0,), ("d_year",))).files_read[0] >= 5
    # A predicate matching no sampled row prunes every partition.
    none = _model(["d_year = 2030"])
    assert none.score(Candidate(("s_city",), (1.0,), ("d_year",))).files_read == [0.0]
