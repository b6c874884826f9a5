"""Read-only commands: on a mistyped table path one line naming it, exit 1, nothing created, no
Spark; on a table, not one byte of it changed."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
from deltalake import DeltaTable, write_deltalake

from lakecluster.config import load_config
from lakecluster.index.spec import IndexSpec
from lakecluster.index.sync import sync
from lakecluster.sketches import BoundarySketches
from lakecluster.table import LakeTable
from tests.cli.conftest import run_cli, tree, write_ssb_table

READ_ONLY = {
    "compact --dry-run": ["compact", "--dry-run"],
    "explain": ["explain", "--where", "s_city = 'UNITED KI1'"],
    "boundaries": ["boundaries"],
    "index show": ["index", "show"],
    "vacuum --dry-run": ["vacuum", "--dry-run"],
    "workload": ["workload"],
}


@pytest.mark.parametrize("command", list(READ_ONLY))
def test_missing_table_is_one_line_naming_the_path_and_nothing_is_created(tmp_path: Path, command: str) -> None:
    missing = tmp_path / "tabel" / "lineorder"  # mistyped directory: neither it nor its parent exists
    proc = run_cli("--set", f"table.path={missing}", *READ_ONLY[command], cwd=tmp_path)
    assert proc.returncode == 1, proc.stderr
    # Reached before Spark: starting it would have failed on the subprocess's JAVA_HOME instead.
    assert proc.stderr == (
        f"lakecluster: TableNotFoundError: no Delta table at {missing} "
        "(check table.path; the stream creates it on its first run)\n"
    )
    assert proc.stdout == ""
    assert not missing.parent.exists()
    assert tree(tmp_path) == []  # nor anything else in the working directory (spark-warehouse, metastore_db)


def test_config_reads_no_table_and_creates_nothing(tmp_path: Path) -> None:
    missing = tmp_path / "tabel" / "lineorder"
    proc = run_cli("--set", f"table.path={missing}", "config", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["table"]["path"] == str(missing)
    assert proc.stderr == ""
    assert tree(tmp_path) == []


def fingerprint(root: Path) -> dict[str, tuple[int, str]]:
    """Every file under ``root``: relative path -> (size, SHA-256 of its content)."""
    return {str(p.relative_to(root)): (p.stat().st_size, hashlib.sha256(p.read_bytes()).hexdigest())
            for p in sorted(root.rglob("*")) if p.is_file()}  # fmt: skip


@pytest.fixture
def used_table(tmp_path: Path) -> Path:
    """A table as services leave it: several appends of small files, boundary sketches, and an index
    one commit behind (a sync would write a segment and a manifest)."""
    table = write_ssb_table(tmp_path / "lineorder")
    data = DeltaTable(str(table)).to_pyarrow_table()
    write_deltalake(str(table), data.slice(0, 500), mode="append", partition_by=["d_year"])
    config = load_config(None, overrides={"table.path": json.dumps(str(table))})
    sketches = BoundarySketches.empty([config.table.column(c) for c in config.table.clustering_columns])
    for c in config.table.clustering_columns:
        sketches.sketches[c].update(data[c])
    sketches.delta_version = DeltaTable(str(table)).version()
    LakeTable(config).sketches().write(sketches)
    sync(IndexSpec.of(LakeTable(config)))
    write_deltalake(str(table), data.slice(500, 300), mode="append", partition_by=["d_year"])
    return table


READS = {
    "status": ["status"],
    "explain": ["explain", "--where", "s_city = 'UNITED KI1' AND d_year >= 1995"],
    "boundaries": ["boundaries"],
    "tune": ["tune"],
    "report": ["report", "--out", "{out}"],
    "config": ["config"],
    "workload": ["workload", "--since", "1d"],
    "compact --dry-run": ["compact", "--dry-run"],
    # A layout change with no sketches of the new columns: the plan needs none, and builds none.
    "compact --full --dry-run": ["--set", 'table.clustering_columns=["c_nation", "lo_quantity"]', "compact",
                                 "--full", "--dry-run"],
    "compact --dry-run --where": ["compact", "--dry-run", "--full", "--where", "d_year >= 1995 AND s_city = 'X'"],
}


def test_read_only_commands_leave_the_table_byte_identical(used_table: Path, tmp_path: Path) -> None:
    before = fingerprint(used_table)
    out = tmp_path / "report"
    for name, args in READS.items():
        proc = run_cli("--set", f"table.path={used_table}", *(a.format(out=out) for a in args), cwd=tmp_path)
        # Exit 0 on a JAVA_HOME that cannot start Spark: none of them needs it.
        assert proc.returncode == 0, (name, proc.stderr)
        assert fingerprint(used_table) == before, f"{name} changed the table's directory"
    assert (out / "index.html").is_file()  # report's output went to --out, outside the table
    explained = run_cli("--set", f"table.path={used_table}", "--json", *READS["explain"], cwd=tmp_path)
    index = json.loads(explained.stdout)["index"]
    assert index["commits_from_log"] == 1 and index["built_in_memory"] is None


def test_explain_writes_the_index_only_with_sync_and_no_sync_is_accepted_with_a_note(
    used_table: Path, tmp_path: Path
) -> None:
    before = fingerprint(used_table)
    where = READS["explain"][1:]
    old = run_cli("--set", f"table.path={used_table}", "--json", "explain", "--no-sync", *where, cwd=tmp_path)
    assert old.returncode == 0 and fingerprint(used_table) == before
    assert old.stderr == ("lakecluster: explain --no-sync is the default now (explain writes nothing; --sync "
                          "updates the index first); drop the flag\n")  # fmt: skip
    synced = run_cli("--set", f"table.path={used_table}", "--json", "explain", "--sync", *where, cwd=tmp_path)
    assert synced.returncode == 0, synced.stderr
    changed = {p for p, v in fingerprint(used_table).items() if before.get(p) != v}
    assert changed and all(p.startswith("_lakecluster/index/") for p in changed)
    assert json.loads(synced.stdout)["index"]["commits_from_log"] == 0
    assert json.loads(synced.stdout)["files_to_read"] == json.loads(old.stdout)["files_to_read"]
