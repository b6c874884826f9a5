"""How a group's cells, in curve order, become output files (``file_plan``): the plan the three
rewrites (``compaction/rewrite_local.py``, ``rewrite_tasks.py``, ``rewrite.py``) all follow, so the
same layout gives the same files whichever writes them."""

from __future__ import annotations

import itertools
from collections.abc import Sequence

import numpy as np

# How far (in files) a cut between output files may move to fall between two cells: up to the
# nearest boundary, so wherever cells are no larger than a file, every file holds whole cells.
SNAP = 0.5
MIN_FILE = 0.25  # a moved cut never leaves a file smaller than this (in files) behind it


def file_plan(
    cell_rows: Sequence[int] | np.ndarray, target_files: int, *, snap: float = SNAP
) -> tuple[np.ndarray, list[tuple[int, ...]]]:
    """(run of each cell, the rows of each output file each run is written as) for cells given in
    curve order: a run is a sequence of whole cells, its files cut it in key order into equal pieces.

    The rows are cut into ``target_files`` files of equal size, then each cut moves to the nearest
    boundary between two cells when one lies within ``snap`` of a file: a file that holds whole
    cells keeps the cells' narrow ranges, and a cut left inside a cell costs every query on that
    cell a second file. A file is a run of whole cells between two moved cuts, written as
    ``pieces`` equal parts (one more than the cuts that found no boundary nearby): a cell larger
    than a file is cut into pieces of about the target, never into a file of its own plus a sliver.

    Cuts only move, they are never added, and cuts that move to the same boundary (or leave less
    than ``MIN_FILE`` of a file between them) become one: a group is written as at most
    ``target_files`` files, however unequal its cells (skewed values, round cuts). Each cell
    becoming a file of its own, as before, wrote a file per cell of half a file or more: 21%
    more files than asked on SSB (364 for 300).
    """
    rows = np.asarray(cell_rows, dtype=np.int64)
    if len(rows) == 0:
        return np.zeros(0, dtype=np.int64), []
    ends = np.cumsum(rows)
    total = int(ends[-1])
    files = max(1, min(int(target_files), total))
    step = total / files
    ideal = step * np.arange(1, files)
    inner = ends[:-1]  # boundaries between two cells
    if len(inner):
        at = np.clip(np.searchsorted(inner, ideal), 1, len(inner)) - 1
        nearer = np.minimum(at + 1, len(inner) - 1)
        take_next = np.abs(inner[nearer] - ideal) < np.abs(inner[at] - ideal)
        nearest = inner[np.where(take_next, nearer, at)]
        moved = np.abs(nearest - ideal) <= snap * step
    else:
        nearest, moved = np.zeros(len(ideal), dtype=np.int64), np.zeros(len(ideal), dtype=bool)
    # One pass over the cuts (one per file, not per row): a moved cut within MIN_FILE of the cut
    # before it (moved or not) is dropped, so two cuts never leave a sliver between them.
    kept = np.ones(len(ideal), dtype=bool)
    previous = 0.0
    for i in range(len(ideal)):
        here = float(nearest[i]) if moved[i] else float(ideal[i])
        if moved[i] and here - previous < MIN_FILE * step:
            kept[i] = False
            continue
        previous = here
    cuts = nearest[moved & kept]  # boundaries between files, in rows before them (increasing)
    file_of_cell = np.searchsorted(cuts, ends - rows, side="right")
    inside = np.searchsorted(cuts, ideal[~moved], side="right")  # the file each unmoved cut falls in
    pieces = 1 + np.bincount(inside, minlength=len(cuts) + 1)
    run_rows = np.bincount(file_of_cell, weights=rows, minlength=len(pieces)).astype(np.int64)
    return file_of_cell.astype(np.int64), [_equal(int(r), int(k)) for r, k in zip(run_rows, pieces, strict=True)]


def _equal(rows: int, k: int) -> tuple[int, ...]:
    """``rows`` cut into ``k`` pieces of equal rows (the first ones a row fewer when it does not divide)."""
    return tuple(int(b - a) for a, b in itertools.pairwise((rows * i) // k for i in range(k + 1)))
