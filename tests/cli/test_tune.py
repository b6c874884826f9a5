"""`lakecluster tune`: its prediction for the current thresholds against what a round then does."""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import write_deltalake

from lakecluster.clustering import clustering_depth
from lakecluster.compaction.loop import Compactor
from lakecluster.config import StorageConfig, load_config
from lakecluster.stream.generator import generate
from lakecluster.table import LakeTable
from lakecluster.table.location import DeltaLocation
from tests.conftest import lakecluster_cmd, subprocess_env
from tests.generated_tables import SMALL, fill, generator_config
from tests.snapshot_files import snapshot_files
from tests.workload_records import record, write

pytestmark = pytest.mark.integration


def _tune(table: Path, *args: str, json_output: bool = True,
          settings: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:  # fmt: skip
    flags = [f"--set={k}={v}" for k, v in {**SMALL, **(settings or {})}.items()]
    return subprocess.run(lakecluster_cmd(f"--set=table.path={table}", "--set=table.partition_by=[]", *flags,
                                          *(["--json"] if json_output else []), "tune", *args),
                          env=subprocess_env(), capture_output=True, text=True, timeout=300)  # fmt: skip


def test_tune_predicts_what_the_next_round_rewrites_and_how_deep_queries_read(spark, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    table = tmp_path / "t"
    config = generator_config(table, rows=12_000, per_batch=2_000, **{"table.partition_by": "[]"})
    fill(spark, config)
    target = int(SMALL["compaction.target_file_bytes"])
    result = _tune(table, f"--grid=target_file_bytes={target // 2},{target},{target * 2}", f"--out={tmp_path / 'o'}")
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)["thresholds"]
    assert [r["settings"]["target_file_bytes"] for r in data["grid"]] == [target // 2, target, target * 2]
    assert [r["current"] for r in data["grid"]] == [False, True, False]
    # Larger files: fewer of them, each spanning more of every column.
    files = [r["files_after"] for r in data["grid"]]
    assert files[0] > files[1] > files[2]
    assert (tmp_path / "o" / "tune.html").read_text().count("<circle") == 3
    (predicted,) = [r for r in data["grid"] if r["current"]]

    location = DeltaLocation(str(table), StorageConfig())
    before = {f.path: f.size for f in snapshot_files(location, config.table.columns, [])[1]}
    Compactor(config, spark=spark).run_once()
    live, after_files = snapshot_files(location, config.table.columns, [])
    actions = live.actions
    rewritten = sum(size for path, size in before.items() if path not in {f.path for f in after_files})
    assert predicted["bytes_rewritten"] == rewritten  # the same planner, the same files
    assert abs(predicted["files_after"] - len(after_files)) <= max(2, 0.2 * len(after_files))
    sketches = LakeTable.at(str(table)).sketches().latest()
    assert sketches is not None
    for column, expected in predicted["point_query_files"].items():
        actual = clustering_depth(actions, [f.path for f in after_files], sketches, column, config.sketches.boundaries)
        assert 0.5 * actual <= expected <= 2 * actual, (column, expected, actual)


def test_tune_refuses_an_unknown_threshold_in_one_line(tmp_path: Path) -> None:
    result = _tune(tmp_path / "missing", "--grid=target_file_size=1,2")
    assert result.returncode == 2
    assert result.stderr.count("\n") == 1
    assert "target_file_size" in result.stderr and "target_file_bytes" in result.stderr


def _ssb_table(path: Path, rows: int, files: int) -> None:
    """A table of ``files`` appends of the generator's rows, written by delta-rs (no Spark needed)."""
    config = load_config(None)
    step = rows // files
    for i in range(files):
        batch = generate(i * step, (i + 1) * step, config.source.generator, config.table.columns)
        write_deltalake(str(path), pa.Table.from_batches([batch]), mode="append")  # unpartitioned, as _tune says


def test_tune_recommends_the_layout_the_workload_filters_on(tmp_path: Path) -> None:
    table = tmp_path / "t"
    _ssb_table(table, rows=40_000, files=8)
    workload = tmp_path / "workload.sql"
    workload.write_text("-- one city after another\n" + "".join(f"c_city = 'UNITED KI{i}'\n" for i in range(6)))
    result = _tune(table, f"--queries={workload}", "--sample-rows=20000", f"--out={tmp_path / 'o'}")
    assert result.returncode == 0, result.stderr
    advice = json.loads(result.stdout)["workload"]
    assert "thresholds" not in json.loads(result.stdout)  # no --grid: the layout question only
    assert advice["queries"] == 6 and 20_000 <= advice["sample_rows"] < 40_000
    best, current = advice["recommended"], advice["current"]
    assert best["clustering_columns"] == ["c_city"] and best["partition_by"] == []
    assert current["clustering_columns"] == ["s_city", "c_city", "p_brand"] and current["current"]
    assert best["mean_files_read"] < current["mean_files_read"]
    assert len(best["files_read"]) == 6
    page = (tmp_path / "o" / "tune.html").read_text()
    assert "Layouts for the workload" in page and page.count("<rect") == len(advice["candidates"][:12]) + (
        0 if any(c["current"] for c in advice["candidates"][:12]) else 1)


def test_tune_keep_columns_recommends_only_weights_for_the_current_columns(tmp_path: Path) -> None:
    table = tmp_path / "t"
    _ssb_table(table, rows=40_000, files=8)
    workload = tmp_path / "workload.sql"
    workload.write_text("".join(f"c_city = 'UNITED KI{i}'\n" for i in range(6)) + "c_nation = 'PERU'\n")
    result = _tune(table, f"--queries={workload}", "--keep-columns", "--sample-rows=20000")
    assert result.returncode == 0, result.stderr
    advice = json.loads(result.stdout)["workload"]
    assert advice["keep_columns"]
    assert {tuple(c["clustering_columns"]) for c in advice["candidates"]} == {("s_city", "c_city", "p_brand")}
    best = advice["recommended"]
    weights = best["column_weights"]
    assert weights["c_city"] > weights["s_city"] and weights["c_city"] > weights["p_brand"]
    assert best["mean_files_read"] < advice["current"]["mean_files_read"]
    text = _tune(table, f"--queries={workload}", "--keep-columns", "--sample-rows=20000", json_output=False)
    assert text.returncode == 0, text.stderr
    assert "candidate weights of the current clustering columns" in text.stdout
    assert "[compaction.column_weights]" in text.stdout
    assert advice["objective"] == "mean"
    strict = _tune(table, f"--queries={workload}", "--keep-columns", "--sample-rows=20000",
                   "--objective=no-query-worse")
    assert strict.returncode == 0, strict.stderr
    advice = json.loads(strict.stdout)["workload"]
    assert advice["objective"] == "no-query-worse"
    for c in advice["candidates"]:  # each query's files beside the equal-bits layout's, and the queries worse
        assert len(c["equal_bits_files_read"]) == len(c["files_read"]) == 7
        pairs = list(zip(c["files_read"], c["equal_bits_files_read"], strict=True))  # rounded to 0.1
        assert sum(f > r + 0.1 for f, r in pairs) <= c["worse_than_equal_bits"] <= sum(f >= r for f, r in pairs)
    worse = [c["worse_than_equal_bits"] for c in advice["candidates"]]
    assert worse == sorted(worse)  # ranked by the queries worse first


def test_tune_names_the_bad_line_of_a_workload_in_one_line(tmp_path: Path) -> None:
    table = tmp_path / "t"
    _ssb_table(table, rows=2_000, files=1)
    workload = tmp_path / "workload.sql"
    workload.write_text("c_city = 'X'\nc_cty = 'Y'\n")
    result = _tune(table, f"--queries={workload}")
    assert result.returncode == 2
    assert result.stderr.count("\n") == 1
    assert result.stderr.startswith(f"lakecluster: {workload} line 2: unknown column 'c_cty' (did you mean 'c_city'?)")


def _captured(table: Path, nation_scans: int, quantity_scans: int) -> None:
    """A capture of two queries over two hours: one on a nation, one on a range of quantities."""
    t0 = time.time() * 1000 - 7_200_000
    nation = [{"column": "c_nation", "type": "string", "op": "=", "value": "FRANCE"}]
    quantity = [{"column": "lo_quantity", "type": "int", "op": ">=", "value": 10},
                {"column": "lo_quantity", "type": "int", "op": "<=", "value": 12}]  # fmt: skip
    lines = [record(t0 + i * 60_000, i, filters=nation, files_read=8) for i in range(nation_scans)]
    lines += [record(t0 + 30_000 + i * 60_000, 1000 + i, filters=quantity, files_read=5) for i in range(quantity_scans)]
    write(table, t0, lines)


def test_tune_from_the_captured_workload_weighs_each_query_by_its_scans(tmp_path: Path) -> None:
    layouts = {}
    for name, nations, quantities in (("nations", 100, 10), ("quantities", 10, 100)):
        table = tmp_path / name
        _ssb_table(table, rows=40_000, files=8)
        _captured(table, nations, quantities)
        result = _tune(table, "--from-workload", "--sample-rows=20000", "--since=1d")
        assert result.returncode == 0, result.stderr
        advice = json.loads(result.stdout)["workload"]
        assert advice["scans"] == 110 and advice["queries"] == 2 and advice["since_s"] == 86_400
        # Each query weighs its scans, a scan a day (compaction.auto_layout_half_life_s) old half a fresh
        # one: these are at most 100 minutes older than the newest, so within 5 % of their count.
        assert advice["half_life_s"] == 86_400
        weights = sorted(advice["query_weights"])
        assert 9.5 < weights[0] <= 10 and 95 < weights[1] <= 100 and weights[1] / weights[0] > 9.5
        # The costliest query now first, its files read as observed beside the model's prediction.
        top = advice["shapes"][0]
        assert top["scans"] == 100 and top["observed_files_read"] == (8 if name == "nations" else 5)
        assert top["predicted_files_read"] == advice["current"]["files_read"][0]
        best = advice["recommended"]
        assert set(best["clustering_columns"]) | set(best["partition_by"]) <= {"c_nation", "lo_quantity"}
        assert best["mean_files_read"] < advice["current"]["mean_files_read"]
        # The frequent query is the one the recommended layout serves best.
        assert top["recommended_files_read"] < advice["shapes"][1]["recommended_files_read"]
        layouts[name] = best
    # The same two queries at other frequencies: another layout.
    assert layouts["nations"] != layouts["quantities"]

    text = _tune(tmp_path / "nations", "--from-workload", "--sample-rows=20000", "--output=text")
    assert "110 scan(s) in 2 distinct quer(ies)" in text.stdout and "observed     8.0" in text.stdout


def test_tune_from_the_captured_workload_scores_the_last_week_unless_told_otherwise(tmp_path: Path) -> None:
    table = tmp_path / "t"
    _ssb_table(table, rows=4_000, files=2)
    _captured(table, 0, 100)  # the last two hours: quantities
    ten_days_ago = time.time() * 1000 - 10 * 86_400_000
    nation = [{"column": "c_nation", "type": "string", "op": "=", "value": "FRANCE"}]
    write(table, ten_days_ago, [record(ten_days_ago + i * 60_000, 5000 + i, filters=nation) for i in range(300)],
          app="local-2")  # fmt: skip
    recent = json.loads(_tune(table, "--from-workload", "--sample-rows=4000").stdout)["workload"]
    assert recent["since_s"] == 7 * 86_400 and recent["scans"] == 100 and recent["queries"] == 1
    assert recent["recommended"]["clustering_columns"] == ["lo_quantity"]
    # 30 days count the older scans, but a scan ten days old weighs 2^-10 of a fresh one: still quantities.
    month = json.loads(_tune(table, "--from-workload", "--sample-rows=4000", "--since=30d").stdout)["workload"]
    assert month["scans"] == 400 and month["queries"] == 2
    assert month["recommended"]["clustering_columns"] == ["lo_quantity"]
    # Every scan weighing alike (half-life 0), the 300 on nations outvote the 100 on quantities.
    alike = json.loads(_tune(table, "--from-workload", "--sample-rows=4000", "--since=30d",
                             settings={"compaction.auto_layout_half_life_s": "0"}).stdout)["workload"]  # fmt: skip
    assert alike["scans"] == 400 and sorted(alike["query_weights"]) == [100.0, 300.0]
    assert "c_nation" in alike["recommended"]["clustering_columns"] + alike["recommended"]["partition_by"]


def test_tune_from_too_little_captured_workload_recommends_nothing_and_says_why(tmp_path: Path) -> None:
    table = tmp_path / "t"
    _ssb_table(table, rows=4_000, files=2)
    _captured(table, 5, 5)
    result = _tune(table, "--from-workload")
    assert result.returncode == 0, result.stderr
    advice = json.loads(result.stdout)["workload"]
    assert advice["recommended"] is None and advice["scans"] == 10
    assert advice["no_recommendation"].startswith("too little captured workload: 10 scan(s), fewer than "
                                                  "compaction.auto_layout_min_scans (100)")  # fmt: skip
    text = _tune(table, "--from-workload", "--output=text")
    assert "no recommendation: too little captured workload" in text.stdout


def test_tune_takes_queries_or_the_captured_workload_not_both(tmp_path: Path) -> None:
    result = _tune(tmp_path / "missing", "--from-workload", f"--queries={tmp_path / 'q.sql'}")
    assert result.returncode == 2 and result.stderr.count("\n") == 1
    assert "--queries: not allowed with argument --from-workload" in result.stderr
