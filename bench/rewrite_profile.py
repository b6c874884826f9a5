"""Where a compaction round's time goes, beside delta-rs z_order and Delta's OPTIMIZE ZORDER BY.

    python bench/rewrite_profile.py --rows 1000000 --files 1000

The same fragmented input (``--files`` random appends of SSB-like rows, with a Delta checkpoint as a
streamed table has) is rewritten by delta-rs ``optimize.z_order``, Delta's ``OPTIMIZE ZORDER BY``
and lakecluster's compactor, each on its own copy, warm (a small run of each precedes), alternating
for ``--rounds`` rounds with the fastest of each kept. The compactor's round is split into phases:
driver timers around planning, the rewrite and the commit, and Spark's own stage times (from the
event log) inside the rewrite. Prints a table and rewrites the "Rewrite profile" section of
docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import functools
import json
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from bench.anchors import delta_zorder  # noqa: E402
from bench.ingest import write_section  # noqa: E402
from bench.skipping import (  # noqa: E402
    delta_rs_zorder,
    file_of_rows,
    lakecluster_compactor,
    make_table,
    prepare_compactor,
    write_random_files,
)

# Spark stages of a rewrite in Spark tasks, by the line of compaction/rewrite_tasks.py whose action
# ran them (the first text a line holds wins).
STAGE_PHASES = (
    ("_merge_counts(", "rows per cell: the clustering columns read in tasks (pyarrow), cell keys (numpy)"),
    (".partitionBy(", "read the group in tasks, key it, split it by output file (the shuffle's map side)"),
    (".collect()", "sort each file's rows by key and write it (the shuffle's reduce side)"),
)


COMMIT_PHASE = "commit (Delta transaction, post-commit snapshot)"


class PhaseTimer:
    """Wall time of chosen functions, summed by label, while installed."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}
        self._undo: list[Callable[[], None]] = []

    def wrap(self, owner: Any, name: str, label: str) -> None:
        original = getattr(owner, name)

        @functools.wraps(original)
        def timed(*args: Any, **kwargs: Any) -> Any:
            started = time.perf_counter()
            try:
                return original(*args, **kwargs)
            finally:
                self.seconds[label] = self.seconds.get(label, 0.0) + time.perf_counter() - started

        setattr(owner, name, timed)
        self._undo.append(lambda: setattr(owner, name, original))

    def remove(self) -> None:
        while self._undo:
            self._undo.pop()()


def rewrite_lines() -> dict[int, str]:
    """Line numbers in compaction/rewrite_tasks.py of the actions in ``STAGE_PHASES``."""
    lines = (REPO / "compaction" / "rewrite_tasks.py").read_text().splitlines()
    out = {}
    for i, line in enumerate(lines):
        phase = next((phase for needle, phase in STAGE_PHASES if needle in line), None)
        if phase is not None:
            out[i + 1] = phase
    return out


def stage_seconds(event_dir: Path, since_ms: float, until_ms: float) -> dict[str, float]:
    """Wall seconds of the rewrite's Spark stages between two moments, by phase. Delta's own jobs
    (commit, snapshot) are left out: the driver timer around the commit holds them."""
    by_line = rewrite_lines()
    out: dict[str, float] = {}
    for log in event_dir.rglob("events_*"):
        for line in log.read_text().splitlines():
            try:
                event = json.loads(line)
            except json.JSONDecodeError:  # the line Spark is writing right now
                continue
            if event.get("Event") != "SparkListenerStageCompleted":
                continue
            stage = event["Stage Info"]
            if not since_ms <= stage["Submission Time"] <= until_ms:
                continue
            name = stage["Stage Name"]
            phase = next((p for n, p in by_line.items() if name.endswith(f"rewrite_tasks.py:{n}")), None)
            if phase is None:
                continue
            out[phase] = out.get(phase, 0.0) + (stage["Completion Time"] - stage["Submission Time"]) / 1000
    return out


def profile_compactor(spark: Any, table: Any, files: int, source: Path, work: Path, event_dir: Path,
                      engine: str) -> tuple[float, dict[str, float]]:  # fmt: skip
    """One compactor round (``engine``: local or spark) and its seconds by phase."""
    from lakecluster.clustering import ClusteringLayout
    from lakecluster.compaction import group_rewrite, loop, rewrite_local

    timer = PhaseTimer()
    timer.wrap(loop.Compactor, "plan", "plan the round (Delta log)")
    timer.wrap(group_rewrite.GroupRewriter, "_rewrite", "rewrite")
    timer.wrap(group_rewrite, "commit_rewrite", COMMIT_PHASE)
    timer.wrap(loop.Compactor, "sync_index", "column-stats index sync")
    if engine == "local":
        timer.wrap(rewrite_local, "read_local", "read the group (pyarrow, all columns)")
        timer.wrap(ClusteringLayout, "keys", "cell and sort keys (numpy)")
    since = time.time() * 1000
    try:
        _, total = lakecluster_compactor(spark, table, files, source, work / engine, engine)
    finally:
        timer.remove()
    until = time.time() * 1000
    phases = dict(timer.seconds)
    rewrite = phases.pop("rewrite", 0.0)
    accounted = sum(phases.values()) + rewrite
    if engine == "local":
        timed = ("read the group (pyarrow, all columns)", "cell and sort keys (numpy)")
        inside = sum(phases.get(k, 0.0) for k in timed)
        phases["sort rows by key, write Parquet files (pyarrow, a thread per core)"] = max(0.0, rewrite - inside)
    else:
        time.sleep(1)  # the event log is flushed by a listener thread
        stages = stage_seconds(event_dir, since, until)
        phases.update(stages)
        phases["rewrite: driver work between Spark stages (planning files, py4j)"] = max(
            0.0, rewrite - sum(stages.values()))  # fmt: skip
    phases["rest of the round (sketches, ranges, metrics)"] = max(0.0, total - accounted)
    return total, phases


def compact_once_fresh(table: Any, files: int, source: Path, work: Path) -> float:
    """``lakecluster compact --once`` in a new process on a copy: what a user of the command waits
    for, Python and JVM start included; seconds."""
    cfg = prepare_compactor(table, files, source, work)
    started = time.perf_counter()
    subprocess.run([sys.executable, "-m", "lakecluster", "--config", str(cfg), "compact", "--once"], check=True,
                   capture_output=True, cwd=work)  # fmt: skip
    seconds = time.perf_counter() - started
    file_of_rows(work / "lakecluster", table.num_rows)  # every row still there, once
    return seconds


METHODS = (
    ("delta-rs optimize.z_order", "delta-rs"),
    ("Delta OPTIMIZE ZORDER BY", "delta"),
    ("lakecluster compactor, default: rewrite in its own process (commit and index sync included)", "local"),
    ("lakecluster compactor, rewrite in Spark tasks (`local_rewrite_max_bytes = 0`)", "spark"),
    ("`lakecluster compact --once` in a new process (Python and JVM start, the JVM's first commit)", "once"),
)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--rows", type=int, default=1_000_000)
    p.add_argument("--files", type=int, default=1000)
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--no-write", action="store_true")
    args = p.parse_args()

    from deltalake import DeltaTable

    from lakecluster.config import SparkConfig
    from lakecluster.spark import get_session

    event_dir = Path(tempfile.mkdtemp(prefix="bench-events-"))
    spark = get_session(SparkConfig(master="local[2]", conf={
        "spark.eventLog.enabled": "true", "spark.eventLog.dir": str(event_dir), "spark.eventLog.compress": "false",
    }))  # fmt: skip
    table = make_table(args.rows, zipf=False)
    best: dict[str, float] = {}
    profiles: dict[str, tuple[float, dict[str, float]]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        small = make_table(20_000, False)
        write_random_files(small, 20, work / "warm" / "random")
        for engine in ("local", "spark"):  # JVM, workers warm
            lakecluster_compactor(spark, small, 20, work / "warm" / "random", work / "warm" / engine, engine)
        delta_zorder(spark, work / "warm" / "random", work / "warm" / "delta", 10_000)
        source = work / "random"
        in_bytes = write_random_files(table, args.files, source)
        DeltaTable(str(source)).create_checkpoint()
        # As a table lakecluster's stream wrote has: each commit through delta-spark leaves Delta's checksum
        # file (.crc), which the next transaction starts from instead of reconstructing the snapshot. A
        # commit that sets Delta's default checkpoint interval writes it.
        spark.sql(f"ALTER TABLE delta.`{source}` SET TBLPROPERTIES ('delta.checkpointInterval' = '10')")
        target = max(1, in_bytes // args.files)
        print(f"{args.rows:,} rows in {args.files} files, {in_bytes / 1e6:.1f} MB; target {target:,} bytes", flush=True)
        for r in range(args.rounds):
            round_dir = work / f"round{r}"
            round_dir.mkdir()
            seconds = {"delta-rs": delta_rs_zorder(table, args.files, source, round_dir)[1],
                       "delta": delta_zorder(spark, source, round_dir / "delta", target)}  # fmt: skip
            (round_dir / "once").mkdir()
            seconds["once"] = compact_once_fresh(table, args.files, source, round_dir / "once")
            for engine in ("local", "spark"):
                run = profile_compactor(spark, table, args.files, source, round_dir, event_dir, engine)
                seconds[engine] = run[0]
                if engine not in profiles or run[0] < profiles[engine][0]:
                    profiles[engine] = run
            for key, value in seconds.items():
                best[key] = min(best.get(key, value), value)
            print(f"round {r + 1}: " + ", ".join(f"{k} {v:.1f} s" for k, v in seconds.items()), flush=True)
            shutil.rmtree(round_dir)
    shutil.rmtree(event_dir, ignore_errors=True)

    mb = in_bytes / 1e6
    command = f"python bench/rewrite_profile.py --rows {args.rows} --files {args.files} --rounds {args.rounds}"
    out = [
        "## Rewrite profile: where a compaction round's time goes\n\n",
        f"`{command}` — {args.rows:,} SSB-like rows in {args.files} random files ({mb:.1f} MB, a Delta checkpoint "
        f"and checksum file as a streamed table has), rewritten to about {args.files} files by each method on its "
        f"own copy, warm (but the last row), Spark local[2] on 2 cores; fastest of {args.rounds} alternating "
        "rounds.\n\n",
        "| method | seconds | MB/s | rate vs delta-rs |\n|---|---:|---:|---:|\n",
    ]
    for label, key in METHODS:
        out.append(f"| {label} | {best[key]:.1f} | {mb / best[key]:.2f} | {best['delta-rs'] / best[key]:.2f} |\n")
    for engine, title in (("local", "in its own process (the default for groups up to 128 MiB)"),
                          ("spark", "in Spark tasks")):  # fmt: skip
        total, phases = profiles[engine]
        out.append(f"\nlakecluster's fastest round with the rewrite {title} ({total:.1f} s), by phase:\n\n"
                   "| phase | seconds | share |\n|---|---:|---:|\n")  # fmt: skip
        for label, value in sorted(phases.items(), key=lambda kv: -kv[1]):
            out.append(f"| {label} | {value:.2f} | {value / total:.0%} |\n")
    commit = profiles["local"][1].get(COMMIT_PHASE, 0.0)
    out.append(f"\nThe commit of {args.files:,} removes and about {args.files:,} adds took {commit:.2f} s of the "
               f"fastest local round; the local round ran at {best['delta-rs'] / best['local']:.2f} × delta-rs's "
               f"MB/s and {best['delta'] / best['local']:.2f} × Delta ZORDER's.\n")
    section = "".join(out) + NOTES
    print(section)
    if not args.no_write:
        write_section(REPO / "docs" / "benchmarks.md", "## Rewrite profile", section)


NOTES = """
Reading it: phases are wall time around the driver's calls; with the rewrite in Spark tasks, its stages
are wall time on 2 cores from Spark's event log (the commit's time includes the Spark jobs Delta
runs for conflict checks and the post-commit snapshot). The commit starts from the checksum file
(`.crc`) Delta left at the newest version, as on a table lakecluster's stream writes; on a table
whose newest version has none (written by another engine), Delta reconstructs the snapshot in the
first commit (several seconds at this size) and writes one. Every 10th version Delta also writes a
checkpoint inside the commit that lands on it.
"""


if __name__ == "__main__":
    main()
