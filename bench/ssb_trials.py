"""Trials of lakecluster layouts on the SSB rows without Spark: the files each of the 13 queries
would read, from the files' [min, max] of the columns they filter on (Delta's data skipping).

    python bench/ssb_trials.py --scale-factor 0.3 --files 300 --columns s_city c_city p_brand1 \
        --levels 7,7,7 8,8,5 --weights s_city=4

The rows are bench/ssb.py's (the same generator, scale factor and order); each layout is the
compactor's own: boundary sketches of the clustering columns, ``ClusteringLayout`` (round cuts,
and the string columns' parents found in a sample of 100,000 of the rows), rows sorted by its
keys and cut into files by ``file_plan`` as ``rewrite_local`` does. The levels printed are the
columns' and then their parents'. With
``--levels`` the level counts are forced (each a comma-separated vector in the columns' order);
without, ``choose_levels`` picks them as the compactor does (``--weights`` as
``compaction.column_weights``); with ``--tune OBJECTIVE`` the weights are those ``lakecluster tune
--queries --keep-columns --objective OBJECTIVE`` picks for the 13 queries on a sample of 200,000 of
the rows (as bench/ssb.py's tuned layouts; no Delta table is written). It matched bench/ssb.py's
Spark counts query for query on the runs it was checked on (docs/benchmarks.md, "SSB, read by
hand"). Prints one line per layout; it writes nothing.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pyarrow as pa

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))  # bench/ssb.py's queries

FILTERED = ["lo_orderdate", "d_year", "d_yearmonthnum", "d_yearmonth", "d_weeknuminyear", "lo_discount",
            "lo_quantity", "c_region", "c_nation", "c_city", "s_region", "s_nation", "s_city", "p_mfgr",
            "p_category", "p_brand1"]  # fmt: skip

Ranges = dict[str, tuple[np.ndarray, np.ndarray]]


def rows(scale_factor: float) -> pa.Table:
    """bench/ssb.py's rows (generator order), the columns the queries filter on."""
    from lakecluster.stream.generator import GeneratorSettings, generate
    from lakecluster.stream.ssb import SSB_FULL_COLUMNS

    settings = GeneratorSettings(scale_factor=scale_factor)
    n = int(6_000_000 * scale_factor)
    return pa.concat_tables(  # every column generated, as bench/ssb.py does, then the filtered ones kept
        pa.Table.from_batches([generate(s, min(n, s + 65_536), settings, SSB_FULL_COLUMNS)]).select(FILTERED)
        for s in range(0, n, 65_536)).combine_chunks()  # fmt: skip


def file_ranges(table: pa.Table, order: np.ndarray, starts: np.ndarray) -> Ranges:
    """Per filtered column, each file's (min, max) (strings as Python strings)."""
    out = {}
    for c in FILTERED:
        column = table[c].combine_chunks()
        if pa.types.is_string(column.type):
            encoded = column.dictionary_encode()
            values = np.asarray(encoded.dictionary.to_pylist(), dtype=object)
            by_value = np.argsort(values)
            rank = np.empty(len(values), np.int64)
            rank[by_value] = np.arange(len(values))
            v = rank[np.asarray(encoded.indices)][order]
            lo, hi = np.minimum.reduceat(v, starts), np.maximum.reduceat(v, starts)
            out[c] = (values[by_value][lo], values[by_value][hi])
        else:
            numbers = column.cast(pa.int32()) if pa.types.is_date(column.type) else column
            v = np.asarray(numbers.cast(pa.int64()))[order]
            out[c] = (np.minimum.reduceat(v, starts), np.maximum.reduceat(v, starts))
    return out


def skipping(r: Ranges) -> dict[str, np.ndarray]:
    """Per query, the files whose statistics admit its WHERE clause (bench/ssb.py's QUERIES)."""

    def eq(c: str, x: object) -> np.ndarray:
        return (r[c][0] <= x) & (r[c][1] >= x)

    def between(c: str, a: object, b: object) -> np.ndarray:
        return (r[c][1] >= a) & (r[c][0] <= b)

    def any_of(c: str, xs: Sequence[object]) -> np.ndarray:
        return np.logical_or.reduce([eq(c, x) for x in xs])

    years = between("d_year", 1992, 1997)
    uk = ["UNITED KI1", "UNITED KI5"]
    return {
        "Q1.1": eq("d_year", 1993) & between("lo_discount", 1, 3) & (r["lo_quantity"][0] < 25),
        "Q1.2": eq("d_yearmonthnum", 199401) & between("lo_discount", 4, 6) & between("lo_quantity", 26, 35),
        "Q1.3": eq("d_weeknuminyear", 6) & eq("d_year", 1994) & between("lo_discount", 5, 7)
        & between("lo_quantity", 26, 35),
        "Q2.1": eq("p_category", "MFGR#12") & eq("s_region", "AMERICA"),
        "Q2.2": between("p_brand1", "MFGR#2221", "MFGR#2228") & eq("s_region", "ASIA"),
        "Q2.3": eq("p_brand1", "MFGR#2239") & eq("s_region", "EUROPE"),
        "Q3.1": eq("c_region", "ASIA") & eq("s_region", "ASIA") & years,
        "Q3.2": eq("c_nation", "UNITED STATES") & eq("s_nation", "UNITED STATES") & years,
        "Q3.3": any_of("c_city", uk) & any_of("s_city", uk) & years,
        "Q3.4": any_of("c_city", uk) & any_of("s_city", uk) & eq("d_yearmonth", "Dec1997"),
        "Q4.1": eq("c_region", "AMERICA") & eq("s_region", "AMERICA") & any_of("p_mfgr", ["MFGR#1", "MFGR#2"]),
        "Q4.2": eq("c_region", "AMERICA") & eq("s_region", "AMERICA") & any_of("d_year", [1997, 1998])
        & any_of("p_mfgr", ["MFGR#1", "MFGR#2"]),
        "Q4.3": eq("s_nation", "UNITED STATES") & any_of("d_year", [1997, 1998]) & eq("p_category", "MFGR#14"),
    }


def trial(table: pa.Table, columns: Sequence[str], files: int, levels: Sequence[int] | None,
          weights: dict[str, float], parents: bool = True) -> tuple[tuple[int, ...], int, dict[str, int]]:  # fmt: skip
    """(levels, files written, files each query reads) of one layout."""
    import lakecluster.clustering as layout_module
    from lakecluster.compaction.rewrite_local import file_slices
    from lakecluster.curves import argsort_keys
    from lakecluster.hierarchy import find_parents
    from lakecluster.sketches import BoundarySketches
    from lakecluster.stream.ssb import SSB_FULL_COLUMNS

    by_name = {c.name: c for c in SSB_FULL_COLUMNS}
    sketches = BoundarySketches.empty([by_name[c] for c in columns])
    for batch in table.to_batches(65_536):
        for c in columns:
            sketches.sketches[c].update(batch.column(c))
    chosen = layout_module.choose_levels
    if levels is not None:
        forced = tuple(levels)

        def force(*_: object, **__: object) -> tuple[int, ...]:
            return forced

        layout_module.choose_levels = force  # type: ignore[assignment]
    try:
        picked = np.random.default_rng(0).choice(table.num_rows, min(table.num_rows, 100_000), replace=False)
        sample = table.take(picked)
        layout = layout_module.ClusteringLayout.build(
            sketches, columns, curve="hilbert", target_cells=files, weights=weights,
            column_types={c: by_name[c].type for c in columns},
            parents=find_parents(sample, columns, FILTERED) if parents else None)  # fmt: skip
    finally:
        layout_module.choose_levels = chosen
    cell, key = layout.keys(table.select(list(columns)))
    order = argsort_keys(key)
    slices = file_slices(np.ascontiguousarray(cell[order]).view(f"S{cell.shape[1]}").ravel(), files)
    read = skipping(file_ranges(table, order, np.asarray([s for s, _ in slices])))
    levels = layout.levels + tuple(g.levels for g in layout.groupings)
    return levels, len(slices), {q: int(m.sum()) for q, m in read.items()}


def tuned_weights(table: pa.Table, columns: Sequence[str], files: int, objective: str) -> dict[str, float]:
    """The weights ``tune --queries --keep-columns --objective`` picks for bench/ssb.py's 13 queries,
    scored on 200,000 of the rows (from equal weights, the compactor's default)."""
    from ssb import where_clauses

    from lakecluster.layout.advise import current_candidate
    from lakecluster.layout.model import WorkloadModel
    from lakecluster.layout.search import recommend_weights
    from lakecluster.stream.ssb import SSB_FULL_COLUMNS
    from lakecluster.workload.queries import parse_workload

    picked = np.sort(np.random.default_rng(0).choice(table.num_rows, min(table.num_rows, 200_000), replace=False))
    sample = table.take(picked)
    parents = [c for c in FILTERED if pa.types.is_string(table[c].type)]
    model = WorkloadModel(parse_workload(where_clauses(), SSB_FULL_COLUMNS), sample,
                          np.full(sample.num_rows, table.num_rows / sample.num_rows), files, 1,
                          parent_candidates=parents, objective=objective)  # fmt: skip
    best = recommend_weights(model, current_candidate(columns, {}, ()))[0]
    return dict(zip(columns, best.candidate.weights, strict=True))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--scale-factor", type=float, default=0.3)
    p.add_argument("--files", type=int, default=300)
    p.add_argument("--columns", nargs="+", default=["s_city", "c_city", "p_brand1"])
    p.add_argument("--levels", nargs="*", default=[], metavar="L1,L2,...", help="forced level counts, one per column")
    p.add_argument("--weights", nargs="*", default=[], metavar="COLUMN=WEIGHT")
    from lakecluster.layout.model import OBJECTIVES

    p.add_argument("--tune", choices=OBJECTIVES, metavar="OBJECTIVE",
                   help=f"the weights tune --queries --keep-columns --objective OBJECTIVE picks "
                   f"({', '.join(OBJECTIVES)})")  # fmt: skip
    args = p.parse_args()
    weights = {k: float(v) for k, v in (w.split("=", 1) for w in args.weights)}
    started = time.perf_counter()
    table = rows(args.scale_factor)
    print(f"{table.num_rows:,} rows ({time.perf_counter() - started:.0f} s)", flush=True)
    if args.tune:
        weights = tuned_weights(table, args.columns, args.files, args.tune)
        print(f"tune --objective {args.tune}: {weights} ({time.perf_counter() - started:.0f} s)", flush=True)
    vectors: list[list[int] | None] = [[int(x) for x in v.split(",")] for v in args.levels] or [None]
    header = False
    for vector in vectors:
        levels, written, read = trial(table, args.columns, args.files, vector, weights)
        if not header:
            print("levels | files written | " + " ".join(read) + " | total")
            header = True
        print(f"{levels} | {written} | {' '.join(map(str, read.values()))} | {sum(read.values())}", flush=True)


if __name__ == "__main__":
    main()
