"""The search: candidate layouts ranked on the cost model (``model.WorkloadModel``).

Candidates are every set of the ``MAX_COLUMNS`` columns the workload filters on most often, each
with equal weights and with the weights that minimise the objective (coordinate descent from the
equal weights and from a coarse grid), partitioned by nothing or by one of the filtered columns
with at most ``MAX_PARTITIONS`` values, and the table's current settings. A recommendation is
withheld when the best is not better enough than the current layout (``why_no_recommendation``).
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Sequence

from lakecluster.layout.model import MAX_WEIGHT, Candidate, Scored, WorkloadModel
from lakecluster.layout.partition_sizes import PartitionSizes

MAX_COLUMNS = 4
WEIGHT_ROUNDS = 8
# A recommendation must read at least this share fewer files per query than the current layout:
# below it the gain is within what a sample-based estimate can tell, and adopting a layout costs
# re-clustering the table (``tune --min-gain``).
MIN_GAIN = 0.02
GRID_WEIGHTS = (1.0, 4.0, 16.0)  # the coarse grid one of _tune_weights' descents starts from
WEIGHT_FACTORS = (16.0, 8.0, 4.0, 2.0, 1.25, 0.8, 0.5, 0.25, 0.125, 0.0625)  # one step of its descent


def recommend(model: WorkloadModel, current: Candidate | None, *,
              partitionings: Sequence[tuple[str, ...]] | None = None) -> list[Scored]:  # fmt: skip
    """Every candidate scored, best first: fewest files read on average, then the simpler layout.

    ``partitionings``: the partition columns candidates may have (default: none, or one filtered
    column of at most ``MAX_PARTITIONS`` values); the compactor passes the table's own, which an
    existing Delta table cannot change.
    """
    scored = [model.score(current)] if current is not None else []
    seen = {(current.clustering_columns, current.weights, current.partition_by)} if current is not None else set()
    ranked = list(model.usage())
    if partitionings is None:
        partitionings = [(), *((c,) for c in model.partition_columns())]
    for partition in partitionings:
        pool = [c for c in ranked if c not in partition][:MAX_COLUMNS]
        for size in range(1, len(pool) + 1):
            for cols in itertools.combinations(pool, size):
                uniform = model.score(Candidate(cols, tuple(1.0 for _ in cols), partition))
                found = [uniform]
                if size > 1:
                    tuned = _tune_weights(model, uniform)
                    if tuned.objective < uniform.objective:
                        found.append(tuned)
                for one in found:
                    key = (one.candidate.clustering_columns, one.candidate.weights, one.candidate.partition_by)
                    if key not in seen:  # the current layout is already there, marked as such
                        seen.add(key)
                        scored.append(one)
    return sorted(scored, key=_simplest_best)


def recommend_weights(model: WorkloadModel, current: Candidate) -> list[Scored]:
    """The current clustering columns and partitioning kept, only their weights searched (``tune
    --queries --keep-columns``): the current weights, equal weights, and the best weights
    ``_tune_weights`` finds from the better of the two, best first."""
    now = model.score(current)
    even = model.score(dataclasses.replace(current, weights=tuple(1.0 for _ in current.weights), current=False))
    found = [now, even]
    if len(current.clustering_columns) > 1:
        tuned = _tune_weights(model, min((now, even), key=lambda s: s.objective))
        found.append(dataclasses.replace(tuned, candidate=dataclasses.replace(tuned.candidate, current=False)))
    scored, seen = [], set()
    for one in found:  # the current layout first: a tie keeps it
        if one.candidate.weights not in seen:
            seen.add(one.candidate.weights)
            scored.append(one)
    return sorted(scored, key=_simplest_best)


def _simplest_best(s: Scored) -> tuple[tuple[float, float], bool, int, int, int]:
    c = s.candidate  # on a tie: the current layout (no change), then the one with fewer files, partitions, columns
    return s.objective, not c.current, s.files, len(c.partition_by), len(c.clustering_columns)


def why_no_recommendation(ranked: list[Scored], sizes: PartitionSizes, target_file_bytes: int, *,
                          min_gain: float = 0.0) -> str | None:  # fmt: skip
    """Why the best-ranked layout is no better than the others, or not better enough than the
    current one, to be recommended (None: it is a recommendation). Better enough: fewer of the
    queries read more files than on the equal-bits layout (``Scored.objective``), or as many and
    ``gain`` at least ``min_gain``."""
    if sizes.below_one_file(target_file_bytes):
        return sizes.describe(target_file_bytes)
    if len({s.objective for s in ranked}) == 1:
        return (f"every candidate layout reads {ranked[0].mean_files_read:,.1f} file(s) per query on average: "
                "the workload does not tell them apart")  # fmt: skip
    best, current = ranked[0], next((s for s in ranked if s.candidate.current), None)
    if current is not None and best is not current and best.objective[0] < current.objective[0]:
        return None  # fewer of the queries read more than on the equal-bits layout: worth it at any mean
    if current is not None and best is not current and (share := gain(best, current)) < min_gain:
        return (f"the best layout reads {best.mean_files_read:,.1f} file(s) per query on average against the current "
                f"{current.mean_files_read:,.1f}, {share:.2%} fewer: below the {min_gain * 100:g}% worth "
                "re-clustering the table for")  # fmt: skip
    return None


def gain(layout: Scored, current: Scored) -> float:
    """The share fewer files per query ``layout`` reads than ``current`` (negative: more), to 4
    decimals: what is printed is what is compared with a minimum."""
    if current.mean_files_read <= 0:
        return 0.0
    return round(1.0 - layout.mean_files_read / current.mean_files_read, 4)


def _tune_weights(model: WorkloadModel, start: Scored) -> Scored:
    """The column weights that read the fewest files on average: a descent from ``start`` and one
    from the best of a coarse grid (each weight 1, 4 or 16 times the least one), each scaling one
    weight at a time by the factor, from 1/16 to 16, that lowers the mean most while one does.

    Long steps and two starts because the levels move in whole steps and the mean is not convex
    in the weights: small steps from equal weights alone can stop where no step of 2 helps, far
    from the best split."""
    grid = start
    for weights in itertools.product(GRID_WEIGHTS, repeat=len(start.candidate.weights)):
        if min(weights) == 1.0 and max(weights) > 1.0:
            trial = model.score(dataclasses.replace(start.candidate, weights=weights))
            if trial.objective < grid.objective:
                grid = trial
    return min((_descend(model, start), _descend(model, grid)), key=lambda s: s.objective)


def _descend(model: WorkloadModel, start: Scored) -> Scored:
    best = start
    for _ in range(WEIGHT_ROUNDS):
        improved = False
        for i in range(len(best.candidate.weights)):
            step = best
            for factor in WEIGHT_FACTORS:
                w = list(best.candidate.weights)
                w[i] *= factor
                low = min(w)
                weights = tuple(round(x / low, 2) for x in w)
                if max(weights) > MAX_WEIGHT:
                    continue
                trial = model.score(dataclasses.replace(best.candidate, weights=weights))
                if trial.objective < step.objective:
                    step = trial
            if step is not best:
                best, improved = step, True
        if not improved:
            break
    return best
