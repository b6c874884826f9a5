"""Read-only commands on a mistyped table path: one line naming it, exit 1, nothing created, no Spark."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.cli.conftest import run_cli, tree

READ_ONLY = {
    "compact --dry-run": ["compact", "--dry-run"],
    "explain": ["explain", "--where", "s_city = 'UNITED KI1'"],
    "boundaries": ["boundaries"],
    "index show": ["index", "show"],
    "vacuum --dry-run": ["vacuum", "--dry-run"],
}


@pytest.mark.parametrize("command", list(READ_ONLY))
def test_missing_table_is_one_line_naming_the_path_and_nothing_is_created(tmp_path: Path, command: str) -> None:
    missing = tmp_path / "tabel" / "lineorder"  # mistyped directory: neither it nor its parent exists
    proc = run_cli("--set", f"table.path={missing}", *READ_ONLY[command], cwd=tmp_path)
    assert proc.returncode == 1, proc.stderr
    # Reached before Spark: starting it would have failed on the subprocess's JAVA_HOME instead.
    assert proc.stderr == (
        f"lakecluster: TableNotFoundError: no Delta table at {missing} "
        "(check table.path; the stream creates it on its first run)\n"
    )
    assert proc.stdout == ""
    assert not missing.parent.exists()
    assert tree(tmp_path) == []  # nor anything else in the working directory (spark-warehouse, metastore_db)


def test_config_reads_no_table_and_creates_nothing(tmp_path: Path) -> None:
    missing = tmp_path / "tabel" / "lineorder"
    proc = run_cli("--set", f"table.path={missing}", "config", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["table"]["path"] == str(missing)
    assert proc.stderr == ""
    assert tree(tmp_path) == []
