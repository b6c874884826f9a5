"""The command line as a user runs it: subprocesses that must not start Spark, small real tables."""

from __future__ import annotations

import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import write_deltalake

from lakecluster.schema import arrow_schema
from lakecluster.stream.generator import GeneratorSettings, generate
from lakecluster.stream.ssb import SSB_COLUMNS
from tests.conftest import lakecluster_cmd, subprocess_env

# JAVA_HOME of every subprocess that must fail or finish before Spark starts: were Spark started,
# its launcher would fail on this path ("Java gateway process exited"), not with the expected error.
NO_JAVA_HOME = "/nonexistent/java-home-spark-must-not-start"


def run_cli(*args: str, cwd: Path, timeout: float = 60, **env: str) -> subprocess.CompletedProcess[str]:
    """``python -m lakecluster ARGS`` in ``cwd``; a Spark start would fail (``NO_JAVA_HOME``)."""
    return subprocess.run(
        lakecluster_cmd(*args),
        cwd=cwd,
        capture_output=True,
        text=True,
        env=subprocess_env(JAVA_HOME=NO_JAVA_HOME, **env),
        timeout=timeout,
    )


def write_ssb_table(path: Path, rows: int = 2000) -> Path:
    """A Delta table of the default schema (``SSB_COLUMNS``, partitioned by d_year), written by delta-rs."""
    batch = generate(0, rows, GeneratorSettings(), SSB_COLUMNS)
    assert batch.schema == arrow_schema(SSB_COLUMNS)
    write_deltalake(str(path), pa.Table.from_batches([batch]), partition_by=["d_year"])
    return path


def tree(root: Path) -> list[str]:
    """Every path under ``root``, relative and sorted: what a command left behind."""
    return sorted(str(p.relative_to(root)) for p in root.rglob("*"))


@pytest.fixture
def ssb_table(tmp_path: Path) -> Path:
    """A small table (2,000 rows, 7 partitions) of the default schema at ``tmp_path/lineorder``."""
    return write_ssb_table(tmp_path / "lineorder")


@pytest.fixture
def busy_port() -> Iterator[int]:
    """A port on 127.0.0.1 that another socket listens on for the duration of the test."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        yield int(s.getsockname()[1])
