"""Honest advice: ``tune`` recommends nothing and ``status`` says why when no layout or threshold can
read fewer files (the table below one target file per partition, or candidates that tie).

Every command runs as a subprocess that cannot start Spark, on tables delta-rs wrote."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from deltalake import DeltaTable

from lakecluster.config import load_config
from lakecluster.sketches import BoundarySketches
from lakecluster.table import LakeTable
from tests.cli.conftest import run_cli

BELOW = "the table is below one target file per partition (7 partitions, the largest "
SMALL_FILES = ["--set", "compaction.target_file_bytes=8192", "--set", "compaction.min_file_bytes=4096"]


def _write_sketches(table: Path) -> None:
    """The boundary sketches the stream would have written for the table's rows."""
    config = load_config(overrides={"table.path": str(table)}, environ={})
    data = DeltaTable(str(table)).to_pyarrow_table()
    sketches = BoundarySketches.empty([config.table.column(c) for c in config.table.clustering_columns])
    for c in config.table.clustering_columns:
        sketches.sketches[c].update(data[c])
    sketches.delta_version = DeltaTable(str(table)).version()
    LakeTable(config).sketches().write(sketches)


def test_tune_recommends_no_layout_for_a_table_below_one_target_file_per_partition(
    ssb_table: Path, tmp_path: Path
) -> None:
    workload = tmp_path / "q.sql"
    workload.write_text("c_city = 'UNITED KI1'\ns_city = 'UNITED KI2' AND d_year = 1995\n")
    args = ["--set", f"table.path={ssb_table}", "tune", f"--queries={workload}"]
    as_json = run_cli("--json", *args, cwd=tmp_path)
    assert as_json.returncode == 0, as_json.stderr
    advice = json.loads(as_json.stdout)["workload"]
    assert advice["recommended"] is None and advice["no_recommendation"].startswith(BELOW)
    text = run_cli(*args, cwd=tmp_path)
    assert text.returncode == 0, text.stderr
    assert "recommended settings" not in text.stdout and "current -> recommended" not in text.stdout
    assert f"no recommendation: {BELOW}" in text.stdout and "keep the current settings" in text.stdout


def test_tune_recommends_nothing_when_every_candidate_reads_the_same(ssb_table: Path, tmp_path: Path) -> None:
    workload = tmp_path / "q.sql"
    workload.write_text("lo_orderkey IS NULL\nlo_shipmode != 'AIR'\n")  # predicates no file skipping can use
    result = run_cli("--json", "--set", f"table.path={ssb_table}", *SMALL_FILES, "tune", f"--queries={workload}",
                     cwd=tmp_path)  # fmt: skip
    assert result.returncode == 0, result.stderr
    advice = json.loads(result.stdout)["workload"]
    assert advice["recommended"] is None
    assert "the workload does not tell them apart" in advice["no_recommendation"]


def test_tune_thresholds_say_no_setting_reads_fewer_files_below_one_target_file(
    ssb_table: Path, tmp_path: Path
) -> None:
    _write_sketches(ssb_table)
    args = ["--set", f"table.path={ssb_table}", "tune", "--grid=target_file_bytes=64MiB,128MiB"]
    text = run_cli(*args, cwd=tmp_path)
    assert text.returncode == 0, text.stderr
    assert f"no setting reads fewer files than another: {BELOW}" in text.stdout
    assert "64.0 MiB" in text.stdout and "67,108,864" not in text.stdout  # thresholds in binary units
    as_json = json.loads(run_cli("--json", *args, cwd=tmp_path).stdout)["thresholds"]
    assert as_json["no_difference"].startswith(BELOW)
    assert [r["settings"]["target_file_bytes"] for r in as_json["grid"]] == [64 << 20, 128 << 20]  # raw bytes


def test_status_says_when_the_table_is_below_one_target_file_per_partition(ssb_table: Path, tmp_path: Path) -> None:
    table = ["--set", f"table.path={ssb_table}"]
    text = run_cli(*table, "status", cwd=tmp_path)
    assert text.returncode == 0, text.stderr
    assert f"layout     {BELOW}" in text.stdout
    data = json.loads(run_cli(*table, "--json", "status", cwd=tmp_path).stdout)
    assert data["partitions"]["count"] == 7 and data["partitions"]["below_one_target_file"] is True
    assert data["partitions"]["target_file_bytes"] == 128 << 20
    bigger = run_cli(*table, *SMALL_FILES, "status", cwd=tmp_path)  # partitions of several target files
    assert bigger.returncode == 0, bigger.stderr
    assert "below one target file" not in bigger.stdout


def test_tune_recommends_a_layout_only_past_the_minimum_gain(ssb_table: Path, tmp_path: Path) -> None:
    workload = tmp_path / "q.sql"
    workload.write_text("c_city = 'UNITED KI1'\ns_city = 'UNITED KI2' AND d_year = 1995\n")
    args = ["--set", f"table.path={ssb_table}", *SMALL_FILES, "tune", f"--queries={workload}"]
    found = json.loads(run_cli("--json", *args, cwd=tmp_path).stdout)["workload"]
    best, now = found["candidates"][0], found["current"]
    assert found["recommended"] == best and not best["current"]
    # the means in the output are rounded to 2 decimals, the gain to 4
    assert found["gain"] == pytest.approx(1 - best["mean_files_read"] / now["mean_files_read"], abs=1e-3)
    assert found["gain"] > 0.02
    text = run_cli(*args, cwd=tmp_path)
    assert f"recommended settings ({found['gain']:.1%} fewer files read per query than the current ones)" in text.stdout

    higher = f"{found['gain'] + 0.01:.2f}"  # a bar just above what the best layout gains
    withheld = json.loads(run_cli("--json", *args, f"--min-gain={higher}", cwd=tmp_path).stdout)["workload"]
    assert withheld["recommended"] is None and withheld["gain"] == found["gain"]
    assert withheld["no_recommendation"].endswith(f"fewer: below the {float(higher) * 100:g}% worth re-clustering "
                                                  "the table for")  # fmt: skip
    text = run_cli(*args, f"--min-gain={higher}", cwd=tmp_path)
    assert "recommended settings" not in text.stdout and "keep the current settings" in text.stdout

    misplaced = run_cli("--set", f"table.path={ssb_table}", "tune", "--min-gain=0.1", cwd=tmp_path)
    assert misplaced.returncode == 2 and "--min-gain" in misplaced.stderr and "Traceback" not in misplaced.stderr
    assert "applies to --queries and --from-workload only" in misplaced.stderr
    out_of_range = run_cli(*args, "--min-gain=1.5", cwd=tmp_path)
    assert out_of_range.returncode == 2 and "expected a number in 0..1, got '1.5'" in out_of_range.stderr


def test_tune_says_to_keep_the_current_settings_when_they_rank_first(ssb_table: Path, tmp_path: Path) -> None:
    workload = tmp_path / "q.sql"
    workload.write_text("d_year = 1995\n")  # the table is partitioned by the year: no layout reads fewer files
    args = ["--set", f"table.path={ssb_table}", *SMALL_FILES, "--set", 'table.clustering_columns=["s_city"]',
            "tune", f"--queries={workload}"]  # fmt: skip
    found = json.loads(run_cli("--json", *args, cwd=tmp_path).stdout)["workload"]
    assert found["recommended"]["current"] and found["gain"] == 0.0 and found["no_recommendation"] is None
    text = run_cli(*args, cwd=tmp_path)
    assert text.returncode == 0, text.stderr
    assert "the current settings read the fewest files of the candidates: keep them" in text.stdout
    assert "recommended settings" not in text.stdout
