"""Two compactors with the most aggressive cleanup the docs allow, killed at random points (before,
during and after their commits, or wherever a SIGKILL lands) round after round: after every round
the table reads the same rows, none twice, with delta-rs and DuckDB, and the index matches the log."""

from __future__ import annotations

import contextlib
import os
import random
import signal
import subprocess
import time
from collections import Counter
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import DeltaTable

from lakecluster.compaction.vacuum import vacuum_all
from lakecluster.index.spec import IndexSpec
from lakecluster.index.sync import sync
from lakecluster.table import LakeTable
from tests.conftest import duckdb_connection, lakecluster_cmd, read_delta, subprocess_env
from tests.generated_tables import SMALL, fill, generator_config, row_multiset
from tests.index.test_concurrency import assert_sound_and_current

pytestmark = pytest.mark.integration

# The shortest retention Delta honours while other writers run: one hour (it rounds to whole hours,
# and 0 would delete what a concurrent compactor has just written). The scheduled vacuums run
# through the rounds; the final one, alone on the table, uses 0.
RETENTION_HOURS = 1
CHAOS = {
    **SMALL,
    "table.partition_by": "[]",
    "compaction.interval_s": "0.2",
    "compaction.max_groups_per_run": "1",
    "compaction.target_file_bytes": "40000",
    "compaction.min_file_bytes": "20000",
    "vacuum.interval_s": "3",
    "vacuum.retention_hours": str(RETENTION_HOURS),
    "vacuum.force": "true",
}
# How the two compactors of each round die: at a fault point of their first commit (before it, or
# just after it, before the index sync and metrics), or by a SIGKILL of the whole process group at
# a random moment after their JVM is up (session start, planning, the rewrite, the commit, the
# index sync or the scheduled vacuum). Each way in each round, beside one that dies another way;
# bench/chaos.py runs the long version (a stream, two compactors, index syncs, for 30 minutes).
ROUNDS = (
    ("compaction_before_commit", "sigkill"),
    ("sigkill", "compaction_after_commit"),
)


def _start(args: list[str], death: str, log: Path) -> subprocess.Popen[bytes]:
    env = subprocess_env(LAKECLUSTER_TEST_CRASH_AT=death) if death != "sigkill" else subprocess_env()
    return subprocess.Popen(lakecluster_cmd(*args, "compact"), env=env, stdout=log.open("wb"),
                            stderr=subprocess.STDOUT, start_new_session=True)  # fmt: skip


def _jvm_running(pid: int) -> bool:
    """Whether the driver ``pid`` has started its JVM (a child running java)."""
    for child in Path(f"/proc/{pid}/task/{pid}/children").read_text().split():
        with contextlib.suppress(OSError):
            if b"java" in Path(f"/proc/{child}/cmdline").read_bytes().split(b"\0")[0]:
                return True
    return False


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    # The whole process group, as a container kill does: the driver, its JVM, the Python workers.
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)


def _run_round(procs: list[subprocess.Popen[bytes]], deaths: tuple[str, ...], rng: random.Random) -> None:
    """Until both are dead: a SIGKILL 0-15 s after the JVM is up, or death at the fault point (a
    compactor whose group the other one took never reaches it: it is killed 30 s after its JVM)."""
    kill_at: dict[int, float] = {}
    deadline = time.monotonic() + 300
    while any(p.poll() is None for p in procs):
        assert time.monotonic() < deadline, "a compactor did not start its JVM in 300 s"
        for i, (p, death) in enumerate(zip(procs, deaths, strict=True)):
            if p.poll() is not None:
                continue
            if i not in kill_at:
                if _jvm_running(p.pid):
                    kill_at[i] = time.monotonic() + (rng.uniform(0, 15) if death == "sigkill" else 30)
            elif time.monotonic() >= kill_at[i]:
                _kill_group(p)
        time.sleep(0.1)
    for p in procs:
        _kill_group(p)  # a driver that died at a fault point leaves its JVM to die with the pipe; no waiting
        p.wait(timeout=60)


def _assert_rows_unchanged(table: Path, before: Counter, when: str) -> None:
    assert row_multiset(read_delta(table)) == before, when
    count, distinct = duckdb_connection().execute(
        f"SELECT count(*), count(DISTINCT lo_orderkey) FROM delta_scan('{table}')"
    ).fetchone()  # fmt: skip
    assert count == distinct == sum(before.values()), f"{when}: DuckDB reads {count} rows, {distinct} keys"


def test_killed_compactors_and_vacuum_round_after_round_never_change_a_row(spark, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    table = tmp_path / "t"
    args = [f"--set=table.path={table}", *[f"--set={k}={v}" for k, v in CHAOS.items()]]
    rng = random.Random(20261123)

    for round_no, deaths in enumerate(ROUNDS):
        # New small files each round: the compactors always have a group to fight over.
        rows = 9_000 + 3_000 * round_no
        config = generator_config(table, rows=rows, per_batch=3_000, **{**CHAOS, "stream.max_records_per_file": "250"})
        fill(spark, config)
        before = row_multiset(read_delta(table))
        assert sum(before.values()) == rows
        logs = [tmp_path / f"r{round_no}-{i}.log" for i in range(2)]
        procs = [_start(args, death, log) for death, log in zip(deaths, logs, strict=True)]
        _run_round(procs, deaths, rng)
        codes = [p.returncode for p in procs]
        tails = "\n".join(log.read_text()[-1500:] for log in logs)
        # 137: died at its fault point; -9: SIGKILL. Anything else is a failure of its own.
        assert all(c in (137, -signal.SIGKILL) for c in codes), (deaths, codes, tails)
        # Readable by both readers, every row exactly once, after each round.
        _assert_rows_unchanged(table, before, f"after round {round_no} {deaths}: {codes}\n{tails}")

    history = DeltaTable(str(table)).history()
    assert any(h["operation"] == "OPTIMIZE" for h in history), "no compaction committed in any round"

    # With no compactor left running, a vacuum that keeps nothing unreferenced sweeps every
    # leftover of the killed rewrites, and nothing the table references.
    vacuum_all(spark.newSession(), LakeTable(config), config.vacuum, retention_hours=0, force=True)
    live = set(pa.table(DeltaTable(str(table)).get_add_actions(flatten=True))["path"].to_pylist())
    on_disk = {p.name for p in table.glob("*.parquet")}
    assert on_disk == live, f"left: {sorted(on_disk - live)[:3]}, missing: {sorted(live - on_disk)[:3]}"
    _assert_rows_unchanged(table, before, "after the final vacuum")
    # The index, synced by the compactors between kills, agrees with the log.
    spec = IndexSpec.of(LakeTable(config))
    sync(spec)
    assert_sound_and_current(spec, table)
