"""Runs (compaction/runs.py), the spill store (compaction/spill.py) and a reducer's sorting of a
run within its budget (compaction/rewrite_tasks.py): the pieces of the rewrite in Spark tasks
that bound its memory, tested without Spark."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from lakecluster.compaction import rewrite_tasks
from lakecluster.compaction.runs import as_rows, plan_runs
from lakecluster.compaction.spill import BlobStore
from lakecluster.curves import key_array
from lakecluster.file_plan import file_plan


def _keys(rng: np.random.Generator, cell_rows: np.ndarray, fine_width: int = 2) -> np.ndarray:
    """Rows' full keys (2-byte cell, then ``fine_width`` random bytes), cell by cell in curve order."""
    cells = np.repeat(np.arange(len(cell_rows), dtype=">u2"), cell_rows)
    matrix = np.zeros((len(cells), 2 + fine_width), dtype=np.uint8)
    matrix[:, :2] = cells.view(np.uint8).reshape(-1, 2)
    matrix[:, 2:] = rng.integers(0, 256, (len(cells), fine_width), dtype=np.uint8)
    return matrix


@pytest.mark.parametrize("seed", range(6))
def test_runs_stay_inside_their_file_and_hold_about_the_rows_asked(seed: int) -> None:
    rng = np.random.default_rng(seed)
    cell_rows = rng.integers(1, 400, 60)
    cell_rows[rng.integers(0, 60)] = 20_000  # a cell far larger than a file
    keys = _keys(rng, cell_rows)
    cells = np.unique(as_rows(keys[:, :2]))
    file_of_cell, _ = file_plan(cell_rows, 8)
    run_rows = 1_000
    plan = plan_runs(cells, cell_rows, file_of_cell, as_rows(keys[::2]),
                     bytes_per_row=10.0, run_bytes=run_rows * 10)  # fmt: skip
    rows = as_rows(keys)
    run = plan.run_of(rows)
    cell_of_row = np.repeat(np.arange(len(cell_rows)), cell_rows)
    assert np.array_equal(plan.file_of_run[run], file_of_cell[cell_of_row]), "every row's run is in its cell's file"
    assert np.all(np.diff(run[np.argsort(rows, kind="stable")]) >= 0), "runs follow the key order"
    per_run = np.bincount(run, minlength=plan.runs)
    assert per_run.max() <= 1.5 * run_rows, per_run.max()
    file_rows = np.bincount(file_of_cell, weights=cell_rows)
    assert plan.runs >= int(np.ceil(file_rows / run_rows).sum()) * 0.9


def test_equal_keys_are_never_parted_and_a_file_of_one_key_is_one_run() -> None:
    rng = np.random.default_rng(1)
    keys = _keys(rng, np.array([5_000, 10, 10]), fine_width=0)  # the first cell: one key throughout
    cells = np.unique(as_rows(keys))
    plan = plan_runs(cells, np.array([5_000, 10, 10]), np.array([0, 1, 1]), as_rows(keys),
                     bytes_per_row=10.0, run_bytes=1_000)  # fmt: skip
    run = plan.run_of(as_rows(keys))
    assert len(set(run[:5_000].tolist())) == 1 and plan.file_of_run.tolist() == [0, 1]


def _blob(keys: np.ndarray, values: np.ndarray) -> tuple[int, int, bytes]:
    table = pa.table({"v": values}).append_column(rewrite_tasks._KEY, key_array(keys))
    return table.num_rows, table.nbytes, rewrite_tasks._ipc(table)


def test_a_run_over_its_budget_is_sorted_in_parts_that_keep_key_then_input_order(tmp_path: Path) -> None:
    rng = np.random.default_rng(7)
    store = BlobStore(str(tmp_path), memory_limit=50_000)
    expected = []
    for batch in range(12):
        keys = rng.integers(0, 40, (5_000, 1), dtype=np.uint8)  # many equal keys: their input order counts
        values = np.arange(batch * 5_000, (batch + 1) * 5_000)
        store.add(0, (0, batch), *_blob(keys, values))
        expected.append((keys[:, 0], values))
    assert store.spilled_bytes > 0 and store.held <= 50_000
    parts = list(rewrite_tasks._sorted_parts(store, 0, budget=60_000, spill_dir=str(tmp_path)))
    assert len(parts) > 4, "cut again into parts of about the budget"
    got = np.concatenate([t["v"].to_numpy()[order] for t, order in parts])
    keys = np.concatenate([k for k, _ in expected])
    values = np.concatenate([v for _, v in expected])
    want = values[np.argsort(keys, kind="stable")]
    assert np.array_equal(got, want)
    assert max(t.take(pa.array(o)).nbytes for t, o in parts) <= 2 * 60_000
    store.close()
    assert list(tmp_path.iterdir()) == []


def test_a_run_of_one_key_over_its_budget_is_written_in_input_order_a_blob_at_a_time(tmp_path: Path) -> None:
    store = BlobStore(str(tmp_path), memory_limit=0)
    for batch in range(5):
        store.add(3, (0, 4 - batch), *_blob(np.full((1_000, 2), 9, dtype=np.uint8), np.arange(1_000) + 1_000 * batch))
    parts = list(rewrite_tasks._sorted_parts(store, 3, budget=10_000, spill_dir=str(tmp_path)))
    assert len(parts) == 5
    firsts = [int(t["v"][int(o[0])].as_py()) for t, o in parts]
    assert firsts == [4_000, 3_000, 2_000, 1_000, 0], "in the blobs' order, not as they arrived"


def test_spilled_blobs_read_back_as_written_and_leave_no_file_even_when_the_process_is_killed(tmp_path: Path) -> None:
    with BlobStore(str(tmp_path), memory_limit=6) as store:
        store.add(1, (0, 0), 1, 1, b"small")
        store.add(1, (0, 1), 1, 1, b"x" * 100_000)
        store.add(0, (1, 0), 1, 1, b"y" * 3)
        assert store.held == 5 and store.spilled_bytes == 100_003
        assert [store.read(e) for e in store.entries(1)] == [b"small", b"x" * 100_000]
        assert list(tmp_path.iterdir()) == []
    child = subprocess.Popen([sys.executable, "-c", textwrap.dedent(f"""
        import time
        from lakecluster.compaction.spill import BlobStore
        store = BlobStore({str(tmp_path)!r}, memory_limit=0)
        store.add(0, (0,), 1, 1, b"z" * 5_000_000)
        print("spilled", flush=True)
        time.sleep(60)
    """)], stdout=subprocess.PIPE, text=True)  # fmt: skip
    try:
        assert child.stdout is not None and child.stdout.readline().strip() == "spilled"
        held = [os.readlink(f"/proc/{child.pid}/fd/{fd}") for fd in os.listdir(f"/proc/{child.pid}/fd")]
        assert any(link.startswith(str(tmp_path)) and link.endswith("(deleted)") for link in held), held
        assert list(tmp_path.iterdir()) == [], "the spill file has no name while it is used"
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait()
    time.sleep(0.1)
    assert list(tmp_path.iterdir()) == []


def test_a_run_of_one_heavy_key_among_others_is_cut_so_the_heavy_key_is_written_as_it_is(tmp_path: Path) -> None:
    # 99.8 % of the rows share one key: quantile cuts all fall on it, and with [cut, next cut)
    # sub-runs its sub-run kept the other keys too, was never of one key, and was cut again and
    # again to the depth limit, then sorted whole (800,000 bytes for a budget of 60,000).
    rng = np.random.default_rng(0)
    store = BlobStore(str(tmp_path), memory_limit=0)
    expected_keys, expected_values = [], []
    for batch in range(20):
        keys = np.full((5_000, 2), 7, dtype=np.uint8)
        keys[:10, 1] = rng.integers(8, 255, 10)
        values = np.arange(batch * 5_000, (batch + 1) * 5_000)
        store.add(0, (0, batch), *_blob(keys, values))
        expected_keys.append(as_rows(keys))
        expected_values.append(values)
    parts = list(rewrite_tasks._sorted_parts(store, 0, budget=60_000, spill_dir=str(tmp_path)))
    assert max(t.nbytes for t, _ in parts) <= 60_000
    got = np.concatenate([t["v"].to_numpy()[order] for t, order in parts])
    keys, values = np.concatenate(expected_keys), np.concatenate(expected_values)
    assert np.array_equal(got, values[np.argsort(keys, kind="stable")])


def test_a_reducer_that_receives_other_rows_than_were_counted_writes_nothing(tmp_path: Path) -> None:
    class Spec:
        task_memory_bytes = 1 << 20

    store = BlobStore(str(tmp_path), memory_limit=1 << 20)
    store.add(0, (0, 0), *_blob(np.zeros((95, 1), dtype=np.uint8), np.arange(95)))
    opened = []

    def piece_writer(piece: int, schema: pa.Schema) -> object:
        opened.append(piece)
        raise AssertionError("no file may be opened")

    with pytest.raises(rewrite_tasks.RewriteCountsError, match="95 rows, 100 were counted"):
        list(rewrite_tasks._write_file(Spec(), store, [0], (50, 50), piece_writer, str(tmp_path)))  # type: ignore[arg-type]
    assert opened == []
