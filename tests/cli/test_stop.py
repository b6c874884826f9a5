"""A stop (SIGTERM) ends a service within its bound whatever it is doing, and abandons the work in
flight safely: nothing committed, nothing lost, the files written for it left to vacuum.

The work is held in flight by a test pause (``LAKECLUSTER_TEST_PAUSE_AT``) that, like a stuck
storage call or a Spark job that ignores cancellation, does not notice the stop: the bound holds
even then, and even when the pause is a native wait on the main thread that keeps Python from
running signal handlers there. Neither run starts a JVM (the pauses come before any Spark work).
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import pytest
from deltalake import DeltaTable

from lakecluster.shutdown import MARGIN_S
from tests.cli.conftest import write_ssb_table
from tests.conftest import lakecluster_cmd, read_delta, subprocess_env
from tests.generated_tables import filled_for_subprocesses, row_multiset
from tests.services.process import group_gone_within

pytestmark = pytest.mark.integration

STOP_TIMEOUT_S = 1.0  # the services' own timeout, short to keep the test short; the margin is the product's


def _stderr_until(proc: subprocess.Popen[str], text: str) -> list[str]:
    """The lines ``proc`` writes to stderr up to the first holding ``text`` (within 120 s)."""
    assert proc.stderr is not None
    lines = []
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        line = proc.stderr.readline()
        lines.append(line)
        if not line or text in line:
            break
    assert lines and text in lines[-1], "".join(lines)[-3000:]
    return lines


def _paused_then_stopped(args: list[str], pause_at: str, cwd: Path, how: str = "") -> tuple[float, int, str]:
    """Start ``lakecluster ARGS compact`` paused at ``pause_at``, SIGTERM it there; returns the
    seconds from the signal to its exit, its status and its stderr."""
    proc = subprocess.Popen(
        lakecluster_cmd(*args, "--set=metrics.port=0", f"--set=compaction.stop_timeout_s={STOP_TIMEOUT_S}",
                        "compact"),
        cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
        env=subprocess_env(LAKECLUSTER_TEST_PAUSE_AT=f"{pause_at}:600{how}"),
    )  # fmt: skip
    lines: list[str] = []
    try:
        lines = _stderr_until(proc, f"test pause of 600 s at {pause_at}")
        time.sleep(1)  # the line comes just before the pause itself
        proc.send_signal(signal.SIGTERM)
        signalled = time.monotonic()
        rest = proc.communicate(timeout=STOP_TIMEOUT_S + MARGIN_S + 30)[1]
        return time.monotonic() - signalled, proc.returncode, "".join(lines) + rest
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_a_stop_during_a_vacuum_ends_the_compactor_within_its_bound(tmp_path: Path) -> None:
    table = write_ssb_table(tmp_path / "t")
    args = [f"--set=table.path={table}", "--set=compaction.min_input_files=1000"]  # no groups: straight to vacuum
    took, status, err = _paused_then_stopped(args, "vacuum", tmp_path, how=":native")
    assert took < STOP_TIMEOUT_S + MARGIN_S + 5, f"the stop took {took:.1f} s\n{err[-3000:]}"
    assert status == 0, err[-3000:]
    assert "the group in flight still runs after" in err
    assert "Traceback" not in err
    assert DeltaTable(str(table)).history(1)[0]["operation"] != "VACUUM START"


def test_a_stop_before_a_rewrite_commits_ends_the_compactor_within_its_bound_and_commits_nothing(  # type: ignore[no-untyped-def]
    filled, tmp_path: Path
) -> None:
    table = tmp_path / "t"
    args = filled_for_subprocesses(filled, table)
    version, before = DeltaTable(str(table)).version(), row_multiset(read_delta(table))
    referenced = {Path(p).name for p in DeltaTable(str(table)).file_uris()}
    took, status, err = _paused_then_stopped(args, "compaction_before_commit", tmp_path)
    assert took < STOP_TIMEOUT_S + MARGIN_S + 5, f"the stop took {took:.1f} s\n{err[-3000:]}"
    assert status == 0, err[-3000:]
    assert DeltaTable(str(table)).version() == version, "the abandoned rewrite committed"
    assert row_multiset(read_delta(table)) == before
    written = {p.name for p in table.glob("*.parquet")} - referenced
    assert written, "the rewrite wrote no files before the pause"  # left for vacuum, referenced by no version


def test_a_stop_while_spark_starts_is_not_dropped(tmp_path: Path) -> None:
    """SIGTERM to the whole group (systemd, `timeout`) while Spark starts (held there by a test pause
    of 3 s): the JVM ignores it (the driver stops it), but the driver must not drop it: the stream
    stops within its bound, and no process outlives it."""
    proc = subprocess.Popen(
        lakecluster_cmd("--set=metrics.port=0", f"--set=stream.stop_timeout_s={STOP_TIMEOUT_S}", "stream"),
        cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
        env=subprocess_env(LAKECLUSTER_TEST_PAUSE_AT="spark_start:3"), start_new_session=True,
    )  # fmt: skip
    lines: list[str] = []
    try:
        lines = _stderr_until(proc, "test pause of 3 s at spark_start")
        time.sleep(0.5)  # the line comes just before the pause itself
        os.killpg(proc.pid, signal.SIGTERM)
        signalled = time.monotonic()
        try:
            rest = proc.communicate(timeout=STOP_TIMEOUT_S + MARGIN_S + 30)[1]
        except subprocess.TimeoutExpired:
            raise AssertionError("the stop was dropped: still running\n" + "".join(lines)[-3000:]) from None
        took, err = time.monotonic() - signalled, "".join(lines) + rest
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert took < STOP_TIMEOUT_S + MARGIN_S + 5, f"the stop took {took:.1f} s\n{err[-3000:]}"
    assert proc.returncode == 0, err[-3000:]
    assert "Traceback" not in err, err[-3000:]
    assert group_gone_within(proc.pid, 30), "the JVM or a Python worker outlived the driver"
