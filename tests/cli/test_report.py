"""`lakecluster report`: the layout page shows what compaction did, and a browser renders it."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from lakecluster.compaction.loop import Compactor
from tests.conftest import lakecluster_cmd, subprocess_env
from tests.generated_tables import fill, generator_config

pytestmark = pytest.mark.integration


def _report(table: Path, out: Path) -> dict:
    result = subprocess.run(lakecluster_cmd(f"--set=table.path={table}", "--set=table.partition_by=[]",
                                            "--set=compaction.target_file_bytes=15000",
                                            "--set=compaction.min_file_bytes=7500", "report", "--out", str(out)),
                            env=subprocess_env(), capture_output=True, text=True, timeout=300)  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == f"lakecluster report: {out / 'index.html'}"
    return json.loads((out / "report.json").read_text())


def _mean_width(ranges: list[list[float]]) -> float:
    return float(np.mean([hi - lo for lo, hi in ranges]))


def test_report_draws_the_layout_before_and_after_compaction(spark, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    table = tmp_path / "t"
    # Small output files, so that the layout has a few levels on every column.
    small_files = {"table.partition_by": "[]", "compaction.target_file_bytes": "15000",
                   "compaction.min_file_bytes": "7500"}  # fmt: skip
    config = generator_config(table, rows=12_000, per_batch=2_000, **small_files)
    fill(spark, config)
    before = _report(table, tmp_path / "before")
    Compactor(config, spark=spark).run_once()
    after = _report(table, tmp_path / "after")

    columns = set(config.table.clustering_columns)
    assert set(before["key_ranges"]) == set(after["key_ranges"]) == columns
    assert len(before["key_ranges"]["s_city"]) == before["status"]["files"]
    assert sum(h["files"] for h in after["size_histogram"]) == after["status"]["files"]
    # Stream files span almost every key; clustered files are narrow on every clustering column.
    for column in columns:
        assert _mean_width(before["key_ranges"][column]) > 0.8
        assert _mean_width(after["key_ranges"][column]) < 0.6 * _mean_width(before["key_ranges"][column])
    assert sum(_mean_width(after["key_ranges"][c]) for c in columns) / len(columns) < 0.5
    assert not before["rewrites"] and after["rewrites"]
    assert after["rewrites"][0]["files_removed"] == before["status"]["files"]

    page = (tmp_path / "after" / "index.html").read_text()
    assert page.count("<svg") == 2 + len(columns) + 1  # sizes, point queries, one per column, history

    browser = shutil.which("chromium-headless-shell") or shutil.which("chromium")
    assert browser, "no headless Chromium: install Debian's chromium-headless-shell (.ci/install does)"
    shot = tmp_path / "shot.png"
    subprocess.run([browser, "--no-sandbox", "--disable-gpu", f"--screenshot={shot}", "--window-size=900,2400",
                    f"file://{tmp_path / 'after' / 'index.html'}"],
                   capture_output=True, timeout=120, check=True)  # fmt: skip
    pixels = np.asarray(Image.open(shot).convert("RGB"))
    assert pixels.shape[:2] == (2400, 900)
    # Not a blank page: the plots' colours are there (bars, file ranges, history line).
    colours = {tuple(p) for p in pixels.reshape(-1, 3)[:: 7]}
    for rgb in ((0x4C, 0x78, 0xA8), (0x54, 0xA2, 0x4B)):
        assert rgb in colours, f"colour {rgb} not rendered"
    assert (pixels < 128).any(axis=2).mean() > 0.01  # text and axes
