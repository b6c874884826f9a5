"""Files scanned by single-column point queries, per layout, next to the bound N^(2/3).

    python bench/skipping.py --rows 1000000 --files 1000

SSB-like table: s_city and c_city (250 values each), p_brand (1000 values sharing the prefix
"MFGR#"), uniform and Zipf-skewed brand variants. The same rows are laid out as: random (what a
stream writes), linear sort, Z and Hilbert on 10-bit sampled ranks (Delta / Hudi "sample"),
lakecluster's layout (equal-depth levels per column, cells as files — the same code the
compactor runs, in numpy), the real compactor (Spark rewrite of the random files into a Delta
table, files read back), and delta-rs ``optimize.z_order`` run for real on the same files. For every
layout, files are equal-row cuts of the ordering (lakecluster: whole cells); the count is the mean
over 20 values per column of files whose [min, max] holds the value. Also: rewrite throughput of
delta-rs z_order vs the lakecluster compactor on the same input files (MB/s of input).
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np
import pyarrow as pa

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from bench.ingest import write_section  # noqa: E402
from lakecluster.clustering import ClusteringLayout  # noqa: E402
from lakecluster.compaction.rewrite_local import file_slices  # noqa: E402
from lakecluster.curves import argsort_keys, curve_key  # noqa: E402
from lakecluster.schema import ColumnSpec  # noqa: E402
from lakecluster.sketches import BoundarySketches, ColumnSketch  # noqa: E402

COLUMNS = ("s_city", "c_city", "p_brand")


def make_table(rows: int, zipf: bool, seed: int = 1) -> pa.Table:
    rng = np.random.default_rng(seed)
    cities = np.array([f"NATION{i // 10:02d}{i % 10}" for i in range(250)])
    brands = np.array([f"MFGR#{i:04d}" for i in range(1000)])
    if zipf:
        p = 1 / np.arange(1, 1001) ** 1.0
        brand_idx = rng.choice(1000, rows, p=p / p.sum())
        brands = brands[rng.permutation(1000)]
    else:
        brand_idx = rng.integers(0, 1000, rows)
    return pa.table({
        "s_city": cities[rng.integers(0, 250, rows)], "c_city": cities[rng.integers(0, 250, rows)],
        "p_brand": brands[brand_idx], "lo_revenue": rng.integers(1, 10**6, rows),
    })  # fmt: skip


def files_scanned(table: pa.Table, file_of_row: np.ndarray, seed: int = 5) -> list[float]:
    """Mean files whose [min, max] holds the value, over 20 values per column."""
    out = []
    n_files = int(file_of_row.max()) + 1
    for c in COLUMNS:
        codes = np.unique(table[c].to_numpy(zero_copy_only=False), return_inverse=True)[1]
        lo = np.full(n_files, np.iinfo(np.int64).max)
        hi = np.full(n_files, -1)
        np.minimum.at(lo, file_of_row, codes)
        np.maximum.at(hi, file_of_row, codes)
        values = np.random.default_rng(seed).choice(codes.max() + 1, 20, replace=False)
        out.append(float(np.mean([((lo <= v) & (hi >= v)).sum() for v in values])))
    return out


def equal_cuts(order: np.ndarray, files: int) -> np.ndarray:
    file_of_row = np.empty(len(order), dtype=np.int64)
    file_of_row[order] = (np.arange(len(order)) * files) // len(order)
    return file_of_row


def sketches_of(table: pa.Table) -> BoundarySketches:
    out = {}
    for c in COLUMNS:
        s = ColumnSketch("string")
        s.update(table[c])
        out[c] = s
    return BoundarySketches(out)


def lakecluster_layout(table: pa.Table, files: int, curve: str = "hilbert") -> tuple[np.ndarray, float]:
    started = time.perf_counter()
    layout = ClusteringLayout.build(sketches_of(table), COLUMNS, curve=curve, target_cells=files)  # type: ignore[arg-type]
    cell, key = layout.keys(table)
    order = argsort_keys(key)
    cells = np.ascontiguousarray(cell[order]).view(f"S{cell.shape[1]}").ravel()
    file_sorted = np.empty(table.num_rows, dtype=np.int64)
    for i, (start, stop) in enumerate(file_slices(cells, files)):
        file_sorted[start:stop] = i
    file_of_row = np.empty(table.num_rows, dtype=np.int64)
    file_of_row[order] = file_sorted
    return file_of_row, time.perf_counter() - started


def write_random_files(table: pa.Table, files: int, path: Path) -> int:
    """The rows, with a row_id, as ``files`` equal appends by delta-rs (what a stream leaves); bytes."""
    from deltalake import DeltaTable, write_deltalake

    data = table.append_column("row_id", pa.array(np.arange(table.num_rows)))
    chunk = -(-data.num_rows // files)
    for start in range(0, data.num_rows, chunk):
        write_deltalake(str(path), data.slice(start, chunk), mode="append")
    return sum(pa.table(DeltaTable(str(path)).get_add_actions(flatten=True))["size_bytes"].to_pylist())


def file_of_rows(path: Path, rows: int) -> np.ndarray:
    """Which live file of the table holds each row_id."""
    import pyarrow.parquet as pq
    from deltalake import DeltaTable

    file_of_row = np.full(rows, -1, dtype=np.int64)
    for i, uri in enumerate(DeltaTable(str(path)).file_uris()):
        file_of_row[pq.read_table(uri.replace("file://", ""), columns=["row_id"])["row_id"].to_numpy()] = i
    assert (file_of_row >= 0).all(), "a row is missing from the rewritten table"
    return file_of_row


def delta_rs_zorder(table: pa.Table, files: int, source: Path, workdir: Path) -> tuple[np.ndarray, float]:
    """delta-rs ``optimize.z_order`` over the random files at ``source`` (copied), to ``files`` outputs."""
    from deltalake import DeltaTable

    path = workdir / "zorder"
    shutil.copytree(source, path)
    dt = DeltaTable(str(path))
    in_bytes = sum(pa.table(dt.get_add_actions(flatten=True))["size_bytes"].to_pylist())
    started = time.perf_counter()
    dt.optimize.z_order(list(COLUMNS), target_size=max(1, in_bytes // files))
    seconds = time.perf_counter() - started
    return file_of_rows(path, table.num_rows), seconds


# The compactor never reads the source, but the config of a table not fed by the built-in
# generator must name another source kind. One group, the whole table.
COMPACTOR_CONFIG = """
[source]
kind = "kafka"
[source.kafka]
bootstrap_servers = "unused:9092"
topics = ["unused"]
[table]
path = "{path}"
partition_by = []
clustering_columns = [{clustering}]
columns = [{columns}]
[compaction]
column_weights = {{ {weights} }}
round_cuts = {round_cuts}
local_rewrite_max_bytes = {local_max}
target_file_bytes = {target}
min_file_bytes = 1
max_group_bytes = {max_group}
max_groups_per_run = 1
min_input_files = 2
[metrics]
port = 0
"""


def compactor_config(path: Path, columns: Sequence[ColumnSpec], clustering: Sequence[str], target: int,
                     max_group: int, weights: Mapping[str, float] | None = None,
                     round_cuts: bool = True, local_max: int = 128 << 20) -> str:  # fmt: skip
    declared = ", ".join(f'{{ name = "{c.name}", type = "{c.type}"' + (", required = true" if c.required else "")
                         + " }" for c in columns)  # fmt: skip
    return COMPACTOR_CONFIG.format(path=path, clustering=", ".join(f'"{c}"' for c in clustering), columns=declared,
                                   weights=", ".join(f"{k} = {v:g}" for k, v in (weights or {}).items()),
                                   target=target, max_group=max_group, round_cuts=str(round_cuts).lower(),
                                   local_max=local_max)  # fmt: skip


def prepare_compactor(table: pa.Table, files: int, source: Path, workdir: Path, engine: str = "local") -> Path:
    """A copy of ``source`` with the boundary sketches the stream would have kept, and a compactor
    config for it (one group, the whole table); returns the config file."""
    from deltalake import DeltaTable

    from lakecluster.table import LakeTable

    path = workdir / "lakecluster"
    shutil.copytree(source, path)
    dt = DeltaTable(str(path))
    in_bytes = sum(pa.table(dt.get_add_actions(flatten=True))["size_bytes"].to_pylist())
    sketches = sketches_of(table)
    sketches.delta_version = dt.version()
    LakeTable.at(str(path)).sketches().write(sketches)  # what the stream would have kept up to date
    cfg_file = workdir / "lakecluster.toml"
    columns = [*(ColumnSpec(c, "string") for c in COLUMNS), ColumnSpec("lo_revenue", "long"),
               ColumnSpec("row_id", "long")]  # fmt: skip
    cfg_file.write_text(compactor_config(path, columns, COLUMNS, max(1, in_bytes // files), in_bytes * 2,
                                         local_max=(128 << 20) if engine == "local" else 0))  # fmt: skip
    return cfg_file


def lakecluster_compactor(spark, table: pa.Table, files: int, source: Path, workdir: Path,  # type: ignore[no-untyped-def]
                          engine: str = "local") -> tuple[np.ndarray, float]:  # fmt: skip
    """The real compactor (read, key, sort, parquet write, Delta commit) on a copy; ``engine``: the
    default rewrite (``local``: in the compactor's process for groups up to 128 MiB) or always Spark."""
    from lakecluster.compaction.loop import Compactor
    from lakecluster.config import load_config

    cfg_file = prepare_compactor(table, files, source, workdir, engine)
    compactor = Compactor(load_config(cfg_file, environ={}), spark=spark)
    started = time.perf_counter()
    results = compactor.run_once()
    seconds = time.perf_counter() - started
    assert [r.result for r in results] == ["committed"], results
    return file_of_rows(workdir / "lakecluster", table.num_rows), seconds


Result = tuple[str, list[float], int]  # layout, files scanned per column, file count


def run_variant(spark, rows: int, files: int, zipf: bool, workdir: Path) -> tuple[list[Result], dict]:  # type: ignore[no-untyped-def]
    table = make_table(rows, zipf)
    results = []
    rng = np.random.default_rng(9)
    results.append(("random (stream order)", files_scanned(table, equal_cuts(rng.permutation(rows), files)), files))
    linear = np.lexsort([table[c].to_numpy(zero_copy_only=False) for c in reversed(COLUMNS)])
    results.append(("linear sort (s, c, p)", files_scanned(table, equal_cuts(linear, files)), files))
    layout = ClusteringLayout.build(sketches_of(table), COLUMNS, curve="hilbert", target_cells=files)
    ranks = [r.astype(np.int64) for r in layout.ranks(table)]
    for curve, label in (
        ("zorder", "Z on sampled ranks, 10 bits/column"),
        ("hilbert", "Hilbert on sampled ranks, 10 bits/column"),
    ):
        order = argsort_keys(curve_key(curve, ranks, [10, 10, 10]))  # type: ignore[arg-type]
        results.append((label, files_scanned(table, equal_cuts(order, files)), files))
    source = workdir / "random"
    in_bytes = write_random_files(table, files, source)
    file_of_row, zseconds = delta_rs_zorder(table, files, source, workdir)
    results.append(("delta-rs 1.6.6 optimize.z_order", files_scanned(table, file_of_row), int(file_of_row.max()) + 1))
    file_of_row, _ = lakecluster_layout(table, files)
    results.append(("lakecluster layout (numpy, same code as the compactor)", files_scanned(table, file_of_row),
                    int(file_of_row.max()) + 1))  # fmt: skip
    file_of_row, lseconds = lakecluster_compactor(spark, table, files, source, workdir)
    results.append(("**lakecluster compactor** (Spark rewrite, real files)", files_scanned(table, file_of_row),
                    int(file_of_row.max()) + 1))  # fmt: skip
    return results, {"zorder_s": zseconds, "compactor_s": lseconds, "bytes": in_bytes}


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--rows", type=int, default=1_000_000)
    p.add_argument("--files", type=int, default=1000)
    p.add_argument("--no-write", action="store_true")
    args = p.parse_args()
    command = f"python bench/skipping.py --rows {args.rows} --files {args.files}"
    out = [f"## Skipping: files scanned by point queries\n\n`{command}` — SSB-like rows, "
           "s_city and c_city 250 values, p_brand 1000 values sharing the prefix `MFGR#`; mean over 20 "
           "point values per column of files whose [min, max] holds the value. Bound: N^(2/3).\n"]  # fmt: skip
    from lakecluster.config import SparkConfig
    from lakecluster.spark import get_session

    spark = get_session(SparkConfig(master="local[2]"))
    with tempfile.TemporaryDirectory() as tmp:
        warm, small = Path(tmp) / "warm-up", make_table(20_000, False)
        write_random_files(small, 20, warm / "random")
        lakecluster_compactor(spark, small, 20, warm / "random", warm)  # JVM and workers warm before timing
        for zipf in (False, True):
            results, timing = run_variant(spark, args.rows, args.files, zipf, Path(tmp) / str(zipf))
            name = "Zipf-skewed p_brand" if zipf else "uniform"
            out.append(f"\n### {name}\n\n| layout | files | s_city | c_city | p_brand | mean | × N^(2/3) |\n"
                       "|---|---:|---:|---:|---:|---:|---:|\n")  # fmt: skip
            for label, scanned, n in results:
                mean = sum(scanned) / 3
                out.append(f"| {label} | {n} | {scanned[0]:.0f} | {scanned[1]:.0f} | {scanned[2]:.0f} | "
                           f"{mean:.1f} | {mean / n ** (2 / 3):.2f} |\n")  # fmt: skip
            mb = timing["bytes"] / 1e6
            z_rate, l_rate = mb / timing["zorder_s"], mb / timing["compactor_s"]
            out.append(f"\nRewrite throughput on the same {args.files} input files ({mb:.0f} MB): delta-rs z_order "
                       f"{z_rate:.1f} MB/s ({timing['zorder_s']:.1f} s); lakecluster compactor {l_rate:.1f} MB/s "
                       f"({timing['compactor_s']:.1f} s, Spark local[2], commit included); ratio "
                       f"{l_rate / z_rate:.2f}.\n")  # fmt: skip
    section = "".join(out)
    print(section)
    if not args.no_write:
        write_section(REPO / "docs" / "benchmarks.md", "## Skipping", section)


if __name__ == "__main__":
    main()
