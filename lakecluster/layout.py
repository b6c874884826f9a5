"""The clustering layout: which coarse cell and which curve position each row gets.

A row's sort key has two parts, both curve keys over coordinates taken from the boundary
sketches (never raw values):

* the **cell**: each clustering column cut into ``levels`` ranges of about equal depth, each cut
  moved to the roundest value nearby (``cuts``: a year start, a multiple of 1000, a short string
  prefix), so queries on such units read whole levels; the cells are ordered along the curve.
  Levels are chosen per column (``choose_levels``) so that the number of cells is about the
  number of output files and every column gets its share of the resolution: with equal bits a
  column of 250 distinct values is starved by one of 1000. An output file holds whole cells,
  so a point query on column *i* reads about ``files / levels[i]`` files; with equal levels
  that is the bound ``N^((d-1)/d)``.
* the **fine key**: the curve over full-resolution ranks, ordering rows inside a cell (narrow row
  groups, and the cut points when one cell is larger than a file).

Everything is vectorised over Arrow batches.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from lakecluster.curves import Curve, bits_for, curve_key
from lakecluster.cuts import Unit, level_cuts, unit_of
from lakecluster.sketches import Boundaries, BoundarySketches

FINGERPRINT_CHARS = 8  # hex characters of a layout fingerprint in a file name


def layout_fingerprint(columns: Sequence[str], weights: Mapping[str, float], curve: str) -> str:
    """A short, stable id of a clustering layout: its columns in order, each one's weight (1 when not
    given) and the curve. Files a compaction writes carry it in their names (``part-g<g>-<run>-l<id>-``),
    so ``compact --full`` tells files clustered under the current layout from the others.
    Boundaries and levels are not part of it: they follow the data, not the user's choice."""
    what = json.dumps({"columns": list(columns), "curve": curve,
                       "weights": [float(weights.get(c, 1.0)) for c in columns]}, sort_keys=True)  # fmt: skip
    return hashlib.sha256(what.encode()).hexdigest()[:FINGERPRINT_CHARS]


def choose_levels(target_cells: float, caps: Sequence[int], weights: Sequence[float] | None = None) -> tuple[int, ...]:
    """Levels per column with product ~ ``target_cells``, split by weight, each at most its cap.

    ``caps`` are the distinct ranks a column has (more levels than values cannot cut it finer);
    the budget a capped column cannot use goes to the others.
    """
    d = len(caps)
    w = [1.0] * d if weights is None else [float(x) for x in weights]
    if len(w) != d or any(x <= 0 for x in w):
        raise ValueError("one positive weight per column")
    budget = math.log(max(target_cells, 1.0))
    fixed: dict[int, float] = {}
    while True:
        free = [i for i in range(d) if i not in fixed]
        if not free:
            break
        remaining = budget - sum(fixed.values())
        share = {i: remaining * w[i] / sum(w[j] for j in free) for i in free}
        over = [i for i in free if share[i] > math.log(max(caps[i], 1))]
        if not over:
            fixed.update(share)
            break
        for i in over:
            fixed[i] = math.log(max(caps[i], 1))
    ideal = [min(math.exp(fixed[i]), max(caps[i], 1)) for i in range(d)]
    levels = [max(1, math.floor(x)) for x in ideal]
    # Round up the columns that lost most to the floor while the cell count stays near the target.
    for i in sorted(range(d), key=lambda j: levels[j] / ideal[j]):
        grown = math.prod(levels) // levels[i] * (levels[i] + 1)
        if levels[i] < caps[i] and grown <= 1.15 * target_cells:
            levels[i] += 1
    return tuple(levels)


@dataclass(frozen=True)
class ClusteringLayout:
    """Everything a task needs to key rows: picklable, shipped to the executors."""

    curve: Curve
    columns: tuple[str, ...]
    boundaries: tuple[Boundaries, ...]
    levels: tuple[int, ...]
    # Per column, the ranks at which its levels 1, 2, ... start (at most ``levels - 1``).
    level_starts: tuple[np.ndarray, ...]

    @classmethod
    def build(
        cls,
        sketches: BoundarySketches,
        columns: Sequence[str],
        *,
        curve: Curve,
        target_cells: float,
        k: int = 1024,
        weights: Mapping[str, float] | None = None,
        column_types: Mapping[str, str] | None = None,
        round_cuts: bool = True,
    ) -> ClusteringLayout:
        """The layout of ``columns`` for about ``target_cells`` cells.

        ``column_types`` are the declared types (``lakecluster.schema``): a date or timestamp column
        is cut at calendar starts (``cuts.unit_of``). ``round_cuts=False`` keeps the cuts at equal
        depth.
        """
        bounds = [sketches.boundaries(c, k) for c in columns]
        caps = [max(len(b), 1) for b in bounds]
        w = [float((weights or {}).get(c, 1.0)) for c in columns]
        levels = choose_levels(target_cells, caps, w)
        starts = []
        for i, (column, b, lv) in enumerate(zip(columns, bounds, levels, strict=True)):
            if round_cuts and lv > 1 and len(b) > 1:
                unit: Unit = "string" if b.kind == "string" else unit_of((column_types or {}).get(column, "double"))
                cuts = level_cuts(b.edges, b.fractions(), lv, unit)
                bounds[i] = b.including(cuts)
                starts.append(np.searchsorted(bounds[i].edges, cuts).astype(np.int64))
            else:
                equal_depth = b.level_of(np.arange(len(b)), lv)
                starts.append(np.flatnonzero(np.diff(equal_depth)).astype(np.int64) + 1)
        return cls(curve, tuple(columns), tuple(bounds), levels, tuple(starts))

    @property
    def cells(self) -> int:
        return math.prod(self.levels)

    def ranks(self, table: pa.Table) -> list[np.ndarray]:
        return [b.ranks(table[c]) for c, b in zip(self.columns, self.boundaries, strict=True)]

    def cell_key(self, ranks: Sequence[np.ndarray]) -> np.ndarray:
        coords = [np.searchsorted(s, r, side="right") for r, s in zip(ranks, self.level_starts, strict=True)]
        return curve_key(self.curve, coords, [bits_for(lv) for lv in self.levels])

    def fine_key(self, ranks: Sequence[np.ndarray]) -> np.ndarray:
        return curve_key(self.curve, [r.astype(np.int64) for r in ranks],
                         [bits_for(max(len(b), 1)) for b in self.boundaries])  # fmt: skip

    def keys(self, table: pa.Table) -> tuple[np.ndarray, np.ndarray]:
        """(cell key, full sort key = cell key + fine key) as ``(n, bytes)`` uint8 arrays."""
        ranks = self.ranks(table)
        cell = self.cell_key(ranks)
        return cell, np.concatenate([cell, self.fine_key(ranks)], axis=1)

    def describe(self) -> dict[str, object]:
        return {"curve": self.curve, "columns": list(self.columns), "levels": list(self.levels),
                "boundaries": [len(b) for b in self.boundaries]}  # fmt: skip


# How far (in files) a cut between output files may move to fall between two cells: up to the
# nearest boundary, so wherever cells are no larger than a file, every file holds whole cells.
SNAP = 0.5
MIN_FILE = 0.25  # a moved cut never leaves a file smaller than this (in files) behind it


def file_plan(
    cell_rows: Sequence[int] | np.ndarray, target_files: int, *, snap: float = SNAP
) -> tuple[np.ndarray, np.ndarray]:
    """(file number of each cell, pieces of each file) for cells given in curve order.

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
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
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
    return file_of_cell.astype(np.int64), pieces.astype(np.int64)


def clustering_depth(actions: pa.Table, paths: Sequence[str] | None, sketches: BoundarySketches, column: str,
                     k: int = 1024) -> float:  # fmt: skip
    """Mean number of the given files (``None``: every file of ``actions``) whose [min, max] of
    ``column`` holds a value (by depth).

    The expected files a point query on ``column`` reads among these files; a well clustered set
    of n files reaches about ``n / levels``, an unclustered one n.
    """
    if paths is None:
        rows = actions
    elif not paths:
        return 0.0
    else:
        rows = actions.filter(pc.is_in(actions["path"], value_set=pa.array(list(paths), pa.string())))
    if f"min.{column}" not in rows.column_names:
        return float(rows.num_rows)
    b = sketches.boundaries(column, k)
    if len(b) == 0:
        return float(rows.num_rows)
    covered = b.mass(b.ranks(rows[f"min.{column}"]), b.ranks(rows[f"max.{column}"]))
    no_stats = rows[f"min.{column}"].is_null().to_numpy(zero_copy_only=False)
    return float(np.where(no_stats, 1.0, covered).sum())  # files without stats must be read


def file_ranges(files: pa.Table, sketches: BoundarySketches, column: str, k: int = 1024) -> tuple[np.ndarray, ...]:
    """Each file's ``[min, max]`` of ``column`` placed by the share of rows below it (0 to 1), by
    the column's boundaries: narrow ranges stacked along the diagonal are a well clustered layout.
    A file without stats for the column spans 0 to 1 (every query on it reads the file); no
    boundaries yet: empty arrays."""
    if f"min.{column}" not in files.column_names or column not in sketches.sketches:
        return np.zeros(0), np.zeros(0)
    b = sketches.boundaries(column, k)
    if len(b) == 0:
        return np.zeros(0), np.zeros(0)
    zero = np.zeros(files.num_rows, dtype=np.int64)
    lo = b.mass(zero, b.ranks(files[f"min.{column}"]) - 1)
    hi = b.mass(zero, b.ranks(files[f"max.{column}"]))
    unknown = files[f"min.{column}"].is_null().to_numpy(zero_copy_only=False)
    return np.where(unknown, 0.0, lo), np.where(unknown, 1.0, hi)
