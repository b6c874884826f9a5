"""The cost of a string sketch outgrowing its exact table, per micro-batch.

    python bench/sketch_switch.py --batches 60 --batch-rows 100000

A string column whose distinct values keep growing (batch ``b`` draws uniformly from the first
``--growth`` × (b + 1) values, so new values keep arriving) is
sketched the way the stream does it, batch after batch: a task sketch of the batch, serialized, read
back on the driver, merged into the running sketch, and the running sketch serialized for the
sketch file. The column starts exact (value -> count) and passes ``exact_limit`` distinct values
within the first batches; from then on the summary compacts. Prints the work per batch around that
moment beside the median, and rewrites the "Sketch switch" section of docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np
import pyarrow as pa

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from bench.ingest import write_section  # noqa: E402


def batch_values(rng: np.random.Generator, rows: int, distinct: int) -> pa.Array:
    ids = rng.integers(0, distinct, rows)
    return pa.array(np.char.add("Customer#", np.char.zfill(ids.astype(str), 9)))


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--batches", type=int, default=60)
    p.add_argument("--batch-rows", type=int, default=100_000)
    p.add_argument("--growth", type=int, default=2_000, help="new distinct values per batch")
    p.add_argument("--no-write", action="store_true")
    args = p.parse_args()

    from lakecluster.sketches import ColumnSketch

    rng = np.random.default_rng(7)
    running = ColumnSketch("string")
    limit = running.exact_limit
    rows: list[tuple[int, float, bool, int]] = []  # batch, seconds, exact after it, entries
    for b in range(args.batches):
        values = batch_values(rng, args.batch_rows, args.growth * (b + 1))
        started = time.perf_counter()
        task = ColumnSketch("string")
        task.update(values)
        merged = ColumnSketch.from_bytes(task.to_bytes())
        running.merge(merged)
        running.to_bytes()
        rows.append((b, time.perf_counter() - started, running.is_exact, running.entries))
    seconds = np.array([s for _, s, _, _ in rows])
    switch = next((b for b, _, exact, _ in rows if not exact), None)
    steady = float(np.median(seconds[len(seconds) // 2 :]))
    command = (f"python bench/sketch_switch.py --batches {args.batches} --batch-rows {args.batch_rows} "
               f"--growth {args.growth}")  # fmt: skip
    out = [
        "## Sketch switch: a string column outgrows its exact table\n\n",
        f"`{command}` — one string column, {args.batch_rows:,} records a batch, batch b drawn from "
        f"{args.growth:,} × (b + 1) values, sketched as the stream does (task sketch, serialized, merged on the "
        f"driver, written); `exact_limit` {limit:,}. One core.\n\n",
        "| batch | seconds | exact after it | entries |\n|---:|---:|---|---:|\n",
    ]
    shown = sorted({0, 1, 2, *(range(max(0, (switch or 0) - 1), (switch or 0) + 3)), args.batches - 1})
    for b in shown:
        if b < len(rows):
            _, s, exact, entries = rows[b]
            out.append(f"| {b} | {s:.3f} | {'yes' if exact else 'no'} | {entries:,} |\n")
    crossing = float(seconds[switch]) if switch is not None else float("nan")
    before = float(seconds[switch - 1]) if switch else float("nan")
    out.append(
        f"\nThe batch that passes the limit (batch {switch}) took {crossing:.3f} s, {crossing / before:.1f} × the "
        f"batch before it ({before:.3f} s, still exact, fewer entries); later batches, with a full summary to merge, "
        f"take {steady:.3f} s (median of the second half), the slowest {seconds.max():.3f} s. The goal: the switch "
        "costs no more than one micro-batch's work. The running summary never replays its history: merging a "
        "batch is a merge of two sorted summaries of at most `exact_limit` entries each, then one compaction "
        "pass.\n"
    )
    section = "".join(out)
    print(section)
    if not args.no_write:
        write_section(REPO / "docs" / "benchmarks.md", "## Sketch switch", section)


if __name__ == "__main__":
    main()
