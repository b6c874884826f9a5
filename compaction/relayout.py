"""``compact --full``: re-cluster the files a layout change left behind, a bounded part per round.

Every file a compaction writes carries the fingerprint of the layout it was clustered under in its
name (``part-g<g>-<run>-l<fingerprint>-...``, ``clustering.layout_fingerprint``: clustering columns,
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

import pyarrow as pa
import pyarrow.compute as pc

from lakecluster.compaction.planner import Group, Plan, settled_groups
from lakecluster.config import CompactionConfig
from lakecluster.table.live_files import DataFile, data_files, off_layout_mask


def still_pending(live: pa.Table, pending: pa.Array, fingerprint: str) -> pa.Table:
    """The rows of ``live`` whose path is in ``pending`` and that are still off the layout."""
    if not len(pending):
        return live.slice(0, 0)
    return live.filter(pc.and_(pc.is_in(live["path"], value_set=pending), off_layout_mask(live, fingerprint)))


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


def relayout_groups(files: list[DataFile], cfg: CompactionConfig, *, priority: Mapping[str, float] | None = None,
                    why: str = "--full") -> list[Group]:  # fmt: skip
    """The planner's ``settled_groups`` of ``files``, each a re-clustering to the current layout."""
    def reason(n: int) -> str:
        return f"re-cluster {n} file(s) not clustered under the current layout ({why})"

    return settled_groups(files, cfg, reason, priority=priority, relayout=True)


def first_group_bytes(rows: pa.Table, cfg: CompactionConfig, priority: Mapping[str, float], *,
                      partition_by: Sequence[str]) -> int:  # fmt: skip
    """The bytes of the first group the re-cluster of the live files ``rows`` would rewrite (0:
    none): what the layout loop's budget must hold before it adopts a layout."""
    groups = relayout_groups(data_files(rows, partition_by), cfg, priority=priority)
    return groups[0].bytes if groups else 0


def within_budget(groups: list[Group], left: int) -> tuple[list[Group], bool]:
    """The round's groups with the re-cluster's cut to the bytes ``left`` of its budget (in order:
    a group that does not fit pauses the ones behind it too); whether any was cut."""
    kept, cut = [], False
    for g in groups:
        if g.relayout:
            if cut or g.bytes > left:
                cut = True
                continue
            left -= g.bytes
        kept.append(g)
    return kept, cut
