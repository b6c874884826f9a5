"""Steady state of stream + compactor: files scanned (× N^(2/3)) against write amplification.

    python bench/steady_state.py

The real stream (built-in SSB-like generator, cluster-on-write on, one unpartitioned table) runs
micro-batches of ``--batch-rows`` rows written as files of at most ``--file-rows`` rows
(``stream.max_records_per_file``), so every micro-batch leaves many small files, each a fraction of a
target file. After every ``--compact-every``
micro-batches the compactor runs one round (the real one: planner, Spark rewrite, Delta commit),
inside the stream's batch callback, so the interleaving is the same on every run. The run stops
when the table holds ``--files`` target-size files of data (N = live bytes / target).

Policies compared: the tiered planner at several thresholds (merge fan-out, generations), the
stream alone, and "re-cluster the whole table every K compaction rounds" (the anchors' way: one
group of every live file). For each: files a point query on s_city / c_city / p_brand reads
(mean over 20 values each, from the files' min/max in the Delta log), at the end and averaged
over the second half of the run, as a multiple of the bound N^(2/3); and write amplification,
bytes written by compaction / bytes written by the stream.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pyarrow as pa

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from bench.ingest import write_section  # noqa: E402
from lakecluster.stream.ssb import BRANDS, CITIES  # noqa: E402

COLUMNS = ("s_city", "c_city", "p_brand")
POINTS = {"s_city": CITIES, "c_city": CITIES, "p_brand": BRANDS}


@dataclass(frozen=True)
class Policy:
    name: str
    kind: str  # "tiered", "none" or "full"
    overrides: dict[str, str] = field(default_factory=dict)
    full_every: int = 0  # compaction rounds between whole-table re-clusters ("full")


def _main_run(ratio: str, fanout: int | None = None) -> Policy:
    """The tiered policy with merges into the main run at ``ratio`` (``compaction.main_run_merge_ratio``)."""
    if fanout is None:
        return Policy(f"tiered + main-run merge at {ratio} (fan-out 4)", "tiered",
                      {"compaction.main_run_merge_ratio": ratio})  # fmt: skip
    return Policy(f"tiered + main-run merge at {ratio}, fan-out {fanout}", "tiered",
                  {"compaction.main_run_merge_ratio": ratio, "compaction.merge_fanout": str(fanout)})  # fmt: skip


POLICIES = (
    Policy("stream only (cluster-on-write, no compaction)", "none"),
    Policy("tiered, fan-out 4, max generation 6 (defaults)", "tiered"),
    Policy(
        "tiered, fan-out 2, max generation 8",
        "tiered",
        {"compaction.merge_fanout": "2", "compaction.max_generation": "8"},
    ),
    Policy(
        "tiered, fan-out 8, max generation 3",
        "tiered",
        {"compaction.merge_fanout": "8", "compaction.max_generation": "3"},
    ),
    Policy("tiered, no merges (max generation 1)", "tiered", {"compaction.max_generation": "1"}),
    *(_main_run(ratio, fanout=8) for ratio in ("0.5", "0.25", "0.35")),
    _main_run("1.0"),
    # the point queries here are on the clustering columns themselves, which a city's region
    # (compaction.group_by_parents) does not serve: the same policies without it
    Policy("defaults, cities not cut by their region", "tiered", {"compaction.group_by_parents": "false"}),
    *(Policy(f"tiered + main-run merge at {ratio}, fan-out {fanout}, cities not cut by their region", "tiered",
             {**_main_run(ratio, fanout=fanout).overrides, "compaction.group_by_parents": "false"})
      for ratio, fanout in (("0.35", 8), ("0.3", 8), ("0.35", 3), ("0.5", 3), ("0.5", 8), ("1.0", 4))),
    Policy("whole table re-clustered every 2 rounds", "full", full_every=2),
    Policy("whole table re-clustered every 8 rounds", "full", full_every=8),
)


def scanned(table_path: str) -> tuple[float, int, int]:
    """(mean files a point query reads, live files, live bytes), from the files' min/max."""
    from deltalake import DeltaTable

    actions = pa.table(DeltaTable(table_path).get_add_actions(flatten=True))
    per_column = []
    rng = np.random.default_rng(5)
    for c in COLUMNS:
        lo = actions[f"min.{c}"].to_numpy(zero_copy_only=False).astype(str)
        hi = actions[f"max.{c}"].to_numpy(zero_copy_only=False).astype(str)
        values = rng.choice(POINTS[c], 20, replace=False).astype(str)
        hits = (lo[None, :] <= values[:, None]) & (hi[None, :] >= values[:, None])
        per_column.append(float(hits.sum(axis=1).mean()))
    return float(np.mean(per_column)), actions.num_rows, int(pa.compute.sum(actions["size_bytes"]).as_py())


class LogBytes:
    """Bytes added by the stream and by compaction, and files added by the stream, read from the log
    incrementally: each update reads only the commits since the last one."""

    def __init__(self, table: Path) -> None:
        self.table = table
        self.next_version = 0
        self.stream = self.compaction = self.stream_files = 0

    def update(self) -> LogBytes:
        while (entry := self.table / "_delta_log" / f"{self.next_version:020d}.json").exists():
            actions = [json.loads(line) for line in entry.read_text().split("\n") if line.strip()]
            info = next((a["commitInfo"] for a in actions if "commitInfo" in a), {})
            added = sum(a["add"]["size"] for a in actions if "add" in a)
            if info.get("operation") == "OPTIMIZE":
                self.compaction += added
            else:
                self.stream += added
                self.stream_files += sum(1 for a in actions if "add" in a)
            self.next_version += 1
        return self

    @property
    def wa(self) -> float:
        return self.compaction / self.stream if self.stream else 0.0


def run_policy(spark, policy: Policy, args: argparse.Namespace, workdir: Path) -> dict:  # type: ignore[no-untyped-def]
    from lakecluster.compaction.loop import Compactor
    from lakecluster.compaction.planner import Group
    from lakecluster.config import load_config
    from lakecluster.stream.job import StreamJob
    from lakecluster.table import LakeTable, create_table
    from tests.snapshot_files import snapshot_files

    table = workdir / f"policy-{POLICIES.index(policy)}"
    overrides = {
        "table.path": str(table), "table.partition_by": "[]",
        "source.generator.rows_per_second": "100000000", "stream.max_records_per_file": str(args.file_rows),
        "source.generator.max_rows_per_trigger": str(args.batch_rows),
        "stream.trigger_interval_s": "0", "stream.progress": "false", "metrics.port": "0",
        "compaction.target_file_bytes": str(args.target_bytes),
        "compaction.min_file_bytes": str(args.target_bytes // 2),
        # No cap on merges: the bench measures how close the merge policy gets (see the tuning notes).
        "compaction.max_group_bytes": str(args.files * args.target_bytes * 4),
        "compaction.max_groups_per_run": "64", "compaction.min_input_files": "4",
        **policy.overrides,
    }  # fmt: skip
    config = load_config(overrides=overrides, environ={})
    lake = LakeTable(config)
    create_table(spark, lake.delta, lake.spec)  # the compactor opens the table the stream writes
    compactor = Compactor(config, table=lake, spark=spark)
    goal_bytes = args.files * args.target_bytes
    # After each compaction round: micro-batches so far, N, files scanned / N^(2/3), WA so far.
    rounds: list[dict[str, float]] = []
    written = LogBytes(table)
    state = {"batches": 0, "rounds": 0, "stopping": False}
    started = time.perf_counter()

    def after_batch(report) -> None:  # type: ignore[no-untyped-def]
        state["batches"] += 1
        if state["stopping"] or state["batches"] % args.compact_every:
            return
        state["rounds"] += 1
        if policy.kind == "tiered":
            compactor.run_once()
        elif policy.kind == "full" and state["rounds"] % policy.full_every == 0:
            _, files = snapshot_files(lake.delta, lake.config.table.columns, ())
            done = compactor.compact_group(Group((), tuple(files), 1, "full re-cluster"), compactor.sketches())
            assert done.result == "committed", done
        mean, _, live_bytes = scanned(str(table))
        n = live_bytes / args.target_bytes
        rounds.append({"batches": state["batches"], "n": n, "x_bound": mean / n ** (2 / 3), "wa": written.update().wa})
        if live_bytes >= goal_bytes:
            state["stopping"] = True
            threading.Thread(target=job.request_stop, daemon=True).start()  # not from inside the batch

    job = StreamJob(config, table=lake, spark=spark, on_batch=after_batch)
    job.run()
    seconds = time.perf_counter() - started
    mean, files, live_bytes = scanned(str(table))
    n = live_bytes / args.target_bytes
    written.update()
    tail = rounds[len(rounds) // 2 :]
    return {
        "policy": policy.name, "batches": state["batches"], "files": files, "n": n,
        "scanned": mean, "x_bound": mean / n ** (2 / 3),
        "x_bound_avg": float(np.mean([r["x_bound"] for r in tail])) if tail else float("nan"),
        "wa": written.wa, "stream_files": written.stream_files, "seconds": seconds, "rounds": rounds,
    }  # fmt: skip


def _pyplot():  # type: ignore[no-untyped-def]
    """matplotlib's pyplot without a display, None without the ``bench`` extra."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    return plt


def plot(results: list[dict], path: Path) -> bool:
    if (plt := _pyplot()) is None:
        return False
    fig, ax = plt.subplots(figsize=(8, 7))
    for r, color in zip(results, _colors(plt, len(results)), strict=True):
        marker = "s" if "re-clustered" in r["policy"] else ("x" if "only" in r["policy"] else "o")
        ax.scatter(r["wa"], r["x_bound_avg"], marker=marker, s=60, color=color, label=r["policy"])
    ax.set_yscale("log")
    ax.axhline(1.3, ls="--", c="grey", lw=0.8)
    ax.axvline(3, ls="--", c="grey", lw=0.8)
    ax.set_xlabel("write amplification (compaction bytes / stream bytes)")
    ax.set_ylabel("files scanned / N^(2/3) (mean over 2nd half)")
    ax.set_title("Steady state: skipping vs rewrite cost (goal: ≤ 1.3 at WA ≤ 3)")
    fig.legend(*ax.get_legend_handles_labels(), loc="lower center", ncol=2, fontsize=7, frameon=False)
    fig.tight_layout(rect=(0, 0.3, 1, 1))
    fig.savefig(path, dpi=110)
    return True


def plot_over_time(results: list[dict], path: Path) -> bool:
    if (plt := _pyplot()) is None:
        return False
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(8, 9.5), sharex=True)
    for r, color in zip(results, _colors(plt, len(results)), strict=True):
        rounds = r.get("rounds") or []
        if not rounds:
            continue
        # Micro-batches, not N, along x: re-clustering shrinks the live bytes (sorted data compresses
        # better), so N steps back after such a round.
        batches = [x["batches"] for x in rounds]
        style = "--" if "re-clustered" in r["policy"] else (":" if "only" in r["policy"] else "-")
        top.plot(batches, [x["x_bound"] for x in rounds], style, lw=1.2, color=color, label=r["policy"])
        bottom.plot(batches, [x["wa"] for x in rounds], style, lw=1.2, color=color)
    top.set_yscale("log")
    top.axhline(1.3, ls="--", c="grey", lw=0.8)
    top.set_ylabel("files scanned / N^(2/3)")
    top.set_title("Steady state over the run (goal: ≤ 1.3 × N^(2/3) at WA ≤ 3)")
    bottom.axhline(3, ls="--", c="grey", lw=0.8)
    bottom.set_ylabel("write amplification so far")
    bottom.set_xlabel("micro-batches streamed (one compaction round every few), the table growing to the end size")
    # below the plots, not over them: a dozen policies cover the lines
    fig.legend(*top.get_legend_handles_labels(), loc="lower center", ncol=2, fontsize=7, frameon=False)
    fig.tight_layout(rect=(0, 0.2, 1, 1))
    fig.savefig(path, dpi=110)
    return True


def _colors(plt, n: int) -> list:  # type: ignore[no-untyped-def]
    """A distinct hue per policy: the default cycle repeats after 10."""
    palette = [*plt.get_cmap("tab10").colors, *plt.get_cmap("Dark2").colors, *plt.get_cmap("Set1").colors]
    return [palette[i % len(palette)] for i in range(n)]


NOTES = """
How to read it: a streamed table is several runs, each clustered on its own (the files one
compaction group wrote, along the curve of its own rows). A point query reads about n^(2/3) files
of each run of n files, so runs of N/2, N/4, N/8, ... files read N^(2/3) × Σ 2^(-2i/3) ≈ 1.70 ×
N^(2/3), whatever the layout of each run. Fan-out and generations trade the number and sizes of
the runs against the bytes rewritten. A merge into the main run (`compaction.main_run_merge_ratio`)
keeps most of the table in one run: with a ratio r the runs outside it hold at most r of its bytes,
and each merge rewrites the whole table, so the smaller r, the fewer files read and the more bytes
written. Re-clustering the whole table every K rounds is the same trade on a clock instead of on
the bytes outside the main run.

"""


def verdict(results: list[dict]) -> str:
    """The goal (at most 1.3 × N^(2/3), mean over the run's second half, at a WA of at most 3),
    read on this run's results."""
    within = [r for r in results if r["wa"] <= 3 and r["rounds"]]
    if not within:
        return "No policy of this run stayed within a write amplification of 3.\n"
    best = min(within, key=lambda r: r["x_bound_avg"])
    met = [r for r in within if r["x_bound_avg"] <= 1.3]
    if met:
        names = "; ".join(f"{r['policy']} ({r['x_bound_avg']:.2f} × at WA {r['wa']:.2f})" for r in met)
        return f"\nGoal (at most 1.3 × N^(2/3), mean over the second half, at WA ≤ 3): **met** by {names}.\n"
    return (f"\nGoal (at most 1.3 × N^(2/3), mean over the second half, at WA ≤ 3): **not met**; the closest within "
            f"WA 3 is {best['policy']} at {best['x_bound_avg']:.2f} × (WA {best['wa']:.2f}).\n")


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--files", type=int, default=500, help="stop when the table holds this many target-size files")
    p.add_argument("--target-bytes", type=int, default=64 * 1024)
    p.add_argument("--batch-rows", type=int, default=12_000)
    p.add_argument("--file-rows", type=int, default=500, help="rows per stream file (stream.max_records_per_file)")
    p.add_argument("--compact-every", type=int, default=4, help="micro-batches between compaction rounds")
    p.add_argument(
        "--only",
        help="run the policies whose name contains this text; the table also shows "
        "earlier results with the same settings, kept in bench/results/ (git-ignored)",
    )
    p.add_argument("--no-write", action="store_true")
    args = p.parse_args()
    from lakecluster.config import SparkConfig
    from lakecluster.spark import get_session

    spark = get_session(SparkConfig(master="local[2]", conf={"spark.sql.shuffle.partitions": "4"}))
    policies = [q for q in POLICIES if not args.only or args.only in q.name]
    # Results are kept per policy and settings, so `--only` re-measures some and the table shows all.
    store = REPO / "bench" / "results" / "steady_state.json"
    kept = json.loads(store.read_text()) if store.exists() else {}
    settings = f"{args.files}/{args.target_bytes}/{args.batch_rows}/{args.file_rows}/{args.compact_every}"
    with tempfile.TemporaryDirectory() as tmp:
        for policy in policies:
            r = run_policy(spark, policy, args, Path(tmp))
            kept[f"{settings}|{policy.name}"] = r
            print(f"{r['policy']}: {r['x_bound']:.2f}× bound at end, {r['x_bound_avg']:.2f}× on average, "
                  f"WA {r['wa']:.2f}, {r['seconds']:.0f}s", flush=True)  # fmt: skip
    if not args.no_write:
        store.parent.mkdir(exist_ok=True)
        store.write_text(json.dumps(kept, indent=1, sort_keys=True))
    results = [kept[f"{settings}|{q.name}"] for q in POLICIES if f"{settings}|{q.name}" in kept]
    command = (f"python bench/steady_state.py --files {args.files} --target-bytes {args.target_bytes} "
               f"--batch-rows {args.batch_rows} --file-rows {args.file_rows} "
               f"--compact-every {args.compact_every}")  # fmt: skip
    lines = [
        "## Steady state: files scanned vs write amplification\n\n",
        f"`{command}` — the real stream (generator, cluster-on-write, unpartitioned) and the real compactor, "
        f"one round every {args.compact_every} micro-batches, until the table holds {args.files} target files "
        f"of {args.target_bytes // 1024} KiB; each micro-batch leaves files of at most "
        f"{args.file_rows:,} rows (stream files: see the table). Files scanned: mean over 20 point values "
        "per clustering column; N = live bytes / target. WA = bytes written by compaction / bytes written "
        "by the stream.\n\n",
        "| policy | micro-batches | stream files | files at end | N | × N^(2/3) at end "
        "| × N^(2/3) mean, 2nd half | WA | seconds |\n",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|\n",
    ]
    for r in results:
        lines.append(f"| {r['policy']} | {r['batches']} | {r['stream_files']} | {r['files']} | {r['n']:.0f} | "
                     f"{r['x_bound']:.2f} | {r['x_bound_avg']:.2f} | {r['wa']:.2f} | "
                     f"{r['seconds']:.0f} |\n")  # fmt: skip
    image = REPO / "docs" / "steady_state.png"
    if not args.no_write and plot(results, image):
        lines.append("\n![files scanned vs write amplification](steady_state.png)\n")
    over_time = REPO / "docs" / "steady_state_over_time.png"
    if not args.no_write and plot_over_time(results, over_time):
        lines.append("\n![files scanned and write amplification over the run](steady_state_over_time.png)\n")
    section = "".join(lines) + verdict(results) + NOTES
    print(section)
    if not args.no_write:
        write_section(REPO / "docs" / "benchmarks.md", "## Steady state", section)


if __name__ == "__main__":
    main()
