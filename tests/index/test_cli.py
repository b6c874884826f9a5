"""`lakecluster index ...` and `lakecluster explain` as processes, on a real table."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from tests.conftest import lakecluster_cmd, subprocess_env
from tests.index.tables import COLUMNS, append, batch

pytestmark = pytest.mark.integration


def run(table: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """The CLI with a config declaring the test table (kafka source: its schema is free-form)."""
    columns = ", ".join(f'{{ name = "{c.name}", type = "{c.type}" }}' for c in COLUMNS)
    config = table.parent / "c.toml"
    config.write_text(
        f'[table]\npath = "{table}"\npartition_by = ["year"]\nclustering_columns = ["city"]\n'
        f"columns = [{columns}]\n"
        '[source]\nkind = "kafka"\n[source.kafka]\ntopics = ["t"]\n'
    )
    return subprocess.run(
        lakecluster_cmd("--config", str(config), *args),
        capture_output=True,
        text=True,
        env=subprocess_env(),
        timeout=120,
    )


def test_explain_text_and_json_and_index_commands(tmp_path: Path) -> None:
    table = tmp_path / "t"
    for i in range(3):
        append(table, batch(i * 300, 300, seed=i), i)
    assert run(table, "index", "sync").returncode == 0
    where = "city = 'PARIS' AND year >= 1993"
    text = run(table, "explain", "--where", where)
    assert text.returncode == 0, text.stderr
    assert "must be read" in text.stdout and "city = 'PARIS'" in text.stdout and "year >= 1993" in text.stdout
    out = run(table, "explain", "--where", where, "--output", "json")
    rep = json.loads(out.stdout)
    # year has 3 values, one partition dropped: one third of the files
    assert rep["files_total"] == 3 * 3 * 3 and rep["conjuncts"][1]["files_skipped"] == 9
    assert rep["files_to_read"] <= 18 and rep["bytes_skipped"] > 0
    assert rep["index_columns_read"] == ["city", "year"]
    shown = run(table, "--output", "json", "index", "show", "--column", "city")
    info = json.loads(shown.stdout)
    assert info["column"]["files"] == 27 and info["delta_version"] == 3


def test_malformed_and_unknown_column_exit_2_with_a_pointed_message(tmp_path: Path) -> None:
    table = tmp_path / "t"
    append(table, batch(0, 50, seed=1), 0)
    bad = run(table, "explain", "--where", "city = 'PARIS' AND")
    assert bad.returncode == 2 and bad.stderr.startswith("lakecluster: --where, character 19: ")
    unknown = run(table, "explain", "--where", "cty = 'PARIS'")
    assert unknown.returncode == 2 and "unknown column 'cty' (did you mean 'city'?)" in unknown.stderr
    assert "city, year" in unknown.stderr
