"""Runs: ranges of the sort key small enough for a task to sort in memory, each within one output file.

A rewrite in Spark tasks cuts the curve into output files along cells (``lakecluster.file_plan``).
A file can hold far more rows than a task may hold decoded (a 1 GiB file is several GiB of Arrow
columns), so each file's key range is cut further into runs of about ``run_bytes`` decoded: the
reducer writing the file sorts one run at a time and writes it, in key order, to the file.

The cuts are full sort keys. A cut at the start of a cell is the cell's key followed by zeros (the
least key inside it); a cut inside a cell is the key a sample of the cell's rows puts at that
share of the cell. A row belongs to the run whose range holds its key (rows of equal keys are
never parted), so every task maps a row to the same run by itself.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

MAX_SAMPLES = 1 << 18  # sort keys the count pass samples in all (a few MiB on the driver)


def as_rows(matrix: np.ndarray) -> np.ndarray:
    """An ``(n, width)`` uint8 key matrix as n fixed-width byte strings (sorted as the keys are)."""
    width = max(matrix.shape[1], 1)
    if matrix.shape[1] == 0:
        return np.zeros(len(matrix), dtype="S1")
    return np.ascontiguousarray(matrix).view(f"S{width}").ravel()


def _padded(cells: np.ndarray, width: int) -> np.ndarray:
    """Each cell's least full key: its bytes, then zeros up to ``width``."""
    out = np.zeros((len(cells), width), dtype=np.uint8)
    out[:, : cells.dtype.itemsize] = np.frombuffer(cells.tobytes(), dtype=np.uint8).reshape(len(cells), -1)
    return out.view(f"S{width}").ravel()


@dataclass(frozen=True)
class RunPlan:
    """Run ``i`` holds the keys in ``[cuts[i - 1], cuts[i])`` (from the least key, to the greatest);
    ``file_of_run[i]`` is the output file it belongs to."""

    cuts: np.ndarray  # S<width>, non-decreasing
    file_of_run: np.ndarray  # int64, len(cuts) + 1, non-decreasing

    def run_of(self, keys: np.ndarray) -> np.ndarray:
        """The run of each key (fixed-width byte strings, :func:`as_rows`)."""
        if len(self.cuts) == 0:
            return np.zeros(len(keys), dtype=np.int64)
        return np.searchsorted(self.cuts, keys, side="right").astype(np.int64)

    @property
    def runs(self) -> int:
        return len(self.file_of_run)


def plan_runs(cells: np.ndarray, counts: np.ndarray, file_of_cell: np.ndarray, samples: np.ndarray,
              bytes_per_row: float, run_bytes: int) -> RunPlan:  # fmt: skip
    """Cut each file (a run of cells, ``file_of_cell``) into runs of about ``run_bytes`` decoded.

    Args:
        cells: the distinct cells in curve order (fixed-width byte strings: a full key's first bytes).
        counts: the rows of each cell.
        file_of_cell: the output file of each cell (non-decreasing).
        samples: sampled full sort keys (fixed-width byte strings, :func:`as_rows`), any order.
        bytes_per_row: decoded bytes a row takes (an estimate).
        run_bytes: the decoded bytes a run should hold at most.
    """
    width = samples.dtype.itemsize
    starts = _padded(cells, width)  # each cell's least key
    ends = np.cumsum(counts)
    first = ends - counts  # rows before each cell
    samples = np.sort(samples)
    # The samples of cell c are samples[lo[c]:hi[c]] (a key's cell is its first bytes).
    lo = np.searchsorted(samples, starts, side="left")
    hi = np.r_[lo[1:], len(samples)]
    cuts: list[bytes] = []
    file_of_run: list[int] = []
    files = np.flatnonzero(np.r_[True, np.diff(file_of_cell) != 0])  # first cell of each file
    for n, c0 in enumerate(files):
        c1 = int(files[n + 1]) if n + 1 < len(files) else len(cells)
        fid = int(file_of_cell[c0])
        floor = bytes(starts[c0])  # the file's least key: its first cell's
        if n:
            cuts.append(floor)
        file_of_run.append(fid)
        rows = int(ends[c1 - 1] - first[c0])
        pieces = int(np.ceil(rows * bytes_per_row / max(run_bytes, 1))) if rows else 1
        for k in range(1, pieces):
            at = int(first[c0]) + rows * k // pieces  # rows of the table before the cut
            c = int(np.searchsorted(ends, at, side="right"))  # the cell holding row `at`
            if at == first[c]:
                key = bytes(starts[c])
            elif hi[c] > lo[c]:
                share = (at - first[c]) / counts[c]
                key = bytes(samples[lo[c] + min(int(share * (hi[c] - lo[c])), hi[c] - lo[c] - 1)])
            else:  # no sample inside this (small) cell: cut at its start
                key = bytes(starts[c])
            if key <= floor:
                continue  # an empty run (equal keys, or two cuts in one cell without samples between)
            cuts.append(key)
            floor = key
            file_of_run.append(fid)
    return RunPlan(np.array(cuts, dtype=f"S{width}"), np.array(file_of_run, dtype=np.int64))
