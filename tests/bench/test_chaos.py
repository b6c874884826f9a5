"""bench/chaos.py's checks on a table on S3 (the tests' SeaweedFS server): the same checks as on a
local table, read through delta-rs with storage options, DuckDB with an S3 secret and a listing of
the prefix; and its report, which keeps the other storage's figures in docs/benchmarks.md."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.fs as pafs
import pytest
from deltalake import write_deltalake

from bench.chaos import LOCAL_HEADING, MALFORMED_EVERY, S3_HEADING, Storage, check, disk_factor, with_section
from lakecluster.config import load_config
from lakecluster.index.spec import IndexSpec
from lakecluster.index.sync import store_for
from lakecluster.table import LakeTable
from tests.index.test_concurrency import problems
from tests.services.s3 import S3Server

pytestmark = pytest.mark.integration

PRODUCED = 1_200  # generator offsets 0..1199; 0, 500 and 1000 are the malformed ones


def append(storage: Storage, table: str, keys: list[int]) -> None:
    """A stream commit of rows with these keys (one partition)."""
    write_deltalake(table, lineorder(keys), mode="append", partition_by=["d_year"], storage_options=storage.options)


def lineorder(keys: list[int]) -> pa.Table:
    return pa.table({"lo_orderkey": pa.array(keys, pa.int64()), "d_year": pa.array([1995] * len(keys), pa.int32())})


def test_checks_read_a_table_on_s3_pass_when_exact_and_catch_a_duplicate_and_a_lost_index_file(
    s3: S3Server, s3_prefix: str
) -> None:
    storage = Storage.on_s3(s3, s3_prefix)
    table = storage.location("lineorder")
    valid = [k for k in range(PRODUCED) if k % MALFORMED_EVERY]
    for part in (valid[:600], valid[600:]):  # two versions for the time-travel check
        append(storage, table, part)
    malformed = pa.table({"partition": pa.array([0, 1, 2], pa.int32()), "offset": pa.array([7, 7, 9], pa.int64())})
    write_deltalake(table + "_quarantine", malformed, storage_options=storage.options)
    base = [f"--set=table.path={table}"]

    result = check(storage, table, table + "_quarantine", PRODUCED, 3600, base)
    assert (result["rows"], result["expected_rows"]) == (len(valid), len(valid))
    assert result["rows_exact"] and result["duckdb_exact"]
    assert result["quarantine_exact"] and result["quarantined"] == 3
    assert (result["travel_versions"], result["travel_ok"], result["travel_failures"]) == (2, 2, [])
    assert result["index_problems"] == []  # check() synced the index under the table's prefix on S3

    fs, root = s3.filesystem(), table.removeprefix("s3://")
    objects = [i for i in fs.get_file_info(pafs.FileSelector(root, recursive=True)) if i.type == pafs.FileType.File]
    on_disk, live = disk_factor(storage, table)
    assert on_disk == sum(i.size for i in objects)
    assert 0 < live < on_disk, "the log and the index are stored beside the live data files"

    append(storage, table, valid[:1])  # a row twice
    duplicated = check(storage, table, table + "_quarantine", PRODUCED, 3600, base)
    assert not duplicated["rows_exact"] and not duplicated["duckdb_exact"]

    spec = IndexSpec.of(LakeTable(load_config(overrides={"table.path": table, **storage.settings}, environ={})))
    manifest = store_for(spec).manifest()
    assert manifest is not None and problems(spec, table) == []
    fs.delete_file(f"{spec.index_path.removeprefix('s3://')}/{manifest.files[0]}")
    assert problems(spec, table) == [f"version {manifest.delta_version}: manifest names missing file(s) "
                                     f"{[manifest.files[0]]}"]  # fmt: skip


def test_a_run_replaces_its_own_storage_figures_and_keeps_the_others() -> None:
    doc = "# Benchmarks\n\n## Memory\n\nm\n\n## Chaos: local\n\nold local\n\n## Anchors\n\na\n"
    with_s3 = with_section(doc, f"{S3_HEADING}: one\n\ns3 figures\n", s3=True)
    assert with_s3 == (
        "# Benchmarks\n\n## Memory\n\nm\n\n## Chaos: local\n\nold local\n\n"
        f"{S3_HEADING}: one\n\ns3 figures\n\n## Anchors\n\na\n"
    )
    again = with_section(with_s3, f"{S3_HEADING}: two\n\nnew s3\n", s3=True)
    assert "s3 figures" not in again and "new s3" in again and "old local" in again
    local = with_section(again, f"{LOCAL_HEADING}: local\n\nnew local\n", s3=False)
    assert local == (
        "# Benchmarks\n\n## Memory\n\nm\n\n## Chaos: local\n\nnew local\n\n"
        f"{S3_HEADING}: two\n\nnew s3\n\n## Anchors\n\na\n"
    )
