"""Scale: per-round work on tables of 10k to 1M files, where only the new files should cost.

    python bench/scale.py --files 10000 100000 1000000 --new-files 1000 --rounds 5

For each size, in a fresh process (its peak memory is the driver's):

1. A synthetic Delta table of the default SSB-like schema: version 0 (schema) by delta-rs, then
   one JSON commit of ``--files`` add actions with stats on every column, then a checkpoint (a
   streamed table has one). The files are settled compaction runs (``part-g06-<run>-...``, 1,000
   files each), plus a few younger runs, as the tiered policy leaves them. Data files are not
   written: nothing here reads them.
2. The compactor (default settings) opens the table and builds the column-stats index: once, cold.
3. ``--rounds`` rounds, as a live table sees them: ``--new-files`` stream files arrive in 10
   commits; then, timed, the compactor plans a round (log update included), the index syncs, and a
   point query is pruned; then the planned groups are "rewritten" (one commit removes their files
   and adds generation-1 files), as the compactor would.
4. Point-query prunes on the current index (20 values over the clustering columns), p50.

Prints a table and rewrites the "## Scale" section of docs/benchmarks.md (unless --no-write).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from bench.ingest import write_section  # noqa: E402

RUN_FILES = 1000  # files per settled run
FILE_BYTES = 128 << 20  # the default target file size


def _strings(values: np.ndarray) -> list[str]:
    return [json.dumps(v) for v in values.tolist()]


def add_lines(paths: list[str], rng: np.random.Generator, size: int, rows: int) -> list[str]:
    """One ``{"add": ...}`` JSON line per path, stats on every SSB column; the clustering columns
    get narrow ranges (a clustered file), the others wide ones."""
    from lakecluster.stream.ssb import BRANDS, CATEGORIES, CITIES, NATIONS, REGIONS, SHIPMODES

    n = len(paths)

    def narrow(values: np.ndarray, width: int) -> tuple[list[str], list[str]]:
        ordered = np.sort(values)
        lo = rng.integers(0, len(values) - width, n)
        return _strings(ordered[lo]), _strings(ordered[lo + width])

    s_city, c_city, p_brand = narrow(CITIES, 3), narrow(CITIES, 3), narrow(BRANDS, 8)
    key = rng.integers(0, 6_000_000_000, n)
    # The other columns: every file holds their whole range (JSON text of min and max).
    wide = {"lo_linenumber": ("1", "7"), "d_year": ("1992", "1998"), "lo_orderdate": ('"1992-01-01"', '"1998-12-31"'),
            "event_time": ('"2026-01-01T00:00:00.000Z"', '"2026-12-31T23:59:59.999Z"'),
            **{c: (json.dumps(min(v)), json.dumps(max(v))) for c, v in (
                ("c_nation", NATIONS), ("s_nation", NATIONS), ("c_region", REGIONS), ("s_region", REGIONS),
                ("p_category", CATEGORIES), ("lo_shipmode", SHIPMODES))},
            "lo_quantity": ("1", "50"), "lo_discount": ("0.0", "0.1"), "lo_revenue": ("1.00", "104949.50")}  # fmt: skip
    lo_rest = ",".join(f'"{k}":{lo}' for k, (lo, _) in wide.items())
    hi_rest = ",".join(f'"{k}":{hi}' for k, (_, hi) in wide.items())
    nulls = ",".join(f'"{c}":0' for c in ["lo_orderkey", "s_city", "c_city", "p_brand", *wide, "is_returned"])
    lines = []
    for i, path in enumerate(paths):
        stats = (f'{{"numRecords":{rows},"minValues":{{"lo_orderkey":{key[i]},"s_city":{s_city[0][i]},'
                 f'"c_city":{c_city[0][i]},"p_brand":{p_brand[0][i]},{lo_rest}}},'
                 f'"maxValues":{{"lo_orderkey":{key[i] + 5_000_000},"s_city":{s_city[1][i]},'
                 f'"c_city":{c_city[1][i]},"p_brand":{p_brand[1][i]},{hi_rest}}},'
                 f'"nullCount":{{{nulls}}}}}')  # fmt: skip
        lines.append(json.dumps({"add": {"path": path, "partitionValues": {}, "size": size, "modificationTime": 0,
                                         "dataChange": True, "stats": stats}}))  # fmt: skip
    return lines


def commit(root: Path, version: int, lines: list[str]) -> None:
    with open(root / "_delta_log" / f"{version:020d}.json", "x") as out:
        out.write("\n".join(lines) + "\n")


def run_paths(generation: int, files: int) -> list[str]:
    run = uuid.uuid4().hex[:12]
    return [f"part-g{generation:02d}-{run}-{i:05d}-{uuid.uuid4()}.c000.zstd.parquet" for i in range(files)]


def build_table(root: Path, files: int, rng: np.random.Generator) -> None:
    """Version 0 (schema), 1 (``files`` adds: settled runs and younger ones), a checkpoint at 1."""
    from deltalake import DeltaTable, write_deltalake

    from lakecluster.schema import arrow_schema
    from lakecluster.stream.ssb import SSB_COLUMNS

    # Checkpoints with each file's stats also as typed structs (``stats_parsed``), as Delta-Spark
    # (the stream's writer) writes them by default.
    write_deltalake(str(root), arrow_schema(SSB_COLUMNS).empty_table(),
                    configuration={"delta.checkpoint.writeStatsAsStruct": "true"})  # fmt: skip
    # Younger runs, as the tiered policy leaves them (fewer than merge_fanout per generation),
    # then settled runs of generation 6 for the rest.
    young = [run_paths(g, n) for g in range(1, 6) for n in (8, 30)][: max(1, files // 2000)]
    paths = [p for r in young for p in r]
    while len(paths) < files:
        paths += run_paths(6, min(RUN_FILES, files - len(paths)))
    lines = []
    for start in range(0, files, 100_000):
        lines += add_lines(paths[start : start + 100_000], rng, FILE_BYTES, 1_000_000)
    commit(root, 1, lines)
    DeltaTable(str(root)).create_checkpoint()
    write_sketches(root, rng)


def write_sketches(root: Path, rng: np.random.Generator) -> None:
    """Boundary sketches of the clustering columns, as the stream leaves them (the monitor's
    clustering depth per column reads them)."""
    import pyarrow as pa

    from lakecluster.sketches import BoundarySketches
    from lakecluster.stream.ssb import BRANDS, CITIES, SSB_COLUMNS
    from lakecluster.table import LakeTable

    by_name = {c.name: c for c in SSB_COLUMNS}
    sketches = BoundarySketches.empty([by_name[c] for c in ("s_city", "c_city", "p_brand")])
    for name, values in (("s_city", CITIES), ("c_city", CITIES), ("p_brand", BRANDS)):
        sketches.sketches[name].update(pa.array(values[rng.integers(0, len(values), 100_000)], pa.string()))
    sketches.delta_version = 1
    LakeTable.at(str(root)).sketches().write(sketches)


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def measure(root: Path, files: int, new_files: int, rounds: int, seed: int) -> dict:
    """One size, in this process, on the table at ``root``: open, rounds, prunes."""
    from lakecluster.compaction.loop import Compactor
    from lakecluster.config import load_config
    from lakecluster.index.prune import prune
    from lakecluster.index.spec import IndexSpec
    from lakecluster.index.sync import sync
    from lakecluster.stream.ssb import CITIES
    from lakecluster.table import LakeTable

    rng = np.random.default_rng(seed + 1)  # the build used ``seed``
    out: dict = {"files": files}
    # The table was built by another process: this one's peak memory is the driver's alone.
    out["log_mb"] = sum(p.stat().st_size for p in (root / "_delta_log").iterdir()) / 1e6
    config = load_config(overrides={"table.path": str(root)}, environ={})
    # CPU seconds beside the wall: on a shared machine the wall time also measures the others' jobs.
    started, cpu = time.perf_counter(), time.process_time()
    compactor = Compactor(config)
    compactor.plan()
    out["open_s"], out["open_cpu_s"] = time.perf_counter() - started, time.process_time() - cpu
    spec = IndexSpec.of(LakeTable(config))
    started, cpu = time.perf_counter(), time.process_time()
    sync(spec)
    out["index_build_s"], out["index_build_cpu_s"] = time.perf_counter() - started, time.process_time() - cpu
    started = time.perf_counter()  # nothing of the index read yet in this process
    prune(spec, f"s_city = '{CITIES[rng.integers(len(CITIES))]}'", index="stored")
    out["prune_cold_s"] = time.perf_counter() - started
    version = compactor.live.version
    plan_s, sync_s, prune_sync_s, observe_s = [], [], [], []
    for _ in range(rounds):
        batch = max(1, new_files // 10)
        for start in range(0, new_files, batch):
            version += 1
            commit(root, version, add_lines(run_paths(0, min(batch, new_files - start)), rng, 4 << 20, 4000))
        t0 = time.perf_counter()
        the_plan = compactor.plan()
        plan_s.append(time.perf_counter() - t0)
        assert the_plan.table_version == version, (the_plan.table_version, version)
        assert the_plan.groups, "the new files make a group"
        t0 = time.perf_counter()
        result = sync(spec)
        sync_s.append(time.perf_counter() - t0)
        assert result.to_version == version and result.mode == "incremental", result
        t0 = time.perf_counter()
        compactor.monitor.observe()
        observe_s.append(time.perf_counter() - t0)
        # The rewrite of the planned groups: their files removed, generation-1 files added.
        version += 1
        removes = [json.dumps({"remove": {"path": f.path, "deletionTimestamp": 0, "dataChange": False}})
                   for g in the_plan.groups for f in g.files]  # fmt: skip
        written = sum(g.expected_files(FILE_BYTES) for g in the_plan.groups)
        commit(root, version, removes + add_lines(run_paths(1, written), rng, FILE_BYTES, 1_000_000))
        t0 = time.perf_counter()
        prune(spec, f"s_city = '{CITIES[rng.integers(len(CITIES))]}'", index="sync")
        prune_sync_s.append(time.perf_counter() - t0)
    prune_s, kept = [], []
    for i in range(20):
        column = ("s_city", "c_city")[i % 2]
        t0 = time.perf_counter()
        r = prune(spec, f"{column} = '{CITIES[rng.integers(len(CITIES))]}'", index="stored")
        prune_s.append(time.perf_counter() - t0)
        kept.append(r.files.num_rows)
    out.update(plan_p50_s=statistics.median(plan_s), plan_max_s=max(plan_s),
               sync_p50_s=statistics.median(sync_s), sync_max_s=max(sync_s),
               observe_p50_s=statistics.median(observe_s),
               prune_p50_s=statistics.median(prune_s), prune_with_sync_p50_s=statistics.median(prune_sync_s),
               kept_mean=float(np.mean(kept)), live_files=r.files_total, peak_rss_mb=peak_rss_mb(),
               load_1m=os.getloadavg()[0])  # fmt: skip
    return out


ROWS = [
    ("table files", "files", "{:,}"),
    ("log + checkpoint MB", "log_mb", "{:,.0f}"),
    ("compactor start: open + first plan (s)", "open_s", "{:.2f}"),
    ("compactor start, CPU seconds of the process (all threads)", "open_cpu_s", "{:.2f}"),
    ("index build (s)", "index_build_s", "{:.2f}"),
    ("index build, CPU seconds of the process (all threads)", "index_build_cpu_s", "{:.2f}"),
    ("**round planning**, log update included, p50 / max (s)", ("plan_p50_s", "plan_max_s"), "{:.3f} / {:.3f}"),
    ("**index sync** after the new files, p50 / max (s)", ("sync_p50_s", "sync_max_s"), "{:.3f} / {:.3f}"),
    ("table gauges (monitor), p50 (s)", "observe_p50_s", "{:.3f}"),
    ("**prune**, point query, index current, p50 (s)", "prune_p50_s", "{:.3f}"),
    ("prune with its sync after a rewrite commit, p50 (s)", "prune_with_sync_p50_s", "{:.3f}"),
    ("first prune of the process, nothing of the index read before (s)", "prune_cold_s", "{:.3f}"),
    ("files kept per point query (mean)", "kept_mean", "{:,.0f}"),
    ("driver peak RSS (MiB)", "peak_rss_mb", "{:,.0f}"),
    ("the machine's load average (1 min) at the end of the size's run", "load_1m", "{:.1f}"),
]


# Goals at the largest size (issue 23): (result key, at most, unit).
GOALS = (
    ("compactor start", "open_s", 3.0, "s"), ("index build", "index_build_s", 10.0, "s"),
    ("round planning p50", "plan_p50_s", 2.0, "s"), ("index sync p50", "sync_p50_s", 1.0, "s"),
    ("prune p50", "prune_p50_s", 0.1, "s"), ("table gauges p50", "observe_p50_s", 0.1, "s"),
    ("driver peak RSS", "peak_rss_mb", 3072.0, "MiB"),
)

EARLIER = """
Reading it: the compactor's start reads the last checkpoint's path, size, partition and
clustering-column stats only (from its `stats_parsed` structs), then the commits after it
(`lakecluster/table/snapshot.py`); the rounds then follow the log commit by commit. Prune reads
the live files' numbers and counts and the queried column's entries, kept in memory from the
previous prune of the process (index files never change), and the paths of the files it keeps
only; the first prune of a process reads them from storage.
"""


def render(results: list[dict], args: argparse.Namespace) -> str:
    cmd = ("python bench/scale.py --files " + " ".join(str(r["files"]) for r in results)
           + f" --new-files {args.new_files} --rounds {args.rounds}")  # fmt: skip
    head = "| | " + " | ".join(f"{r['files']:,} files" for r in results) + " |\n"
    head += "|---|" + "---:|" * len(results) + "\n"
    body = ""
    for label, key, fmt in ROWS[1:]:
        cells = [fmt.format(*(r[k] for k in key)) if isinstance(key, tuple) else fmt.format(r[key]) for r in results]
        body += f"| {label} | " + " | ".join(cells) + " |\n"
    return (f"## Scale: per-round work on tables of up to {max(r['files'] for r in results):,} files\n\n"
            f"`{cmd}` — synthetic Delta tables (default SSB-like schema, stats on every column, "
            f"a checkpoint; data files not written) of settled compaction runs; each of {args.rounds} rounds: "
            f"{args.new_files:,} new stream files in 10 commits, then the compactor plans (default settings), "
            "the index syncs, the planned groups are committed as rewritten, and a point query is pruned. "
            "Each size is built by one process and measured in a fresh one (whose peak memory is the "
            "driver's).\n\n" + head + body + goals(results[-1]) + EARLIER)


def goals(largest: dict) -> str:
    """Each goal beside this run's figure at the largest size."""
    lines = [f"\nGoals at {largest['files']:,} files, this run:\n"]
    for label, key, limit, unit in GOALS:
        value = largest[key]
        verdict = "met" if value <= limit else f"missed: {value / limit:.2f} × the goal"
        shown = f"{value:,.0f}" if value >= 100 else f"{value:.3g}"
        lines.append(f"- {label}: {shown} {unit} (goal <= {limit:g} {unit}): {verdict}")
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--files", type=int, nargs="+", default=[10_000, 100_000, 1_000_000])
    ap.add_argument("--new-files", type=int, default=1000)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--child", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--build", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--table", help=argparse.SUPPRESS)
    ap.add_argument("--no-write", action="store_true")
    args = ap.parse_args()
    if args.build:
        build_table(Path(args.table), args.build, np.random.default_rng(args.seed))
        return
    if args.child:
        print(json.dumps(measure(Path(args.table), args.child, args.new_files, args.rounds, args.seed)))
        return
    results = []
    for n in args.files:
        with tempfile.TemporaryDirectory(prefix="lc-scale-") as tmp:
            table = str(Path(tmp) / "table")
            common = ["--table", table, "--new-files", str(args.new_files), "--rounds", str(args.rounds),
                      "--seed", str(args.seed)]  # fmt: skip
            started = time.perf_counter()
            for step in (["--build", str(n)], ["--child", str(n)]):
                proc = subprocess.run([sys.executable, __file__, *step, *common], capture_output=True, text=True,
                                      check=False)  # fmt: skip
                if proc.returncode != 0:
                    sys.exit(f"{n:,} files failed:\n{proc.stderr[-4000:]}")
                if step[0] == "--build":
                    build_s = time.perf_counter() - started
        results.append({**json.loads(proc.stdout.strip().splitlines()[-1]), "build_s": build_s})
        print(json.dumps(results[-1]), flush=True)
    section = render(results, args)
    print(section)
    if not args.no_write:
        write_section(REPO / "docs" / "benchmarks.md", "## Scale", section)


if __name__ == "__main__":
    main()
