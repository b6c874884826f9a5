"""Start: how soon ``lakecluster run`` speaks, starts Spark and prints its first batch, and how long
an empty vacuum takes, as a new user sees them (jars cached, a fresh table each time).

    python bench/startup.py --runs 3

Each run starts ``lakecluster run --max-batches 2`` (built-in generator, default settings, a new
table in a temporary directory) and stamps every line it prints, stdout and stderr, with the
seconds since the process started. Then ``lakecluster vacuum`` on that young table, timed. Prints
a table with each run and the median, and rewrites the "## Start" section of docs/benchmarks.md
(unless --no-write).
"""

from __future__ import annotations

import argparse
import itertools
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from ingest import write_section

DOCS = Path(__file__).resolve().parent.parent / "docs" / "benchmarks.md"
LAKECLUSTER = [sys.executable, "-m", "lakecluster"]
GOAL_FIRST_BATCH_S = 20.0
GOAL_EMPTY_VACUUM_S = 10.0


def stamped(command: list[str], cwd: Path) -> list[tuple[float, str]]:
    """Every line ``command`` prints (stdout and stderr), with the seconds since it started."""
    started = time.monotonic()
    proc = subprocess.Popen(command, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    assert proc.stdout is not None
    lines = [(time.monotonic() - started, line.rstrip("\n")) for line in proc.stdout]
    proc.wait()
    lines.append((time.monotonic() - started, f"exit {proc.returncode}"))
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(command)} failed:\n" + "\n".join(t for _, t in lines[-20:]))
    return lines


def first(lines: list[tuple[float, str]], pattern: str) -> float:
    return next(s for s, t in lines if re.search(pattern, t))


def one_run(port: int) -> dict[str, float]:
    with tempfile.TemporaryDirectory(prefix="lakecluster-start-") as tmp:
        cwd = Path(tmp)
        lines = stamped([*LAKECLUSTER, f"--set=metrics.port={port}", "run", "--max-batches", "2"], cwd)
        gaps = [b - a for (a, _), (b, _) in itertools.pairwise(lines)]
        started = time.monotonic()
        stamped([*LAKECLUSTER, "vacuum"], cwd)
        vacuum_s = time.monotonic() - started
        shutil.rmtree(cwd / "lakecluster-data", ignore_errors=True)
    return {
        "first line": lines[0][0],
        "metrics URL": first(lines, r"metrics on http"),
        "Spark started": first(lines, r"starting Spark .*: done"),
        "first batch line": first(lines, r"^batch\s+0 "),
        "first batch with rows": first(lines, r"^batch\s+\d+\s+rows\s+[1-9]"),
        "longest silence": max(gaps),
        "empty vacuum (CLI, new table)": vacuum_s,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--port", type=int, default=9481)
    parser.add_argument("--no-write", action="store_true")
    args = parser.parse_args()
    runs = [one_run(args.port) for _ in range(args.runs)]
    keys = list(runs[0])
    header = "| seconds after start | " + " | ".join(f"run {i + 1}" for i in range(len(runs))) + " | median |"
    rows = [header, "|---|" + "---:|" * (len(runs) + 1)]
    for key in keys:
        values = [r[key] for r in runs]
        median = statistics.median(values)
        rows.append(f"| {key} | " + " | ".join(f"{v:.1f}" for v in values) + f" | **{median:.1f}** |")
    table = "\n".join(rows)
    print(table)
    first_batch = statistics.median(r["first batch line"] for r in runs)
    vacuum = statistics.median(r["empty vacuum (CLI, new table)"] for r in runs)
    silence = max(r["longest silence"] for r in runs)
    verdict = (
        f"First batch line, median: **{first_batch:.1f} s** (goal <= {GOAL_FIRST_BATCH_S:g} s: "
        f"{'met' if first_batch <= GOAL_FIRST_BATCH_S else 'not met'}). Empty vacuum, median: **{vacuum:.1f} s** "
        f"(goal <= {GOAL_EMPTY_VACUUM_S:g} s: {'met' if vacuum <= GOAL_EMPTY_VACUUM_S else 'not met'}). "
        f"Longest silence between two lines: {silence:.1f} s (goal < 10 s)."
    )
    print(verdict)
    if not args.no_write:
        section = (
            "## Start: first lines, first batch, empty vacuum\n\n"
            f"`python bench/startup.py --runs {args.runs}` — `lakecluster run --max-batches 2` with the defaults "
            "(built-in generator, a new local table), jars and the JVM class archive cached, each line stamped "
            "with the seconds since the process started (stdout and stderr); then `lakecluster vacuum` on that "
            "new table. Batch 0 of the generator is empty (the generator's rate has produced nothing when the "
            "stream starts); batch 1 holds the rows produced meanwhile.\n\n"
            f"{table}\n\n{verdict}\n"
        )
        write_section(DOCS, "## Start", section)


if __name__ == "__main__":
    main()
