"""Choose what to rewrite: groups of files by benefit, per partition, bounded work per run.

Files belong to *runs*. A file written by the stream (or any other writer) is generation 0: small
and unclustered. A compaction writes one clustered run of generation ``g`` (its files are named
``part-g<g>-<run id>-...``). The policy is tiered, as in LSM trees and liquid clustering:

* generation-0 files of a partition are gathered into groups (at least ``min_input_files`` files,
  at most ``max_group_bytes``) and each group becomes a run of generation 1;
* when a partition holds ``merge_fanout`` runs of the same generation ``g < max_generation``,
  they are merged (re-clustered together) into one run of generation ``g + 1``, because one
  clustered run of n files skips far better than several small ones;
* a run's files smaller than ``min_file_bytes`` ride along with the next group of the partition;
* with ``main_run_merge_ratio`` > 0, once the bytes of a partition outside its largest run (its
  main run) reach that share of the main run's, the whole partition (at most ``max_group_bytes``)
  is re-clustered into one new main run: fewer, larger runs read fewer files (a point query reads
  about n^(2/3) files of each clustered run of n files), at more bytes rewritten.

Each row is rewritten at most once per generation, so write amplification is bounded by about
``max_generation`` + 1, and the work of a run grows with new data, not with the table size.
Large files of settled runs are never touched. (Merges into the main run do rewrite them: each
makes a run one generation above the partition's highest, so generations then pass
``max_generation``.)
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from lakecluster.config import CompactionConfig
from lakecluster.table.deletion_vectors import cardinalities
from lakecluster.table.live_files import DataFile, data_files

MAX_GENERATION_IN_NAME = 99  # file names carry the generation in two digits


def compacted_bytes_per_row(files: Sequence[DataFile], partition: tuple | None = None) -> float | None:
    """Bytes per row of the compacted files (generation 1 and up, with a row count) among ``files``
    in ``partition``, or among all of them when that partition has none; None if there is none
    (``Group.expected_files``; ``Compactor.compacted_bytes_per_row`` is the same over live files)."""

    def per_row(chosen: Iterable[DataFile]) -> float | None:
        size = rows = 0
        for f in chosen:
            if f.generation >= 1 and f.rows > 0:
                size, rows = size + f.size, rows + f.rows
        return size / rows if rows > 0 and size > 0 else None

    inside = per_row(f for f in files if f.partition == partition) if partition else None
    return inside if inside is not None else per_row(files)


@dataclass(frozen=True)
class Group:
    partition: tuple[tuple[str, str | None], ...]
    files: tuple[DataFile, ...]
    generation: int  # of the run this group becomes
    reason: str
    relayout: bool = False  # only re-clusters files written under another layout (relayout.py)

    @property
    def partition_values(self) -> dict[str, str | None]:
        return dict(self.partition)

    @property
    def bytes(self) -> int:
        return sum(f.size for f in self.files)

    @property
    def rows(self) -> int:
        return sum(f.rows for f in self.files)

    def expected_files(self, target_file_bytes: int, bytes_per_row: float | None = None) -> int:
        """Output files of about ``target_file_bytes``: the nearest count, not the next one up.

        The output's size is estimated as ``rows x bytes_per_row``, what the table's compacted files
        hold per row: sorted and clustered, rows compress better than in the stream's files (about
        a quarter on the built-in generator's), so counting the input's bytes would make files
        that much smaller than the target. Without ``bytes_per_row`` (no file compacted yet, or no
        row counts), the input's bytes. Never more than the input's bytes (a merge of compacted
        runs makes as many files as their bytes, none smaller than its inputs'), nor less than half."""
        estimate = float(self.bytes)
        if bytes_per_row and all(f.rows > 0 for f in self.files):
            # At least half the input: a figure learned on other rows (another partition, columns
            # added since) makes files at most twice the target.
            estimate = max(min(estimate, self.rows * bytes_per_row), estimate / 2)
        return max(1, math.floor(estimate / target_file_bytes + 0.5))


@dataclass
class Plan:
    table_version: int
    groups: list[Group] = field(default_factory=list)
    files_total: int = 0
    bytes_total: int = 0
    # ``compact --full`` (``relayout.py``): files and bytes of the pass still off the current layout.
    relayout_files: int = 0
    relayout_bytes: int = 0


def plan_live(live: pa.Table, version: int, partition_by: Sequence[str], cfg: CompactionConfig) -> Plan:
    """The plan for a table of live files (``live_files.LiveFiles``): the same plan as
    :func:`plan_files` over every file, built from only the files a group could take.

    Those are new files, small files, and every file of the runs of a generation that has at
    least ``merge_fanout`` runs in its partition. Settled runs (the bulk of a large table) are
    filtered out in a few vectorised passes, so planning costs little more than the new files.
    """
    generation = live["generation"].to_numpy()
    sizes = live["size"].to_numpy()
    parts = [f"partition.{p}" for p in partition_by]
    # Runs of young generations, the only ones that can merge (settled ones are most of a big table).
    young = np.flatnonzero((generation > 0) & (generation < cfg.max_generation))
    runs = live.select([*parts, "generation", "run"]).take(pa.array(young))
    # One text key per (partition, generation): a run merges only with runs of both the same.
    key = pc.binary_join_element_wise(*[pc.fill_null(runs[c], "\x00null") for c in parts],
                                      runs["generation"].cast(pa.string()), "\x00")  # fmt: skip
    keyed = pa.table({"key": key, "run": runs["run"]})
    counts = keyed.group_by(["key", "run"]).aggregate([]).group_by("key").aggregate([("run", "count")])
    mergeable = counts.filter(pc.greater_equal(counts["run_count"], cfg.merge_fanout))["key"]
    wanted = (generation == 0) | (sizes < cfg.min_file_bytes)
    if len(mergeable):
        wanted[young[pc.is_in(key, value_set=mergeable).to_numpy(zero_copy_only=False)]] = True
    complete: set[str] = set()
    if cfg.main_run_merge_ratio > 0 and live.num_rows:
        partition_key = _partition_keys(live, parts)
        complete = _due_for_main_run_merge(partition_key, live["run"], live["size"], cfg)
        if complete:
            wanted |= pc.is_in(partition_key, value_set=pa.array(sorted(complete))).to_numpy(zero_copy_only=False)
    files = data_files(live.filter(pa.array(wanted)), partition_by)
    result = plan_files(files, version, cfg, complete=complete)
    if cfg.purge_deletion_vectors:
        result.groups = _with_purges(result.groups, live, partition_by, cfg)
    result.files_total, result.bytes_total = live.num_rows, int(sizes.sum())
    return result


def deleted_share(live: pa.Table) -> np.ndarray:
    """The share of each live file's rows its deletion vector deletes (0 without one)."""
    deleted = cardinalities(live["deletion_vector"]).to_numpy(zero_copy_only=False).astype(np.float64)
    rows = pc.fill_null(live["rows"], 0).to_numpy().astype(np.float64)
    return np.divide(deleted, rows + deleted, out=np.zeros_like(deleted), where=(rows + deleted) > 0)


def _with_purges(groups: list[Group], live: pa.Table, partition_by: Sequence[str],
                 cfg: CompactionConfig) -> list[Group]:  # fmt: skip
    """``groups`` with, in front, groups of the files the planner leaves alone whose deletion
    vectors delete at least ``purge_deleted_share`` of their rows: rewritten, the deleted rows
    leave the table's live files (and, after vacuum, its storage). At most ``max_groups_per_run``."""
    due = live.filter(pa.array(deleted_share(live) >= cfg.purge_deleted_share))
    if not due.num_rows:
        return groups
    planned = {f.path for g in groups for f in g.files}
    files = [f for f in data_files(due, partition_by) if f.path not in planned]
    purges = settled_groups(files, cfg, lambda n: f"purge the rows deletion vectors deleted from {n} file(s)")
    return (purges + groups)[: cfg.max_groups_per_run]


def settled_groups(files: list[DataFile], cfg: CompactionConfig, reason: Callable[[int], str], *,
                   priority: Mapping[str, float] | None = None, relayout: bool = False) -> list[Group]:  # fmt: skip
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

    def close(partition: tuple, batch: list[DataFile]) -> None:
        generation = max(1, max(b.generation for b in batch))
        groups.append(Group(partition, tuple(batch), generation, reason(len(batch)), relayout=relayout))

    for partition, pfiles in by_partition.items():
        batch: list[DataFile] = []
        for f in pfiles:
            if batch and sum(b.size for b in batch) + f.size > cfg.max_group_bytes:
                close(partition, batch)
                batch = []
            batch.append(f)
        if batch:
            close(partition, batch)
    if score:
        groups.sort(key=lambda g: -sum(score.get(f.path, 0.0) for f in g.files))
    return groups


def _partition_keys(live: pa.Table, parts: Sequence[str]) -> pa.Array:
    """One text per file naming its partition, as ``_partition_key`` writes it: each value as its
    length, a colon and itself, a null as "n" (no two partitions share a text, whatever their values)."""
    if not parts:
        return pa.array([""] * live.num_rows, pa.string())
    pieces = [pc.fill_null(pc.binary_join_element_wise(pc.cast(pc.utf8_length(live[c]), pa.string()), live[c], ":"),
                           "n") for c in parts]  # fmt: skip
    return pc.binary_join_element_wise(*pieces, "").combine_chunks() if len(pieces) > 1 else pieces[0].combine_chunks()


def _partition_key(partition: tuple[tuple[str, str | None], ...]) -> str:
    return "".join("n" if v is None else f"{len(v)}:{v}" for _, v in partition)


def _due_for_main_run_merge(partition_key: pa.Array, run: pa.ChunkedArray, size: pa.ChunkedArray,
                            cfg: CompactionConfig) -> set[str]:  # fmt: skip
    """The partitions whose bytes outside their largest run reach ``main_run_merge_ratio`` of it,
    and whose bytes in all fit one group (``max_group_bytes``)."""
    files = pa.table({"p": partition_key, "run": run, "size": size})
    totals = files.group_by("p").aggregate([("size", "sum")])
    runs = files.filter(pc.is_valid(files["run"])).group_by(["p", "run"]).aggregate([("size", "sum")])
    largest = runs.group_by("p").aggregate([("size_sum", "max")]).rename_columns(["p", "main"])
    joined = totals.join(largest, "p", join_type="inner")
    due = _main_run_due(joined["main"].to_numpy().astype(np.float64),
                        joined["size_sum"].to_numpy().astype(np.float64), cfg)  # fmt: skip
    return set(joined["p"].filter(pa.array(due)).to_pylist())


def _main_run_due(main: np.ndarray, total: np.ndarray, cfg: CompactionConfig) -> np.ndarray:
    """Whether partitions whose main run holds ``main`` of their ``total`` bytes are merged into it
    (numpy arrays, or one partition's numbers as 0-d arrays)."""
    rest = total - main
    return (rest > 0) & (rest >= cfg.main_run_merge_ratio * main) & (total <= cfg.max_group_bytes)


def plan_files(files: Sequence[DataFile], version: int, cfg: CompactionConfig,
               complete: Collection[str] | None = None) -> Plan:  # fmt: skip
    """The plan for the live ``files`` of ``version`` (already read from the log).

    ``complete``: the partitions (``_partition_key``) of which ``files`` holds every live file, the
    only ones a main-run merge may take whole; None: ``files`` is every live file of the table."""
    result = Plan(version, files_total=len(files), bytes_total=sum(f.size for f in files))
    by_partition: dict[tuple, list[DataFile]] = defaultdict(list)
    for f in files:
        by_partition[f.partition].append(f)
    candidates: list[tuple[float, Group]] = []
    for partition, pfiles in sorted(by_partition.items(), key=lambda kv: str(kv[0])):
        whole = complete is None or _partition_key(partition) in complete
        main = _main_run_merge(partition, pfiles, cfg) if whole else None
        if main is not None:
            candidates.append(main)
        else:
            candidates.extend((len(g.files) / max(g.bytes, 1), g) for g in _partition_groups(partition, pfiles, cfg))
    # Most benefit first: merges of many files per byte rewritten (for a merge into the main run,
    # the files outside it: those are what the partition would otherwise rewrite).
    candidates.sort(key=lambda c: (-c[0], c[1].generation))
    result.groups = [g for _, g in candidates[: cfg.max_groups_per_run]]
    return result


def _partition_groups(partition: tuple, files: list[DataFile], cfg: CompactionConfig) -> list[Group]:
    groups: list[Group] = []
    runs: dict[str, list[DataFile]] = defaultdict(list)
    fresh: list[DataFile] = []
    for f in files:
        if f.run is None:
            fresh.append(f)
        else:
            runs[f.run].append(f)
    small_tails = [f for rf in runs.values() for f in rf if f.size < cfg.min_file_bytes]

    # 1. Runs of one generation merge into the next once there are merge_fanout of them.
    used: set[str] = set()
    by_gen: dict[int, list[str]] = defaultdict(list)
    for run, rf in runs.items():
        by_gen[rf[0].generation].append(run)
    for gen in sorted(by_gen):
        if gen >= cfg.max_generation:
            continue
        ids = sorted(by_gen[gen])
        while len(ids) >= cfg.merge_fanout:
            chosen, ids = ids[: cfg.merge_fanout], ids[cfg.merge_fanout :]
            merged = tuple(f for r in chosen for f in runs[r])
            if sum(f.size for f in merged) > cfg.max_group_bytes:
                continue  # too big to merge: the run stays as it is (bounded work)
            used.update(chosen)
            groups.append(Group(partition, merged, gen + 1, f"merge {len(chosen)} generation-{gen} runs"))

    # 2. Unclustered files (and small files of settled runs) become new generation-1 runs.
    loose = fresh + [f for f in small_tails if f.run not in used]
    loose.sort(key=lambda f: f.path)
    batch: list[DataFile] = []
    batch_bytes = 0
    for f in loose:
        if batch and batch_bytes + f.size > cfg.max_group_bytes:
            groups.append(_fresh_group(partition, batch))
            batch, batch_bytes = [], 0
        batch.append(f)
        batch_bytes += f.size
    if len(batch) >= cfg.min_input_files:
        groups.append(_fresh_group(partition, batch))
    return groups  # a remainder below min_input_files waits for more data


def _main_run_merge(partition: tuple, files: list[DataFile], cfg: CompactionConfig) -> tuple[float, Group] | None:
    """One group of every file of the partition when its bytes outside its largest run reach
    ``main_run_merge_ratio`` of that run's (and all of them fit ``max_group_bytes``), with the files
    per byte outside the main run (its rank among the round's groups); else None."""
    if cfg.main_run_merge_ratio <= 0:
        return None
    run_bytes: dict[str, int] = defaultdict(int)
    for f in files:
        if f.run is not None:
            run_bytes[f.run] += f.size
    if not run_bytes:
        return None
    main_run = max(run_bytes, key=run_bytes.__getitem__)
    main, total = run_bytes[main_run], sum(f.size for f in files)
    if not _main_run_due(np.asarray(main, np.float64), np.asarray(total, np.float64), cfg):
        return None
    rest = total - main
    generation = min(MAX_GENERATION_IN_NAME, max(f.generation for f in files) + 1)
    fresh = sum(1 for f in files if f.run is None)
    outside = sum(1 for f in files if f.run != main_run)
    return outside / rest, Group(partition, tuple(sorted(files, key=lambda f: f.path)), generation,
                 f"merge into the main run: {rest / main:.0%} of its bytes outside it, "
                 f"{len(run_bytes) - 1} other run(s) and {fresh} new file(s)")  # fmt: skip


def _fresh_group(partition: tuple, files: list[DataFile]) -> Group:
    n_fresh = sum(1 for f in files if f.run is None)
    reason = f"cluster {n_fresh} unclustered file(s)"
    if n_fresh < len(files):
        reason += f" + {len(files) - n_fresh} small file(s) of earlier runs"
    return Group(partition, tuple(files), 1, reason)
