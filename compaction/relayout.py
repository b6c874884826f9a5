"""``compact --full``: re-cluster the files a layout change left behind, a bounded part per round.

Every file a compaction writes carries the fingerprint of the layout it was clustered under in its
name (``part-g<g>-<run>-l<fingerprint>-...``, ``layout.layout_fingerprint``: clustering columns,
weights, curve). After the columns or weights change, a file with another fingerprint, or none (a
stream's file, a compaction's from before fingerprints), is not clustered under the current layout.
The tiered planner (``planner``) would leave such a file alone once it is large and settled; a full
pass rewrites it anyway.

The pass is the files off the current layout when it starts (``pending``): the stream's new files
keep arriving while it runs and are the planner's, so the pass ends. Each round takes groups of
pending files (per partition, files of one run together, at most ``max_group_bytes`` a group) in
front of the planner's groups, and the round keeps its limit of ``max_groups_per_run`` groups.
Progress is what the committed rewrites did: a killed pass run again finds only the files still
off the layout.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from lakecluster.compaction.planner import DataFile, Group, Plan
from lakecluster.config import CompactionConfig


def _off_mask(live: pa.Table, fingerprint: str) -> pa.ChunkedArray:
    return pc.fill_null(pc.not_equal(live["layout"], pa.scalar(fingerprint, pa.string())), True)


def off_layout(live: pa.Table, fingerprint: str) -> pa.Array:
    """The paths of the live files not written under the layout ``fingerprint``."""
    return live["path"].filter(_off_mask(live, fingerprint)).combine_chunks()


def still_pending(live: pa.Table, pending: pa.Array, fingerprint: str) -> pa.Table:
    """The rows of ``live`` whose path is in ``pending`` and that are still off the layout."""
    if not len(pending):
        return live.slice(0, 0)
    return live.filter(pc.and_(pc.is_in(live["path"], value_set=pending), _off_mask(live, fingerprint)))


def with_relayout(the_plan: Plan, live: pa.Table, pending: pa.Array, fingerprint: str,
                  partition_by: Sequence[str], cfg: CompactionConfig, *,
                  priority: Mapping[str, float] | None = None, why: str = "--full") -> Plan:  # fmt: skip
    """``the_plan`` with groups of the pending files it does not rewrite already put in front, the
    round's groups capped at ``max_groups_per_run``; ``relayout_files`` and ``relayout_bytes`` say
    what is left of the pass (every round included). ``priority``: a score per path, the files
    scoring highest first (the layout loop's files the captured workload reads most)."""
    left = still_pending(live, pending, fingerprint)
    planned = {f.path for g in the_plan.groups for f in g.files}
    sizes = left["size"].to_numpy()
    groups = relayout_groups([f for f in data_files(left, partition_by) if f.path not in planned], cfg,
                             priority=priority, why=why)  # fmt: skip
    return dataclasses.replace(the_plan, groups=(groups + the_plan.groups)[: cfg.max_groups_per_run],
                               relayout_files=left.num_rows, relayout_bytes=int(sizes.sum()))  # fmt: skip


def data_files(rows: pa.Table, partition_by: Sequence[str]) -> list[DataFile]:
    """The planner's files of rows of the live files' table."""
    values = {c: rows[c].to_pylist() for c in ["path", "size", "rows", "generation", "run"]}
    parts = {p: rows[f"partition.{p}"].to_pylist() for p in partition_by}
    return [
        DataFile(path, size, n or 0, tuple((p, parts[p][i]) for p in partition_by), gen, run)
        for i, (path, size, n, gen, run) in enumerate(zip(values["path"], values["size"], values["rows"],
                                                           values["generation"], values["run"], strict=True))
    ]  # fmt: skip


def relayout_groups(files: list[DataFile], cfg: CompactionConfig, *, priority: Mapping[str, float] | None = None,
                    why: str = "--full") -> list[Group]:  # fmt: skip
    """Per partition, files of one run next to each other, cut at ``max_group_bytes`` (a file
    larger than that is a group of its own); each group becomes a run of the highest generation
    among its files (at least 1), so settled data stays settled instead of climbing the tiers again.

    With ``priority``, the files scoring highest go first within each partition and the groups
    are ordered by their files' total score (stable: the order above on a tie)."""
    score = priority or {}
    by_partition: dict[tuple, list[DataFile]] = {}
    for f in sorted(files, key=lambda f: (str(f.partition), -score.get(f.path, 0.0), -f.generation, f.run or "",
                                          f.path)):  # fmt: skip
        by_partition.setdefault(f.partition, []).append(f)
    groups: list[Group] = []
    for partition, pfiles in by_partition.items():
        batch: list[DataFile] = []
        for f in pfiles:
            if batch and sum(b.size for b in batch) + f.size > cfg.max_group_bytes:
                groups.append(_group(partition, batch, why))
                batch = []
            batch.append(f)
        if batch:
            groups.append(_group(partition, batch, why))
    if score:
        groups.sort(key=lambda g: -sum(score.get(f.path, 0.0) for f in g.files))
    return groups


def _group(partition: tuple, files: list[DataFile], why: str) -> Group:
    generation = max(1, int(np.max([f.generation for f in files])))
    return Group(partition, tuple(files), generation,
                 f"re-cluster {len(files)} file(s) not clustered under the current layout ({why})",
                 relayout=True)  # fmt: skip
