"""Which columns get file stats and how string bounds are cut (Delta's rules, lakecluster/stats_columns.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import DeltaTable, QueryBuilder
from deltalake.transaction import AddAction
from hypothesis import given, settings
from hypothesis import strategies as st

from lakecluster.config import load_config
from lakecluster.stats_columns import STRING_PREFIX, stats_columns, string_max, string_min, without_stats
from tests.parquet_writes import delta_stats, write_files

COLUMNS = [f"c{i:02d}" for i in range(40)]
# Code points around the ones the cut treats specially; surrogates cannot be in UTF-8 data.
CHARS = st.one_of(
    st.sampled_from(["a", "z", "\x7e", "\x7f", "\x80", "\ufffd", "\uffff", "\U0001f600", "\U0010fffe", "\U0010ffff"]),
    st.characters(exclude_categories=["Cs"]),
)


def utf8(s: str) -> bytes:
    return s.encode("utf-8")


def test_the_first_32_data_columns_get_stats_by_default_as_delta_collects_them() -> None:
    assert stats_columns(COLUMNS, {}) == tuple(COLUMNS[:32])


def test_num_indexed_cols_picks_the_first_n_and_a_negative_number_picks_all() -> None:
    assert stats_columns(COLUMNS, {"delta.dataSkippingNumIndexedCols": "3"}) == ("c00", "c01", "c02")
    assert stats_columns(COLUMNS, {"delta.dataSkippingNumIndexedCols": "0"}) == ()
    assert stats_columns(COLUMNS, {"delta.dataSkippingNumIndexedCols": "-1"}) == tuple(COLUMNS)


def test_stats_columns_take_precedence_matched_without_case_in_schema_order() -> None:
    config = {"delta.dataSkippingStatsColumns": " C05 ,`c01`, c39 , nested.field, missing",
              "delta.dataSkippingNumIndexedCols": "1"}  # fmt: skip
    assert stats_columns(COLUMNS, config) == ("c01", "c05", "c39")
    assert stats_columns(["a,b", "c"], {"delta.dataSkippingStatsColumns": "`a,b`"}) == ("a,b",)
    assert stats_columns(["we`ird"], {"delta.dataSkippingStatsColumns": "`we``ird`"}) == ("we`ird",)
    assert stats_columns(COLUMNS, {"delta.dataSkippingStatsColumns": ""}) == ()


def test_clustering_and_requested_index_columns_left_without_stats_are_named() -> None:
    config = {"delta.dataSkippingNumIndexedCols": "2"}
    assert without_stats(("c30", "c01", "not_a_column"), COLUMNS, config) == ["c30"]
    assert without_stats(("c35",), COLUMNS, {}) == ["c35"] and without_stats(("c31",), COLUMNS, {}) == []
    overrides = {"table.clustering_columns": '["s_city", "p_brand"]', "index.columns": '["lo_discount", "s_city"]'}
    assert load_config(overrides=overrides, environ={}).skipping_columns == ("s_city", "p_brand", "lo_discount")


def test_a_property_delta_would_refuse_means_stats_for_every_column_and_a_warning(
    caplog: pytest.LogCaptureFixture,
) -> None:
    assert stats_columns(COLUMNS, {"delta.dataSkippingNumIndexedCols": "many"}) == tuple(COLUMNS)
    assert stats_columns(COLUMNS, {"delta.dataSkippingStatsColumns": "`open"}) == tuple(COLUMNS)
    warned = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert len(warned) == 2 and "delta.dataSkippingNumIndexedCols='many'" in warned[0], warned
    assert "delta.dataSkippingStatsColumns='`open'" in warned[1], warned


@settings(max_examples=400, deadline=None)
@given(st.lists(st.text(CHARS, max_size=80) | st.text(CHARS, min_size=30, max_size=36), min_size=1, max_size=6))
def test_cut_string_bounds_still_bound_every_value_in_utf8_byte_order(values: list[str]) -> None:
    lo = string_min(min(values, key=utf8))
    hi = string_max(max(values, key=utf8))
    assert all(utf8(lo) <= utf8(v) <= utf8(hi) for v in values)
    assert len(lo) <= STRING_PREFIX
    if hi is None:  # no bound: the text past the prefix is a long run of U+10FFFF
        assert "\U0010ffff" * 16 in max(values, key=utf8)
        return
    grown = max(values, key=utf8)[STRING_PREFIX : len(hi) - 1]  # the prefix grows only past U+10FFFF
    assert len(hi) <= STRING_PREFIX + 1 or grown == "\U0010ffff" * len(grown)
    assert len(hi.encode("utf-16-le")) // 2 <= STRING_PREFIX + 3 or grown == "\U0010ffff" * len(grown)


def test_a_long_bound_keeps_its_prefix_and_a_tie_breaker_above_the_cut_character() -> None:
    text = "x" * 40
    assert string_min(text) == "x" * 32
    assert string_max(text) == "x" * 32 + "\x7f"  # ASCII cut: an ASCII tie-breaker
    assert string_max("x" * 32 + "é" + "y") == "x" * 32 + "\U0010ffff"
    assert string_max("x" * 32 + "\U0010ffff" * 2 + "a") == "x" * 32 + "\U0010ffff" * 2 + "\x7f"
    assert string_max("x" * 32 + "\U0010ffff" * 3) == "x" * 32 + "\U0010ffff" * 3  # nothing is above it: kept whole
    assert string_max("x" * 32 + "\U0010ffff" * 16 + "a") == "x" * 32 + "\U0010ffff" * 16 + "\x7f"  # 64 units
    assert string_max("x" * 32 + "\U0010ffff" * 17 + "a") is None  # past twice the prefix: no bound, as Delta
    assert string_max("x" * 32) == "x" * 32
    # Java's length: characters above U+FFFF count two, and are never split
    assert string_max("\U0001f600" * 17) == "\U0001f600" * 16 + "\U0010ffff"
    assert string_max("x" * 31 + "\U0001f600" + "y") == "x" * 31 + "\U0001f600" + "\x7f"
    assert string_max("\U0001f600" * 16) == "\U0001f600" * 16
    assert string_min("\U0001f600" * 40) == "\U0001f600" * 32  # the minimum's prefix counts characters


def test_file_stats_hold_only_the_chosen_columns_and_cut_strings() -> None:
    table = pa.table({"a": pa.array([1, None]), "s": pa.array(["p" * 100, "q" * 50]), "t": pa.array([1.5, 2.5])})
    stats = json.loads(delta_stats(table, columns=("a", "s")))
    assert set(stats["minValues"]) == set(stats["maxValues"]) == set(stats["nullCount"]) == {"a", "s"}
    assert stats["minValues"]["s"] == "p" * 32 and stats["maxValues"]["s"] == "q" * 32 + "\x7f"
    assert stats["nullCount"] == {"a": 1, "s": 0}
    assert set(json.loads(delta_stats(table))["minValues"]) == {"a", "s", "t"}
    endless = json.loads(delta_stats(pa.table({"s": ["x" * 32 + "\U0010ffff" * 40]})))
    assert endless["minValues"] == {"s": "x" * 32} and endless["maxValues"] == {}


# Long strings that share a 31-character head and differ around the cut, one or two per file, so
# every query below is answered by skipping most files on the cut bounds.
_HEAD = "k" * 31
LONG_VALUES = sorted({_HEAD + c + tail for c in ("a", "~", "\x7f", "é", "\uffff", "\U0001f600", "\U0010ffff")
                      for tail in ("z", "\U0010ffff" * 2 + "q")} | {"k", _HEAD + "kk"}, key=utf8)  # fmt: skip


@pytest.mark.integration
def test_readers_skipping_files_by_cut_string_bounds_return_every_matching_row(spark, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    from tests.conftest import duckdb_connection
    from tests.spark_scans import bytes_scanned, files_scanned

    schema = pa.schema([("id", pa.int64()), ("s", pa.string())])
    DeltaTable.create(str(tmp_path), schema)
    writes = []
    for start in range(0, len(LONG_VALUES), 2):
        rows = pa.table({"id": pa.array(range(start, start + 2), pa.int64())[: len(LONG_VALUES[start:start + 2])],
                         "s": LONG_VALUES[start:start + 2]}, schema=schema)  # fmt: skip
        writes.extend(write_files(str(tmp_path), rows, partition_by=(), prefix="t", max_rows_per_file=2))
    adds = [AddAction(f.path, f.size, {}, 0, True, f.stats) for f in writes]
    DeltaTable(str(tmp_path)).create_write_transaction(adds, mode="append", schema=schema)
    assert any(len(json.loads(f.stats)["maxValues"]["s"]) < len(LONG_VALUES[-1]) for f in writes), "no bound was cut"

    def truth(op: str, value: str) -> int:
        compare = {"=": bytes.__eq__, "<": bytes.__lt__, ">": bytes.__gt__}[op]
        return sum(1 for v in LONG_VALUES if compare(utf8(v), utf8(value)))

    def literal(value: str) -> str:
        return "'" + value.replace("'", "''") + "'"

    # Spark: a scalar subquery (its own scan, skipping on its own) per value, in one query; an
    # equality needs both bounds of the file that holds the value.
    counts = ", ".join(f"(SELECT count(*) FROM delta.`{tmp_path}` WHERE s = {literal(v)})" for v in LONG_VALUES)
    frame = spark.sql(f"SELECT {counts}")
    assert list(frame.collect()[0]) == [1] * len(LONG_VALUES)
    # the bounds did the skipping: at most the two files around each value
    assert files_scanned(frame) <= 2 * len(LONG_VALUES) < len(writes) * len(LONG_VALUES)
    everything = spark.sql(f"SELECT count(s) FROM delta.`{tmp_path}` WHERE length(s) > 0")  # no skipping
    assert everything.collect()[0][0] == len(LONG_VALUES)
    assert files_scanned(everything) == len(writes)
    assert bytes_scanned(everything) == sum(f.size for f in writes)
    duck = duckdb_connection()
    rs = QueryBuilder().register("t", DeltaTable(str(tmp_path)))
    for value in LONG_VALUES:
        for op in ("=", "<", ">"):
            ducks = duck.execute(f"SELECT count(*) FROM delta_scan('{tmp_path}') WHERE s {op} ?", [value]).fetchone()
            assert ducks == (truth(op, value),), (op, value)
            through_rs = rs.execute(f"SELECT count(*) AS n FROM t WHERE s {op} {literal(value)}").read_all()
            assert through_rs["n"][0].as_py() == truth(op, value), (op, value)


@pytest.mark.integration
def test_cut_string_bounds_are_the_ones_delta_sparks_writer_collects(spark, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    values = [*LONG_VALUES, "k" * 32 + "é", "é" * 40, "\U0001f600" * 33]
    rows = pa.table({"id": pa.array(range(len(values)), pa.int64()), "s": values})
    frame = spark.createDataFrame(rows.to_pandas()).repartitionByRange(len(values), "id")
    frame.write.format("delta").save(str(tmp_path))
    adds = [json.loads(line)["add"] for f in sorted((tmp_path / "_delta_log").glob("*.json"))
            for line in f.read_text().splitlines() if '"add"' in line]  # fmt: skip
    by_id = {json.loads(a["stats"])["minValues"]["id"]: json.loads(a["stats"]) for a in adds}
    assert sorted(by_id) == list(range(len(values))), "one row per file"
    bad = []
    for i, value in enumerate(values):
        ours = json.loads(delta_stats(rows.slice(i, 1)))
        for side in ("minValues", "maxValues"):
            if ours[side]["s"] != by_id[i][side]["s"]:
                bad.append((side, value[28:], ours[side]["s"][28:], by_id[i][side]["s"][28:]))
    assert not bad, "\n".join(map(repr, bad))
