"""Changing the layout of an existing table as docs/tuning.md says: `tune --queries` recommends,
the advice goes into the configuration, `compact --full` re-clusters, and queries then read about
the files tune predicted. And `compact --where`: only the files that can match are rewritten."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake

from lakecluster.config import load_config, parse_overrides
from lakecluster.index.prune import prune
from lakecluster.stream.generator import GeneratorSettings, generate
from lakecluster.stream.ssb import SSB_COLUMNS
from lakecluster.table import LakeTable
from tests.cli.conftest import run_cli, write_ssb_table
from tests.conftest import lakecluster_cmd, subprocess_env
from tests.generated_tables import SMALL

pytestmark = pytest.mark.integration

WORKLOAD = """-- what the dashboards filter on: nations and quantities, never the default clustering columns
c_nation = 'FRANCE'
c_nation = 'PERU'
lo_quantity BETWEEN 10 AND 12
lo_quantity = 40
c_nation = 'CHINA' AND lo_quantity < 5
"""


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(lakecluster_cmd(*args), env=subprocess_env(), capture_output=True, text=True, timeout=300)


def test_tune_advice_applied_and_compact_full_read_what_tune_predicted(tmp_path: Path) -> None:
    # A table another writer filled (8 appends, no boundary sketches at all), clustered by nothing.
    table = tmp_path / "t"
    defaults = load_config(None)
    for i in range(8):
        rows = generate(i * 4_000, (i + 1) * 4_000, defaults.source.generator, defaults.table.columns)
        write_deltalake(str(table), pa.Table.from_batches([rows]), mode="append")
    workload = tmp_path / "q.sql"
    workload.write_text(WORKLOAD)
    flags = [f"--set=table.path={table}", "--set=table.partition_by=[]", *[f"--set={k}={v}" for k, v in SMALL.items()]]

    tuned = _cli(*flags, "--json", "tune", f"--queries={workload}")
    assert tuned.returncode == 0, tuned.stderr
    advice = json.loads(tuned.stdout)["workload"]
    best = advice["recommended"]
    assert set(best["clustering_columns"]) == {"c_nation", "lo_quantity"} and best["partition_by"] == []
    applied = [*flags, f"--set=table.clustering_columns={json.dumps(best['clustering_columns'])}",
               *[f"--set=compaction.column_weights.{c}={w}" for c, w in best["column_weights"].items()]]  # fmt: skip

    full = _cli(*applied, "compact", "--full")

    assert full.returncode == 0, full.stderr
    assert "boundary sketches for c_nation, lo_quantity built from the table: 32000 rows" in full.stderr
    assert full.stdout.splitlines()[-1].startswith("lakecluster compact --full: done, every file is clustered "
                                                   "under the current layout")  # fmt: skip
    lake = LakeTable(load_config(None, overrides=parse_overrides([a.removeprefix("--set=") for a in applied]),
                                 environ={}))  # fmt: skip
    for query, predicted in zip(advice["query_text"], best["files_read"], strict=True):
        read = prune(lake, query).files.num_rows
        # The boundaries come from a randomized sketch: a cut more or less moves a point query by a file or two.
        assert abs(read - predicted) <= max(3, 0.25 * predicted), (query, read, predicted)
    assert DeltaTable(str(table)).to_pyarrow_table().num_rows == 32_000


def test_compact_where_rewrites_only_the_matching_partition(tmp_path: Path) -> None:
    table = write_ssb_table(tmp_path / "lineorder", rows=3_000)
    for start in (3_000, 6_000):  # two more appends: every partition holds three small files
        write_deltalake(str(table), generate_rows(start, 3_000), mode="append", partition_by=["d_year"])
    files = _files_by_year(table)
    flags = [f"--set=table.path={table}", *[f"--set={k}={v}" for k, v in SMALL.items()]]

    typo = run_cli(*flags, "compact", "--once", "--where", "d_yaer = 1995", cwd=tmp_path)
    assert typo.returncode == 2  # refused before Spark (run_cli's JAVA_HOME could not start it)
    assert typo.stderr.startswith("lakecluster: --where, character 1: unknown column 'd_yaer' (did you mean "
                                  "'d_year'?); known columns: ")  # fmt: skip
    assert typo.stderr.count("\n") == 1

    done = _cli(*flags, "compact", "--once", "--where", "d_year = 1995")

    assert done.returncode == 0, done.stderr
    after = _files_by_year(table)
    assert {year: paths for year, paths in after.items() if year != 1995} == \
        {year: paths for year, paths in files.items() if year != 1995}  # fmt: skip
    assert after[1995] != files[1995] and all("part-g01-" in p for p in after[1995])
    assert DeltaTable(str(table)).to_pyarrow_table().num_rows == 9_000


def generate_rows(start: int, count: int) -> pa.Table:
    """Rows of ``write_ssb_table``'s schema, from ``start`` on."""
    return pa.Table.from_batches([generate(start, start + count, GeneratorSettings(), SSB_COLUMNS)])


def _files_by_year(table: Path) -> dict[int, set[str]]:
    actions = pa.table(DeltaTable(str(table)).get_add_actions(flatten=True))
    out: dict[int, set[str]] = {}
    for path, year in zip(actions["path"].to_pylist(), actions["partition.d_year"].to_pylist(), strict=True):
        out.setdefault(int(year), set()).add(path)
    return out
