"""The Star Schema Benchmark's 13 queries on the flattened lineorder table, four layouts of the
same rows: as ingested, Delta ZORDER, Delta liquid clustering, lakecluster.

    python bench/ssb.py --scale-factor 1 --files 1000

1. ``6,000,000 x SF`` rows of the full flattened SSB schema (``lakecluster.stream.ssb.SSB_FULL_COLUMNS``,
   the built-in generator, dbgen's distributions) written in generator order as ``--files`` files
   (what a stream leaves: every file holds every date, region and brand).
2. Three copies rewritten, each by one method, on the same clustering columns (``--columns``) and
   to the same target file size (input bytes / ``--files``): ``OPTIMIZE ... ZORDER BY``, liquid
   clustering (``CLUSTER BY`` + ``OPTIMIZE ... FULL``), lakecluster's compactor (one round).
3. Spark SQL runs the 13 queries on each layout through delta-spark; files read are Spark's own scan
   metric (``numFiles``), time the median of ``--runs`` runs after one warm-up run.

Prints tables and rewrites the section of docs/benchmarks.md for its column set and scale factor
("## SSB on <columns>, scale factor <sf>"; unless --no-write).
"""

from __future__ import annotations

import argparse
import re
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import pyarrow as pa

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from bench.anchors import delta_liquid, delta_zorder, live_files  # noqa: E402
from bench.ingest import write_section  # noqa: E402
from bench.skipping import compactor_config  # noqa: E402
from tests.spark_scans import files_scanned  # noqa: E402

# The 13 queries (SSB spec, O'Neil et al.), on the flattened table: joins become columns.
QUERIES = {
    "Q1.1": "SELECT sum(lo_extendedprice * lo_discount) AS revenue FROM {t} WHERE d_year = 1993 "
            "AND lo_discount BETWEEN 1 AND 3 AND lo_quantity < 25",
    "Q1.2": "SELECT sum(lo_extendedprice * lo_discount) AS revenue FROM {t} WHERE d_yearmonthnum = 199401 "
            "AND lo_discount BETWEEN 4 AND 6 AND lo_quantity BETWEEN 26 AND 35",
    "Q1.3": "SELECT sum(lo_extendedprice * lo_discount) AS revenue FROM {t} WHERE d_weeknuminyear = 6 "
            "AND d_year = 1994 AND lo_discount BETWEEN 5 AND 7 AND lo_quantity BETWEEN 26 AND 35",
    "Q2.1": "SELECT sum(lo_revenue), d_year, p_brand1 FROM {t} WHERE p_category = 'MFGR#12' "
            "AND s_region = 'AMERICA' GROUP BY d_year, p_brand1 ORDER BY d_year, p_brand1",
    "Q2.2": "SELECT sum(lo_revenue), d_year, p_brand1 FROM {t} WHERE p_brand1 BETWEEN 'MFGR#2221' "
            "AND 'MFGR#2228' AND s_region = 'ASIA' GROUP BY d_year, p_brand1 ORDER BY d_year, p_brand1",
    "Q2.3": "SELECT sum(lo_revenue), d_year, p_brand1 FROM {t} WHERE p_brand1 = 'MFGR#2239' "
            "AND s_region = 'EUROPE' GROUP BY d_year, p_brand1 ORDER BY d_year, p_brand1",
    "Q3.1": "SELECT c_nation, s_nation, d_year, sum(lo_revenue) AS revenue FROM {t} WHERE c_region = 'ASIA' "
            "AND s_region = 'ASIA' AND d_year >= 1992 AND d_year <= 1997 GROUP BY c_nation, s_nation, d_year "
            "ORDER BY d_year ASC, revenue DESC",
    "Q3.2": "SELECT c_city, s_city, d_year, sum(lo_revenue) AS revenue FROM {t} WHERE c_nation = 'UNITED STATES' "
            "AND s_nation = 'UNITED STATES' AND d_year >= 1992 AND d_year <= 1997 GROUP BY c_city, s_city, "
            "d_year ORDER BY d_year ASC, revenue DESC",
    "Q3.3": "SELECT c_city, s_city, d_year, sum(lo_revenue) AS revenue FROM {t} WHERE (c_city = 'UNITED KI1' "
            "OR c_city = 'UNITED KI5') AND (s_city = 'UNITED KI1' OR s_city = 'UNITED KI5') AND d_year >= 1992 "
            "AND d_year <= 1997 GROUP BY c_city, s_city, d_year ORDER BY d_year ASC, revenue DESC",
    "Q3.4": "SELECT c_city, s_city, d_year, sum(lo_revenue) AS revenue FROM {t} WHERE (c_city = 'UNITED KI1' "
            "OR c_city = 'UNITED KI5') AND (s_city = 'UNITED KI1' OR s_city = 'UNITED KI5') "
            "AND d_yearmonth = 'Dec1997' GROUP BY c_city, s_city, d_year ORDER BY d_year ASC, revenue DESC",
    "Q4.1": "SELECT d_year, c_nation, sum(lo_revenue - lo_supplycost) AS profit FROM {t} WHERE c_region = "
            "'AMERICA' AND s_region = 'AMERICA' AND (p_mfgr = 'MFGR#1' OR p_mfgr = 'MFGR#2') "
            "GROUP BY d_year, c_nation ORDER BY d_year, c_nation",
    "Q4.2": "SELECT d_year, s_nation, p_category, sum(lo_revenue - lo_supplycost) AS profit FROM {t} "
            "WHERE c_region = 'AMERICA' AND s_region = 'AMERICA' AND (d_year = 1997 OR d_year = 1998) "
            "AND (p_mfgr = 'MFGR#1' OR p_mfgr = 'MFGR#2') GROUP BY d_year, s_nation, p_category "
            "ORDER BY d_year, s_nation, p_category",
    "Q4.3": "SELECT d_year, s_city, p_brand1, sum(lo_revenue - lo_supplycost) AS profit FROM {t} "
            "WHERE s_nation = 'UNITED STATES' AND (d_year = 1997 OR d_year = 1998) AND p_category = 'MFGR#14' "
            "GROUP BY d_year, s_city, p_brand1 ORDER BY d_year, s_city, p_brand1",
}  # fmt: skip

def batches(rows: int, scale_factor: float, batch_rows: int = 65_536):  # type: ignore[no-untyped-def]
    from lakecluster.stream.generator import GeneratorSettings, generate
    from lakecluster.stream.ssb import SSB_FULL_COLUMNS

    settings = GeneratorSettings(scale_factor=scale_factor)
    for start in range(0, rows, batch_rows):
        yield generate(start, min(rows, start + batch_rows), settings, SSB_FULL_COLUMNS)


def write_ingested(path: Path, rows: int, files: int, scale_factor: float) -> int:
    """The rows in generator order as ``files`` appends of one file each (delta-rs), as a stream
    leaves them, and a checkpoint; returns their bytes."""
    from deltalake import DeltaTable, write_deltalake

    from lakecluster.stream.generator import GeneratorSettings, generate
    from lakecluster.stream.ssb import SSB_FULL_COLUMNS

    settings = GeneratorSettings(scale_factor=scale_factor)
    per_file = -(-rows // files)
    for start in range(0, rows, per_file):
        batch = generate(start, min(rows, start + per_file), settings, SSB_FULL_COLUMNS)
        write_deltalake(str(path), pa.Table.from_batches([batch]), mode="append")
    table = DeltaTable(str(path))
    table.create_checkpoint()
    return int(sum(pa.table(table.get_add_actions(flatten=True))["size_bytes"].to_pylist()))


def where_clauses() -> list[str]:
    """The 13 queries' WHERE clauses: the workload ``lakecluster tune --queries`` reads."""
    return [re.split(r" GROUP BY | ORDER BY ", sql.split(" WHERE ", 1)[1])[0] for sql in QUERIES.values()]


def workload_file(path: Path) -> Path:
    """The 13 queries' WHERE clauses, one per line."""
    path.write_text("\n".join(where_clauses()) + "\n")
    return path


def lakecluster_compactor(spark: Any, source: Path, path: Path, target: int, columns: list[str], rows: int,
                          scale_factor: float, in_bytes: int, weights: dict[str, float], round_cuts: bool,
                          tune_queries: Path | None = None,
                          objective: str = "mean") -> tuple[float, dict[str, float]]:  # fmt: skip
    """One round of the real compactor, after sketches of the clustering columns as the stream keeps them;
    with ``tune_queries``, at the weights ``lakecluster tune --queries --keep-columns --objective
    OBJECTIVE`` recommends for that workload on the table as ingested (none recommended: the given
    ones). Returns the round's seconds and the weights it used."""
    from deltalake import DeltaTable

    from lakecluster.compaction.loop import Compactor
    from lakecluster.config import load_config
    from lakecluster.sketches import BoundarySketches
    from lakecluster.stream.ssb import SSB_FULL_COLUMNS
    from lakecluster.table import LakeTable

    shutil.copytree(source, path)
    by_name = {c.name: c for c in SSB_FULL_COLUMNS}
    sketches = BoundarySketches.empty([by_name[c] for c in columns])
    for batch in batches(rows, scale_factor):
        for c in columns:
            sketches.sketches[c].update(batch.column(c))
    sketches.delta_version = DeltaTable(str(path)).version()
    LakeTable.at(str(path)).sketches().write(sketches)
    cfg_file = path.parent / "lakecluster.toml"
    cfg_file.write_text(compactor_config(path, SSB_FULL_COLUMNS, columns, target, in_bytes * 2, weights, round_cuts))
    if tune_queries is not None:
        from lakecluster.cli.tune import advise

        advice = advise(LakeTable(load_config(cfg_file, environ={})), str(tune_queries), 200_000, keep_columns=True,
                        objective=objective)  # fmt: skip
        if advice["recommended"] is not None:
            weights = {c: float(w) for c, w in advice["recommended"]["column_weights"].items()}
        cfg_file.write_text(compactor_config(path, SSB_FULL_COLUMNS, columns, target, in_bytes * 2, weights,
                                             round_cuts))  # fmt: skip
    compactor = Compactor(load_config(cfg_file, environ={}), spark=spark)
    started = time.perf_counter()
    results = compactor.run_once()
    seconds = time.perf_counter() - started
    assert [r.result for r in results] == ["committed"], results
    return seconds, weights


def run_queries(spark: Any, path: Path, runs: int) -> dict[str, tuple[int, float, list]]:
    """Per query: files read (Spark's scan metric), median seconds, and the result rows."""
    out = {}
    for name, sql in QUERIES.items():
        text = sql.format(t=f"delta.`{path}`")
        spark.sql(text).collect()  # warm-up: file listing, code generation
        times, files, result = [], 0, []
        for _ in range(runs):
            frame = spark.sql(text)
            started = time.perf_counter()
            result = frame.collect()
            times.append(time.perf_counter() - started)
            files = files_scanned(frame)
        out[name] = (files, statistics.median(times), [tuple(r) for r in result])
    return out




def heading(args: argparse.Namespace) -> str:
    """One section per column set and scale: a run rewrites its own, not the other runs'."""
    return f"## SSB on {', '.join(args.columns)}, scale factor {args.scale_factor:g}"


def render(command: str, layouts: list[tuple[str, int, float | None, dict]], args: argparse.Namespace,
           in_bytes: int, rows: int, tuned: dict[str, dict[str, float]] | None = None) -> str:  # fmt: skip
    from lakecluster.stream.ssb import SSB_FULL_COLUMNS

    names = [label for label, *_ in layouts]
    head = "| query | " + " | ".join(names) + " |\n|---|" + "---:|" * len(names) + "\n"
    files = head + "".join(
        f"| {q} | " + " | ".join(f"{lay[3][q][0]:,}" for lay in layouts) + " |\n" for q in QUERIES
    ) + "| **total** | " + " | ".join(f"**{sum(v[0] for v in lay[3].values()):,}**" for lay in layouts) + " |\n"
    times = head + "".join(
        f"| {q} | " + " | ".join(f"{lay[3][q][1]:.2f}" for lay in layouts) + " |\n" for q in QUERIES
    ) + "| **total** | " + " | ".join(f"**{sum(v[1] for v in lay[3].values()):.1f}**" for lay in layouts) + " |\n"
    facts = "| | " + " | ".join(names) + " |\n|---|" + "---:|" * len(names) + "\n"
    facts += "| files | " + " | ".join(f"{n:,}" for _, n, _, _ in layouts) + " |\n"
    facts += "| rewrite (s) | " + " | ".join("" if s is None else f"{s:.0f}" for _, _, s, _ in layouts) + " |\n"
    facts += "| rewrite MB/s | " + " | ".join(
        "" if s is None else f"{in_bytes / 1e6 / s:.2f}" for _, _, s, _ in layouts) + " |\n"  # fmt: skip
    totals = {label: sum(v[0] for v in result.values()) for label, _, _, result in layouts}
    others = [lay for lay in layouts if "lakecluster" not in lay[0]]
    summary = "\n"
    for label, _, _, mine in (lay for lay in layouts if "lakecluster" in lay[0]):
        lost = [q for q in QUERIES if not all(mine[q][0] <= lay[3][q][0] for lay in others)]
        summary += (f"{label.strip('*')} reads the fewest files on {len(QUERIES) - len(lost)} of the {len(QUERIES)} "
                    f"queries; in total {totals[label] / totals['Delta ZORDER']:.2f} × Delta ZORDER's files and "
                    f"{totals[label] / totals['Delta liquid']:.2f} × liquid clustering's"
                    + ("" if not lost else "; more than another layout on " + ", ".join(
                        f"{q} ({mine[q][0]:,} against {min(lay[3][q][0] for lay in others):,})" for q in lost))
                    + ".\n")  # fmt: skip
    for objective, weights in (tuned or {}).items():
        summary += (f"The weights `lakecluster tune --queries --keep-columns --objective {objective}` picks on the 13 "
                    "queries' WHERE clauses (a sample of the ingested table): "
                    + (", ".join(f"{c} {w:g}" for c, w in weights.items()) or "none recommended (equal)")
                    + ".\n")  # fmt: skip
    written = {label: n for label, n, _, _ in layouts}
    summary += ("Files written: " + ", ".join(f"{label.strip('*')} {n:,}" for label, n in written.items()
                                                if label != "as ingested") + ".\n")  # fmt: skip
    zorder = next(lay for lay in layouts if lay[0] == "Delta ZORDER")
    for label, _, seconds, _ in (lay for lay in layouts if "lakecluster" in lay[0] and lay[2] is not None):
        summary += (f"{label.strip('*')} rewrote at {zorder[2] / seconds:.2f} × Delta ZORDER's MB/s"
                    + "".join(f", {lay[2] / seconds:.2f} × {lay[0]}'s" for lay in others
                              if lay[0] != "Delta ZORDER" and lay[2] is not None) + ".\n")
    summary += ("Goal with default settings: at most 0.7 × ZORDER's files in total and the fewest (or tied) on at "
                "least 11 of the 13 queries; with the weights `tune --queries` picks, the fewest on every query "
                "(`--objective no-query-worse`, which ranks first the weights under which no query reads more "
                "files than on an equal-bits Z-order of the same columns).\n")  # fmt: skip
    return (f"{heading(args)}\n\n`{command}` — {rows:,} rows of the "
            f"flattened SSB table (scale factor {args.scale_factor:g}, {len(SSB_FULL_COLUMNS)} columns, "
            f"{in_bytes / 1e6:,.0f} MB of Parquet), written in generator order as {args.files} files, then "
            f"rewritten by each method on the same clustering columns ({', '.join(args.columns)}) to the same "
            f"target file size. Spark SQL through delta-spark, Spark `local[2]`; files read are Spark's scan "
            f"metric (`numFiles`), times the median of {args.runs} runs after a warm-up. Every layout returned "
            "the same result for every query.\n\nFiles read per query:\n\n" + files + "\nSeconds per query:\n\n"
            + times + "\nThe layouts:\n\n" + facts + summary)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--scale-factor", type=float, default=1.0)
    p.add_argument("--files", type=int, default=1000)
    p.add_argument("--columns", nargs="+", default=["lo_orderdate", "s_region", "c_region", "p_brand1"])
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--weights", nargs="*", default=[], metavar="COLUMN=WEIGHT",
                   help="also a lakecluster layout with these compaction.column_weights")
    p.add_argument("--equal-depth", action="store_true",
                   help="also a lakecluster layout with compaction.round_cuts = false")
    p.add_argument("--tuned-weights", action="store_true",
                   help="also two lakecluster layouts with the weights `tune --queries --keep-columns` picks for the "
                   "13 queries, one per --objective (mean, no-query-worse)")  # fmt: skip
    p.add_argument("--only-lakecluster", action="store_true", help="skip the Delta layouts (a trial)")
    p.add_argument("--no-write", action="store_true")
    args = p.parse_args()
    weights = {k: float(v) for k, v in (w.split("=", 1) for w in args.weights)}
    command = (f"python bench/ssb.py --scale-factor {args.scale_factor:g} --files {args.files} "
               f"--columns {' '.join(args.columns)} --runs {args.runs}"
               + (f" --weights {' '.join(args.weights)}" if args.weights else "")
               + (" --equal-depth" if args.equal_depth else "")
               + (" --tuned-weights" if args.tuned_weights else ""))  # fmt: skip

    from lakecluster.config import SparkConfig
    from lakecluster.spark import get_session

    spark = get_session(SparkConfig(master="local[2]", conf={"spark.driver.memory": "6g"}))
    rows = int(6_000_000 * args.scale_factor)
    layouts: list[tuple[str, int, float | None, dict]] = []
    tuned: dict[str, dict[str, float]] = {}
    with tempfile.TemporaryDirectory(prefix="lc-ssb-") as tmp:
        work = Path(tmp)
        started = time.perf_counter()
        source = work / "ingested"
        in_bytes = write_ingested(source, rows, args.files, args.scale_factor)
        target = max(1, in_bytes // args.files)
        print(f"{rows:,} rows, {in_bytes / 1e6:,.0f} MB in {args.files} files ({time.perf_counter() - started:.0f} s);"
              f" target {target:,} bytes", flush=True)  # fmt: skip
        layouts.append(("as ingested", live_files(spark, source), None, run_queries(spark, source, args.runs)))
        methods = () if args.only_lakecluster else (("Delta ZORDER", delta_zorder), ("Delta liquid", delta_liquid))
        for label, method in methods:
            path = work / label.split()[1].lower()
            seconds = method(spark, source, path, target, args.columns)
            print(f"{label}: {seconds:.0f} s", flush=True)
            layouts.append((label, live_files(spark, path), seconds, run_queries(spark, path, args.runs)))
        variants: list[tuple[str, dict[str, float], bool, Path | None, str]] = []
        if args.equal_depth:
            variants.append(("lakecluster, equal-depth cuts", {}, False, None, "mean"))
        variants.append(("**lakecluster**", {}, True, None, "mean"))
        if weights:
            variants.append(("**lakecluster, weighted**", weights, True, None, "mean"))
        if args.tuned_weights:
            workload = workload_file(work / "queries.sql")
            variants.append(("**lakecluster, tuned weights**", {}, True, workload, "mean"))
            variants.append(("**lakecluster, tuned: no query worse**", {}, True, workload, "no-query-worse"))
        for i, (label, column_weights, round_cuts, queries, objective) in enumerate(variants):
            path = work / f"lakecluster-{i}" / "table"
            seconds, used = lakecluster_compactor(spark, source, path, target, args.columns, rows, args.scale_factor,
                                                  in_bytes, column_weights, round_cuts, queries, objective)  # fmt: skip
            if queries is not None:
                tuned[objective] = used
            print(f"{label}: {seconds:.0f} s" + (f" (weights {used})" if used else ""), flush=True)
            layouts.append((label, live_files(spark, path), seconds, run_queries(spark, path, args.runs)))
            shutil.rmtree(path.parent)
    for q in QUERIES:  # the layouts hold the same rows: every query answers the same (sums are decimals: exact)
        answers = {label: sorted(map(repr, result[q][2])) for label, _, _, result in layouts}
        assert all(a == answers["as ingested"] for a in answers.values()), f"{q}: the layouts answer differently"
    if args.only_lakecluster:
        for q in QUERIES:
            print(f"| {q} | " + " | ".join(f"{lay[3][q][0]:,}" for lay in layouts) + " |")
        return
    section = render(command, layouts, args, in_bytes, rows, tuned)
    print(section)
    if not args.no_write:
        write_section(REPO / "docs" / "benchmarks.md", heading(args), section)


if __name__ == "__main__":
    main()
