"""Production size: the flattened SSB table at scale factor 5 in micro-batch fragments, rewritten to
128 MiB files by lakecluster and by the anchors, one method after another, each in a fresh process.

    python bench/production.py --scale-factor 5
    python bench/production.py --scale-factor 5 --target-mib 1024
    python bench/production.py --scale-factor 5 --target-mib 32 --columns s_city,c_city,p_brand1

1. The input: ``6,000,000 x SF`` rows of the full flattened SSB schema from the built-in generator,
   in generator order, as fragments of ``--fragment-rows`` rows (one append and one file each, as
   micro-batches leave them), with the clustering columns' boundary sketches the stream keeps and a
   Delta checksum on the newest version (as a stream-written table has).
2. Each method on its own copy (data files hard-linked, the log copied), in a new process whose
   whole process tree (Python and JVM) is sampled for its peak RSS, and for the largest peak of a
   Spark Python worker (the tasks it runs), with delta-rs stopped above ``--cap-mib`` (reported as
   failed): lakecluster's compactor (one group of the whole table, ``compaction.max_group_bytes``
   above it), Delta ``OPTIMIZE ZORDER BY``, liquid clustering (``CLUSTER BY`` + ``OPTIMIZE FULL``)
   and delta-rs ``optimize.z_order``, every one to ``--target-mib`` files. Throughput: input MB /
   seconds from the first read to the committed version.
3. On each layout (and the input), in another new process: the 13 SSB queries through Spark +
   delta-spark (files and bytes read by Spark's scan metrics, seconds of one run after a warm-up), and the
   correctness checks: the row count and an order-independent hash of every column, read once by
   delta-rs and once by DuckDB's delta extension, must equal the input's, and every query must
   return the input's answer; the sizes of its files (min, median, max as x the target, and how
   many fall outside 0.85-1.15 x). The layout is deleted once measured.

Prints a table and rewrites the "## Production size" section of docs/benchmarks.md (unless
--no-write; other target sizes and columns have a section each). Disk: the input plus one layout
(~2 x 4 GB at scale factor 5).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import pyarrow as pa

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from bench.ingest import write_section  # noqa: E402
from bench.process_tree import tree_stats  # noqa: E402
from bench.skipping import compactor_config  # noqa: E402
from bench.ssb import QUERIES  # noqa: E402

COLUMNS = ["lo_orderdate", "s_region", "c_region", "p_brand1"]
METHODS = ("lakecluster", "Delta ZORDER", "Delta liquid", "delta-rs z_order")
DRIVER_MEMORY = "6g"  # every Spark method and the query runs get the same session


def _spark() -> Any:
    from lakecluster.config import SparkConfig
    from lakecluster.spark import get_session

    return get_session(SparkConfig(master="local[2]", conf={"spark.driver.memory": DRIVER_MEMORY}))


# -- 1. the input --------------------------------------------------------------------------------


def build(path: Path, scale_factor: float, fragment_rows: int, columns: list[str]) -> dict:
    """The fragments at ``path`` (delta-rs appends), their sketches, a checksum; what was written."""
    from deltalake import DeltaTable, write_deltalake

    from lakecluster.sketches import BoundarySketches
    from lakecluster.stream.generator import GeneratorSettings, generate
    from lakecluster.stream.ssb import SSB_FULL_COLUMNS
    from lakecluster.table import LakeTable

    rows = int(6_000_000 * scale_factor)
    settings = GeneratorSettings(scale_factor=scale_factor)
    by_name = {c.name: c for c in SSB_FULL_COLUMNS}
    sketches = BoundarySketches.empty([by_name[c] for c in columns])
    for start in range(0, rows, fragment_rows):
        batch = generate(start, min(rows, start + fragment_rows), settings, SSB_FULL_COLUMNS)
        write_deltalake(str(path), pa.Table.from_batches([batch]), mode="append")
        for c in columns:  # the sketches the stream keeps as it writes
            sketches.sketches[c].update(batch.column(c))
    table = DeltaTable(str(path))
    table.create_checkpoint()
    sketches.delta_version = table.version()
    LakeTable.at(str(path)).sketches().write(sketches)
    # Delta's checksum of the newest version, which every version a stream writes carries (a table
    # without one makes Delta's first commit reconstruct the snapshot).
    _spark().sql(f"ALTER TABLE delta.`{path}` SET TBLPROPERTIES ('delta.checkpointInterval' = '10')")
    sizes = pa.table(DeltaTable(str(path)).get_add_actions(flatten=True))["size_bytes"].to_pylist()
    return {"rows": rows, "files": len(sizes), "bytes": int(sum(sizes))}


def copy_table(source: Path, target: Path) -> None:
    """A copy whose data files are hard links (no method changes a file; each writes new ones) and
    whose log and side folders are real copies (methods write there)."""
    for directory, _, names in os.walk(source):
        rel = Path(directory).relative_to(source)
        (target / rel).mkdir(parents=True, exist_ok=True)
        in_log = rel.parts[:1] in (("_delta_log",), ("_lakecluster",))
        for name in names:
            src, dst = Path(directory) / name, target / rel / name
            if in_log:
                shutil.copy2(src, dst)
            else:
                os.link(src, dst)


# -- 2. the methods ------------------------------------------------------------------------------


def rewrite(method: str, path: Path, target: int, in_bytes: int, columns: list[str], task_memory_mib: int = 0) -> dict:
    """One method on the copy at ``path``; seconds from the first read to the committed version."""
    if method == "delta-rs z_order":
        from deltalake import DeltaTable

        started = time.perf_counter()
        DeltaTable(str(path)).optimize.z_order(columns, target_size=target)
        return {"seconds": time.perf_counter() - started}
    spark = _spark()
    spark.conf.set("spark.databricks.delta.optimize.maxFileSize", str(target))
    if method == "Delta ZORDER":
        started = time.perf_counter()
        spark.sql(f"OPTIMIZE delta.`{path}` ZORDER BY ({', '.join(columns)})").collect()
        return {"seconds": time.perf_counter() - started}
    if method == "Delta liquid":
        spark.sql(f"ALTER TABLE delta.`{path}` CLUSTER BY ({', '.join(columns)})").collect()
        started = time.perf_counter()
        spark.sql(f"OPTIMIZE delta.`{path}` FULL").collect()
        return {"seconds": time.perf_counter() - started}
    from lakecluster.compaction.loop import Compactor
    from lakecluster.config import load_config
    from lakecluster.stream.ssb import SSB_FULL_COLUMNS

    cfg = path.parent / "lakecluster.toml"
    # One group of the whole table; the index sync that follows a commit is not part of the rewrite.
    text = compactor_config(path, SSB_FULL_COLUMNS, columns, target, max(2 * in_bytes, target))
    cfg.write_text(text + "[index]\nenabled = false\n")
    budget = {"compaction.task_memory_bytes": str(task_memory_mib << 20)} if task_memory_mib else {}
    compactor = Compactor(load_config(cfg, environ={}, overrides=budget), spark=spark)
    started = time.perf_counter()
    results = compactor.run_once()
    seconds = time.perf_counter() - started
    assert results and all(r.result == "committed" for r in results), results
    return {"seconds": seconds, "groups": len(results), "group_bytes": [r.group.bytes for r in results]}


# -- 3. queries and checks -----------------------------------------------------------------------


def fingerprint(path: Path) -> dict:
    """Rows and an order-independent hash of every column, read by delta-rs and by DuckDB's delta extension."""
    import duckdb
    from deltalake import DeltaTable

    from tests.conftest import duckdb_connection

    dataset = DeltaTable(str(path)).to_pyarrow_dataset()
    names = dataset.schema.names
    select = "count(*), " + ", ".join(f'sum(hash("{n}")::HUGEINT)::VARCHAR' for n in names)
    con = duckdb.connect()
    con.register("delta_rs_rows", dataset)
    by_delta_rs = con.execute(f"SELECT {select} FROM delta_rs_rows").fetchone()
    by_duckdb = duckdb_connection().execute(f"SELECT {select} FROM delta_scan('{path}')").fetchone()
    return {"delta-rs": list(by_delta_rs or ()), "duckdb": list(by_duckdb or ()), "columns": names}


def queries(path: Path) -> dict:
    from tests.spark_scans import bytes_scanned, files_scanned

    spark = _spark()
    out = {}
    for name, sql in QUERIES.items():
        text = sql.format(t=f"delta.`{path}`")
        spark.sql(text).collect()  # warm-up: listing, code generation
        frame = spark.sql(text)
        started = time.perf_counter()
        result = frame.collect()
        out[name] = {"files": files_scanned(frame), "bytes": bytes_scanned(frame),
                     "seconds": time.perf_counter() - started,
                     "answer": sorted(repr(tuple(r)) for r in result)}  # fmt: skip
    files = int(spark.sql(f"DESCRIBE DETAIL delta.`{path}`").collect()[0]["numFiles"])
    from deltalake import DeltaTable

    sizes = pa.table(DeltaTable(str(path)).get_add_actions(flatten=True))["size_bytes"].to_pylist()
    return {"queries": out, "files": files, "sizes": sizes}


# -- the parent: fresh processes, peak RSS of each tree ------------------------------------------


def _tree_rss_mb(root: int) -> tuple[dict[str, float], float, float]:
    """RSS in MiB of ``root`` and every descendant, from /proc, summed by kind: "java" (the JVM)
    and "python" (the driver's process and Spark's Python workers); the largest RSS of one
    process other than ``root`` that is not a JVM (a Spark Python worker: the tasks it runs); and
    the RSS of ``root`` (the Python driver)."""
    page = os.sysconf("SC_PAGE_SIZE") / 2**20
    by_kind: dict[str, float] = {"java": 0.0, "python": 0.0}
    largest = driver = 0.0
    for pid, fields in tree_stats(root).items():
        try:
            with open(f"/proc/{pid}/comm") as f:
                kind = "java" if f.read().strip() == "java" else "python"
        except OSError:
            continue
        rss = int(fields[21]) * page
        by_kind[kind] += rss
        if pid == root:
            driver = rss
        elif kind == "python":
            largest = max(largest, rss)
    return by_kind, largest, driver


def child(*args: str, cap_mib: float | None = None) -> tuple[dict, dict[str, float]]:
    """Run this script with ``args`` in a new process; (its JSON answer, RSS in MiB of its tree at
    its peak by kind, ``_tree_rss_mb``, with the largest worker's peak as ``"largest task"`` and the
    Python driver's as ``"driver"``). A tree above ``cap_mib`` is killed (``StepFailed``)."""
    proc = subprocess.Popen([sys.executable, __file__, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)  # fmt: skip
    peak: dict[str, float] = {"java": 0.0, "python": 0.0}
    largest = driver = 0.0
    capped = threading.Event()
    stop = threading.Event()

    def sample() -> None:
        nonlocal peak, largest, driver
        while not stop.is_set():
            now, worker, root = _tree_rss_mb(proc.pid)
            largest, driver = max(largest, worker), max(driver, root)
            if sum(now.values()) > sum(peak.values()):
                peak = now
            if cap_mib is not None and sum(now.values()) > cap_mib:
                capped.set()
                proc.kill()
                return
            stop.wait(0.25)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    out, err = proc.communicate()
    stop.set()
    sampler.join()
    if capped.is_set():
        raise StepFailed(f"{' '.join(args[:3])} stopped at the memory cap of {cap_mib:,.0f} MiB (its tree's RSS)")
    if proc.returncode != 0:
        raise StepFailed(f"{' '.join(args[:3])} failed (exit {proc.returncode}):\n{err[-3000:]}")
    return json.loads(out.strip().splitlines()[-1]), {**peak, "largest task": largest, "driver": driver}


def _tree_peak(by_kind: dict[str, float]) -> float:
    return by_kind["java"] + by_kind["python"]


def _size_spread(sizes: list[int], target: int) -> str:
    if not sizes:
        return ""
    ordered = sorted(sizes)
    return " / ".join(f"{x / target:.2f}" for x in (ordered[0], ordered[len(ordered) // 2], ordered[-1]))


class StepFailed(Exception):
    """A child process failed (its error output is in the message)."""


def render(heading: str, command: str, facts: dict, layouts: dict[str, dict], failed: dict[str, str]) -> str:
    names = list(layouts)
    head = "| | " + " | ".join(names) + " |\n|---|" + "---:|" * len(names) + "\n"
    mb = facts["bytes"] / 1e6
    lines = [head]

    def row(label: str, cells: list[str]) -> None:
        lines.append(f"| {label} | " + " | ".join(cells) + " |\n")

    row("rewrite (s)", [f"{v['seconds']:.0f}" if "seconds" in v else "" for v in layouts.values()])
    row("rewrite MB/s", [f"{mb / v['seconds']:.1f}" if "seconds" in v else "" for v in layouts.values()])
    row("peak RSS, process tree (MiB)", [f"{_tree_peak(v['rss_by_kind']):,.0f}" if "rss_by_kind" in v else ""
                                         for v in layouts.values()])  # fmt: skip
    row("of which the JVM / Python", [f"{v['rss_by_kind']['java']:,.0f} / {v['rss_by_kind']['python']:,.0f}"
                                      if "rss_by_kind" in v else "" for v in layouts.values()])  # fmt: skip
    row("Python driver's peak RSS (MiB)", [f"{v['rss_by_kind']['driver']:,.0f}" if "rss_by_kind" in v else ""
                                           for v in layouts.values()])  # fmt: skip
    row("largest task's peak RSS (MiB)", [f"{v['rss_by_kind']['largest task']:,.0f}" if "rss_by_kind" in v else ""
                                          for v in layouts.values()])  # fmt: skip
    row("files", [f"{v['files']:,}" for v in layouts.values()])
    target = facts["target_mib"] << 20
    row("file size, min / p50 / max (× target)", [_size_spread(v["sizes"], target) for v in layouts.values()])
    row("files outside 0.85–1.15 × target", [str(sum(not 0.85 <= s / target <= 1.15 for s in v["sizes"]))
                                             for v in layouts.values()])  # fmt: skip
    for q in QUERIES:
        row(f"{q} files read", [f"{v['queries'][q]['files']:,}" for v in layouts.values()])
    row("**files read, 13 queries**", [f"**{sum(x['files'] for x in v['queries'].values()):,}**"
                                       for v in layouts.values()])  # fmt: skip
    row("**MB read, 13 queries**", [f"**{sum(x['bytes'] for x in v['queries'].values()) / 1e6:,.0f}**"
                                    for v in layouts.values()])  # fmt: skip
    row("**query seconds, 13 queries**", [f"**{sum(x['seconds'] for x in v['queries'].values()):.1f}**"
                                          for v in layouts.values()])  # fmt: skip
    mine = layouts["lakecluster"]
    ratios = []
    for other in ("Delta ZORDER", "Delta liquid", "delta-rs z_order"):
        if other in layouts and "seconds" in layouts[other]:
            ratios.append(f"{layouts[other]['seconds'] / mine['seconds']:.2f} × {other}'s MB/s")
    totals = {k: sum(x["files"] for x in v["queries"].values()) for k, v in layouts.items()}
    read = {k: sum(x["bytes"] for x in v["queries"].values()) for k, v in layouts.items()}
    others = [k for k in names if k not in ("lakecluster", "as ingested")]
    fewest = sum(all(mine["queries"][q]["files"] <= layouts[k]["queries"][q]["files"] for k in others)
                 for q in QUERIES)  # fmt: skip
    summary = (f"\nlakecluster rewrote at {', '.join(ratios)}; it read "
               + ", ".join(f"{totals['lakecluster'] / totals[k]:.2f} × {k}'s files" for k in others)
               + f", the fewest (or tied) on {fewest} of the {len(QUERIES)} queries; it read "
               + ", ".join(f"{read['lakecluster'] / read[k]:.2f} × {k}'s bytes" for k in others)
               + ". Goal: ≥ 1.5 × Delta ZORDER's"
               " MB/s and ≥ 1.0 × delta-rs's, with no worse layout.\n")  # fmt: skip
    summary += "".join(f"\n{k} failed: `{v}`\n" for k, v in failed.items())
    return (f"{heading}\n\n`{command}` — {facts['rows']:,} rows of the flattened SSB table "
            f"({mb:,.0f} MB of Parquet in {facts['files']:,} fragments of {facts['fragment_rows']:,} rows), "
            f"clustered on {', '.join(facts['columns'])} into files of {facts['target_mib']} MiB by each method, "
            "each in a fresh process on its own copy; Spark `local[2]`, driver memory "
            f"{DRIVER_MEMORY}. Every layout held the input's rows (count and a hash of every column, by "
            "delta-rs and by DuckDB) and gave the input's answer to every query.\n\n" + "".join(lines) + summary)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--scale-factor", type=float, default=5.0)
    p.add_argument("--fragment-rows", type=int, default=200_000)
    p.add_argument("--target-mib", type=int, default=128)
    p.add_argument("--methods", nargs="+", default=list(METHODS), choices=METHODS)
    p.add_argument("--columns", default=",".join(COLUMNS), help="the clustering columns, comma-separated")
    p.add_argument("--task-memory-mib", type=int, default=0,
                   help="lakecluster's compaction.task_memory_bytes in MiB (default: the configuration's default)")
    p.add_argument("--cap-mib", type=float, default=16_384,
                   help="delta-rs's process tree is stopped above this RSS (MiB); its run is reported as failed")
    p.add_argument("--work", help="directory for the tables (default: a temporary one)")
    p.add_argument("--no-write", action="store_true")
    p.add_argument("--step", nargs="+", help=argparse.SUPPRESS)  # a child's task
    args = p.parse_args()
    if args.step:
        kind, *rest = args.step
        if kind == "build":
            answer = build(Path(rest[0]), float(rest[1]), int(rest[2]), rest[3].split(","))
        elif kind == "rewrite":
            answer = rewrite(rest[0], Path(rest[1]), int(rest[2]), int(rest[3]), rest[4].split(","), int(rest[5]))
        else:
            answer = {**queries(Path(rest[0])), "fingerprint": fingerprint(Path(rest[0]))}
        print(json.dumps(answer))
        return
    columns = [c.strip() for c in args.columns.split(",") if c.strip()]
    command = f"python bench/production.py --scale-factor {args.scale_factor:g}" + (
        f" --fragment-rows {args.fragment_rows}" if args.fragment_rows != 200_000 else "") + (
        f" --target-mib {args.target_mib}" if args.target_mib != 128 else "") + (
        f" --columns {','.join(columns)}" if columns != COLUMNS else "") + (
        f" --task-memory-mib {args.task_memory_mib}" if args.task_memory_mib else "")  # fmt: skip
    target = args.target_mib << 20
    with tempfile.TemporaryDirectory(prefix="lc-production-", dir=args.work) as tmp:
        work = Path(tmp)
        source = work / "input"
        started = time.perf_counter()
        facts, _ = child("--step", "build", str(source), str(args.scale_factor), str(args.fragment_rows),
                         ",".join(columns))  # fmt: skip
        facts.update(fragment_rows=args.fragment_rows, target_mib=args.target_mib, columns=columns)
        print(f"input: {facts['rows']:,} rows, {facts['bytes'] / 1e6:,.0f} MB in {facts['files']:,} files "
              f"({time.perf_counter() - started:.0f} s)", flush=True)  # fmt: skip
        reference, _ = child("--step", "queries", str(source))
        layouts: dict[str, dict] = {"as ingested": reference}
        failed: dict[str, str] = {}
        for method in args.methods:
            path = work / "layout" / "table"
            copy_table(source, path)
            try:
                done, peak = child("--step", "rewrite", method, str(path), str(target), str(facts["bytes"]),
                                   ",".join(columns), str(args.task_memory_mib),
                                   cap_mib=args.cap_mib if method == "delta-rs z_order" else None)  # fmt: skip
                measured, _ = child("--step", "queries", str(path))
            except StepFailed as e:  # the others still run; the table says which failed
                print(e, flush=True)
                failed[method] = str(e).splitlines()[-1][:300]
                continue
            finally:
                shutil.rmtree(path.parent)
            layouts[method] = {**done, **measured, "rss_by_kind": peak}
            assert measured["fingerprint"]["delta-rs"] == reference["fingerprint"]["delta-rs"], f"{method}: rows differ"
            assert measured["fingerprint"]["duckdb"] == reference["fingerprint"]["duckdb"], f"{method}: rows differ"
            assert measured["fingerprint"]["delta-rs"] == measured["fingerprint"]["duckdb"], f"{method}: readers differ"
            for q in QUERIES:
                assert measured["queries"][q]["answer"] == reference["queries"][q]["answer"], f"{method}: {q} differs"
            print(f"{method}: {done['seconds']:.0f} s, {facts['bytes'] / 1e6 / done['seconds']:.1f} MB/s, peak "
                  f"{_tree_peak(peak):,.0f} MiB (largest task {peak['largest task']:,.0f}), {measured['files']} files, "
                  f"{_size_spread(measured['sizes'], target)} x target, read "
                  f"{sum(x['files'] for x in measured['queries'].values())} files in 13 queries", flush=True)
    if "lakecluster" not in layouts:
        return
    heading = "## Production size" + (
        f": {args.target_mib:,} MiB files" if args.target_mib != 128 or columns != COLUMNS else "") + (
        f" on {', '.join(columns)}" if columns != COLUMNS else "") + (
        f", task memory {args.task_memory_mib} MiB" if args.task_memory_mib else "")  # fmt: skip
    section = render(heading, command, facts, layouts, failed)
    print(section)
    if not args.no_write:
        write_section(REPO / "docs" / "benchmarks.md", heading + "\n", section)


if __name__ == "__main__":
    main()
