"""Predict what a compaction round would do under other thresholds, from the table as it is.

For every setting of a grid of ``[compaction]`` thresholds the planner is replayed over the live
files (no data is read, nothing is written): the groups it would rewrite, their bytes (the round's
write cost), and the files a point query on each clustering column would read afterwards. The
files no group touches keep their clustering depth (measured from their column stats against the
boundary sketches); a group of ``n`` output files laid out with ``L`` levels on a column is read
``n / L`` files deep on it (at least one), the same model the compactor's layout is built on.
bench/tune_check.py compares the prediction with what a compaction round then really does.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from lakecluster.clustering import ClusteringLayout, clustering_depth
from lakecluster.compaction.planner import compacted_bytes_per_row, plan_files
from lakecluster.config import CompactionConfig, Config
from lakecluster.config.validate import validate
from lakecluster.errors import ConfigError
from lakecluster.hierarchy import Parent
from lakecluster.sketches import BoundarySketches
from lakecluster.table.live_files import DataFile

TUNABLE = ("target_file_bytes", "min_file_bytes", "max_group_bytes", "min_input_files", "merge_fanout",
           "max_generation", "max_groups_per_run")  # fmt: skip


@dataclass(frozen=True)
class Prediction:
    settings: dict[str, int]
    groups: int
    bytes_rewritten: int
    files_after: int
    point_query_files: dict[str, float]

    def write_amplification(self, new_bytes: int) -> float:
        """Bytes this round rewrites per byte of not yet compacted data (generation 0)."""
        return self.bytes_rewritten / new_bytes if new_bytes else 0.0


def grid(base: CompactionConfig, axes: Mapping[str, Sequence[int]]) -> list[CompactionConfig]:
    """Every combination of the axes' values over ``base`` (keys of ``TUNABLE``)."""
    unknown = set(axes) - set(TUNABLE)
    if unknown:
        raise ConfigError(", ".join(sorted(unknown)), f"not a tunable threshold; tune takes {', '.join(TUNABLE)}")
    names = list(axes)
    points: list[dict[str, Any]] = [dict(zip(names, values, strict=True))
                                    for values in itertools.product(*(axes[n] for n in names))]  # fmt: skip
    return [dataclasses.replace(base, **point) for point in points]


def default_axes(base: CompactionConfig) -> dict[str, list[int]]:
    """Half, current and double the file size, and the merge fan-outs around the current one."""
    sizes = sorted({max(base.min_file_bytes, base.target_file_bytes // 2), base.target_file_bytes,
                    base.target_file_bytes * 2})  # fmt: skip
    fanouts = sorted({max(2, base.merge_fanout // 2), base.merge_fanout, base.merge_fanout * 2})
    return {"target_file_bytes": sizes, "merge_fanout": fanouts}


def predict(config: Config, cfg: CompactionConfig, files: Sequence[DataFile], actions: pa.Table,
            sketches: BoundarySketches, version: int,
            parents: Mapping[str, Parent] | None = None) -> Prediction:  # fmt: skip
    """What one round under ``cfg`` would rewrite and the point-query depth per column after it
    (``parents``: the layout's, ``Compactor.parents``; a column's point query then reads one of
    its parent's levels too)."""
    the_plan = plan_files(list(files), version, cfg)
    rewritten = {f.path for g in the_plan.groups for f in g.files}
    kept = [f.path for f in files if f.path not in rewritten]
    columns = list(config.table.clustering_columns)
    k = config.sketches.boundaries
    depth = {c: clustering_depth(actions, kept, sketches, c, k) for c in columns}
    files_after = len(kept)
    for group in the_plan.groups:
        n_out = group.expected_files(cfg.target_file_bytes, compacted_bytes_per_row(files, group.partition))
        layout = ClusteringLayout.build(sketches, columns, curve=cfg.curve, target_cells=n_out, k=k,
                                        weights=cfg.weights(), column_types=config.table.clustering_types(),
                                        round_cuts=cfg.round_cuts,
                                        parents=parents if cfg.group_by_parents else None)  # fmt: skip
        for i, (c, levels) in enumerate(zip(columns, layout.levels, strict=True)):
            cut = levels * math.prod(g.levels for g in layout.groupings if g.index == i)
            depth[c] += max(1.0, n_out / max(cut, 1))
        files_after += n_out
    settings = {name: int(getattr(cfg, name)) for name in TUNABLE}
    return Prediction(settings, len(the_plan.groups), sum(g.bytes for g in the_plan.groups), files_after,
                      {c: round(v, 1) for c, v in depth.items()})  # fmt: skip


def valid(config: Config, cfg: CompactionConfig) -> bool:
    """Whether a grid point is a configuration the compactor would accept."""
    try:
        validate(dataclasses.replace(config, compaction=cfg))
    except ConfigError:
        return False
    return True
