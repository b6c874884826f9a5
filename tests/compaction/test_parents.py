"""The layout's parents on a real Delta table: cities grouped by region keep region queries to
fewer files, every row kept (``compaction.group_by_parents``)."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
from deltalake import DeltaTable

from lakecluster.compaction.loop import Compactor
from lakecluster.compaction.table_sketches import spread_rows
from tests.conftest import duckdb_connection, read_delta
from tests.generated_tables import generator_config, row_multiset

REGIONS = ("AFRICA", "AMERICA", "ASIA", "EUROPE", "MIDDLE EAST")


def _files_admitting(table: Path, column: str, value: str) -> int:
    """Live files whose [min, max] of ``column`` holds ``value`` (what a reader's skipping reads)."""
    adds = pa.table(DeltaTable(str(table)).get_add_actions(flatten=True))
    lo, hi = adds[f"min.{column}"].to_pylist(), adds[f"max.{column}"].to_pylist()
    return sum(a <= value <= b for a, b in zip(lo, hi, strict=True))


def test_cities_grouped_by_region_keep_region_queries_to_fewer_files(spark, filled, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    read = {}
    for grouped in (True, False):
        table = tmp_path / f"t{grouped}"
        sizes = {"compaction.target_file_bytes": "40000", "compaction.min_file_bytes": "20000"}
        config = generator_config(table, rows=48_000, per_batch=12_000, **{"table.partition_by": "[]", **sizes})
        config = replace(config, compaction=replace(config.compaction, group_by_parents=grouped))
        filled(config)
        before = read_delta(table)
        results = Compactor(config, spark=spark).run_once()
        assert results and all(r.result == "committed" for r in results)
        assert row_multiset(read_delta(table)) == row_multiset(before)
        duck = duckdb_connection().execute(f"SELECT count(*) FROM delta_scan('{table}')").fetchone()
        assert duck == (48_000,)
        log = (table / "_delta_log" / f"{results[0].version:020d}.json").read_text().splitlines()
        info = next(json.loads(line)["commitInfo"] for line in log if "commitInfo" in json.loads(line))
        meta = json.loads(info["userMetadata"])["lakecluster"]
        if grouped:
            assert meta["grouped_by"].startswith("s_city<s_region:") and ",c_city<c_region:" in meta["grouped_by"]
        else:
            assert meta["grouped_by"] == ""
        if grouped:
            # the table now clustered, each file holds a narrow range of cities: the parents are
            # still found in slices of many files (whole files would show few cities)
            again = Compactor(config, spark=spark)
            assert {c: p.parent for c, p in again.parents().items()} == {"s_city": "s_region", "c_city": "c_region"}
            version, live = again.live.snapshot()
            rows = spread_rows(again.table, live, version, [config.table.column("s_city")], rows=4_000)
            assert pc.count_distinct(rows["s_city"]).as_py() >= 0.9 * pc.count_distinct(before["s_city"]).as_py()
        files = len(DeltaTable(str(table)).file_uris())
        read[grouped] = (files, sum(_files_admitting(table, c, r) for c in ("s_region", "c_region") for r in REGIONS))
    (grouped_files, grouped_read), (plain_files, plain_read) = read[True], read[False]
    assert abs(grouped_files - plain_files) <= 0.2 * plain_files, read  # the same budget of files
    assert grouped_read < 0.8 * plain_read, read
