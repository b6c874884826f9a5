"""A service's first lines come at once: where it reads and writes, where its metrics are, and
that Spark is starting (here it cannot: the subprocess's JAVA_HOME points nowhere)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.cli.conftest import run_cli
from tests.services.ports import free_port


@pytest.mark.parametrize("command", ["run", "stream"])
def test_the_first_lines_name_the_metrics_url_and_the_spark_start(tmp_path: Path, command: str) -> None:
    port = free_port()
    proc = run_cli(f"--set=metrics.port={port}", "--set=stream.progress=true", command, cwd=tmp_path)
    assert proc.returncode == 1  # Spark cannot start here
    first = proc.stdout.splitlines()[0]
    assert first.startswith(f"lakecluster {command}: generator -> ")
    assert f"metrics on http://127.0.0.1:{port}/metrics" in first
    assert proc.stderr.splitlines()[0] == "lakecluster: starting Spark (local[2]) ..."
    assert "lakecluster: starting Spark (local[2]): failed after" in proc.stderr


def test_metrics_off_is_said_too(tmp_path: Path) -> None:
    proc = run_cli("--set=metrics.port=0", "stream", cwd=tmp_path)
    assert "metrics off (metrics.port = 0)" in proc.stdout.splitlines()[0]
