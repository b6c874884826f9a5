"""Keep the index at the table's latest version: apply new commits, or rebuild from the log.

``sync`` reads the JSON commits after the index's version (``_delta_log/<version>.json``,
newline-delimited actions), nets out their adds and removes (stream appends and compaction
rewrites alike) and appends one segment. It rebuilds from ``DeltaTable.get_add_actions`` instead
when there is no index or it is unreadable, when it was built with other settings, when a commit
changes the table's metadata (schema, partitioning), when a commit the index needs is gone
(a checkpoint made older JSON files expendable), or when the table is not the one the index was
built from (:func:`identity`: a table deleted and created anew at the location numbers its
versions from 0 again). Both paths encode stats with the same code (``stats.py``), so the
incremental index equals a rebuild; the tests check exactly that.

Syncs may run at once in several processes. A sync whose result another one already superseded
does not publish it (``published`` is False); see ``store.py`` for what publication guarantees.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from lakecluster import metrics
from lakecluster.errors import StatsIndexError, UnsupportedTableError
from lakecluster.index.file_ids import distinct, file_ids, find
from lakecluster.index.spec import IndexSpec, schema_string_columns, table_columns
from lakecluster.index.stats import (
    FILE_ROWS,
    add_action_parts,
    from_log_actions,
    partition_keys,
    scan_nan_counts,
    tombstones,
)
from lakecluster.index.store import IndexFilesMissing, IndexStore, Manifest
from lakecluster.log_stats import partition_array
from lakecluster.schema import ColumnSpec
from lakecluster.table import IndexState, LakeTable, LogGap, NetChanges
from lakecluster.table.snapshot import Unsupported, physical_names

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class SyncResult:
    mode: str  # current | incremental | rebuild
    from_version: int | None
    to_version: int
    files_added: int
    files_removed: int
    seconds: float
    reason: str = ""
    published: bool = True  # False: a concurrent sync got there first (or this one was too slow)


SYNC_MODES = ("current", "incremental", "rebuild")
for _mode in SYNC_MODES:  # every series from the start: rates over them work at 0
    metrics.INDEX_SYNC_SECONDS.labels(_mode)


def store_for(spec: IndexSpec) -> IndexStore:
    fs, root = spec.table.filesystem(spec.index_path)
    return IndexStore(spec.index_path, fs, root, row_group_rows=spec.row_group_rows, gc_grace_s=spec.gc_grace_s)


def _spec(target: IndexSpec | LakeTable) -> IndexSpec:
    return target if isinstance(target, IndexSpec) else IndexSpec.of(target)


def index_state(table: LakeTable) -> IndexState:
    """What the table's index says about itself (its version, files, entries), for the table's state."""
    store = store_for(IndexSpec.of(table))
    try:
        manifest = store.manifest()
    except StatsIndexError as e:
        return IndexState(error=str(e))
    if manifest is None:
        return IndexState()
    return IndexState(manifest.delta_version, len(manifest.segments) + (1 if manifest.base else 0),
                      store.entries(manifest))  # fmt: skip


def rebuild(target: IndexSpec | LakeTable, reason: str = "requested", *, seed: int = 0) -> SyncResult:
    """Build the index from scratch from the table's current snapshot.

    Args:
        target: the index, or a table (then its configured index, ``IndexSpec.of``).
        reason: why, for the log line and the result.
        seed: the first seed to number the files with (the next ones when two files share a number).

    Returns:
        What was built (``published`` False: a concurrent sync got a newer index in first).

    Raises:
        TableNotFoundError: there is no table.
    """
    spec = _spec(target)
    started = time.monotonic()
    built = build(spec, seed=seed)
    published = store_for(spec).replace(built.parts, built.manifest, num_rows=built.num_rows)
    if not published.published:
        reason = f"{reason}; not published: {published.reason}"
    version = built.manifest.delta_version
    log.info("index of %s rebuilt at version %d (%s): %d files", spec.table_uri, version, reason, built.files)
    return SyncResult("rebuild", None, version, built.files, 0, time.monotonic() - started, reason,
                      published.published)  # fmt: skip


@dataclass(frozen=True)
class Built:
    """A whole index built from the table's snapshot, not written yet: the manifest to publish it
    under (no data files named) and its rows as parts in the key's order."""

    manifest: Manifest
    parts: Iterator[pa.Table]
    num_rows: int
    files: int


def build(spec: IndexSpec, *, seed: int = 0) -> Built:
    """The index of the table's current snapshot, its files numbered from ``seed`` (read only).

    Raises:
        TableNotFoundError: there is no table.
        StatsIndexError: the table was deleted and created anew while its snapshot was read.
    """
    delta = spec.table.delta
    table_id = delta.table_id()
    version, columns, partition_by, indexed, actions, physical = _snapshot(spec)
    stamp = delta.commit_stamp(version)
    if delta.table_id() != table_id:  # the snapshot and the stamp may be of two tables
        raise StatsIndexError(f"the table at {spec.table_uri} was created anew while its index was built; "
                              "sync again")  # fmt: skip
    seed, fids = distinct_seed(actions["path"], seed)
    nans = None
    if spec.nan_counts == "scan":
        nans = scan_nan_counts(spec.table.delta.fs, spec.table.delta.root, actions["path"].to_pylist(), indexed)
    parts = add_action_parts(actions, indexed, partition_by, seed, nans, fids=fids) if actions.num_rows else iter(())
    described = [{"name": c.name, "type": c.type, **({"physical": physical[c.name]}
                  if physical.get(c.name, c.name) != c.name else {})} for c in columns]  # fmt: skip
    manifest = Manifest(version, described,
                        [c.name for c in indexed], partition_by, spec.fingerprint(), fid_seed=seed,
                        table_id=table_id, commit_stamp=stamp)  # fmt: skip
    rows = actions.num_rows * (1 + len(indexed))  # a file row and an entry per indexed column, per file
    return Built(manifest, parts, rows, actions.num_rows)


def _snapshot(spec: IndexSpec) -> tuple[int, tuple[ColumnSpec, ...], list[str], tuple[ColumnSpec, ...], pa.Table,
                                        dict[str, str]]:  # fmt: skip
    """(version, table columns, partition columns, indexed columns, live add actions flattened,
    the columns' names in the log): from the log's checkpoint and commits (only the indexed
    columns' stats), or through delta-rs for a log that reader does not read."""
    location = spec.table.delta
    try:
        meta = location.metadata()
        columns = schema_string_columns(meta.schema_string)
        partition_by = list(meta.partition_columns)
        indexed = spec.indexed(columns, partition_by)
        by_name = {c.name: c for c in columns}
        stats = [c for c in indexed if c.name not in partition_by]
        live = location.live_adds([by_name[p] for p in partition_by], stats, null_counts=True)
        got = live.metadata
        if got.schema_string == meta.schema_string and got.partition_columns == meta.partition_columns:
            return got.version, columns, partition_by, indexed, live.actions, physical_names(got)
        reason = "the schema changed while it was read"
    except (Unsupported, LogGap) as e:
        reason = str(e)
    log.debug("index of %s rebuilt from delta-rs's snapshot (%s)", spec.table_uri, reason)
    table = location.open()
    if "deletionVectors" in (table.protocol().reader_features or []) or \
            table.metadata().configuration.get("delta.columnMapping.mode", "none") != "none":  # fmt: skip
        # delta-rs's add actions carry no deletion vectors, and name stats as the log does
        raise UnsupportedTableError(f"the index of {spec.table_uri} cannot be built: its log could not be read "
                                    f"({reason}) and delta-rs does not read this table right")  # fmt: skip
    columns = table_columns(pa.schema(table.schema().to_arrow()))
    partition_by = list(table.metadata().partition_columns)
    indexed = spec.indexed(columns, partition_by)
    actions = pa.table(table.get_add_actions(flatten=True))
    return table.version(), columns, partition_by, indexed, actions, {c.name: c.name for c in columns}


def distinct_seed(paths: pa.ChunkedArray | pa.Array, first: int) -> tuple[int, np.ndarray]:
    """The first seed from ``first`` under which no two of ``paths`` share a number, and the
    paths' numbers under it."""
    seed = first
    while not distinct(fids := file_ids(paths, seed)):
        # Equal paths get equal numbers: distinct numbers mean distinct paths, checked only here.
        if pc.count_distinct(paths).as_py() != len(paths):
            raise StatsIndexError("the table's snapshot names a file twice; the index cannot be built")
        if seed >= first + 64:  # about 2^-64 per try for distinct paths: never, unless the hash is broken
            raise StatsIndexError(f"no seed from {first} to {seed} numbers the table's files apart")
        log.info("two files share a number under seed %d; numbering with seed %d", seed, seed + 1)
        seed += 1
    return seed, fids


def pending_commits(spec: IndexSpec, manifest: Manifest) -> list[list[dict]]:
    """The commits after the index's version, in order; :class:`LogGap` when one is missing."""
    return spec.table.delta.commits_after(manifest.delta_version)


def identity(spec: IndexSpec, manifest: Manifest) -> str:
    """Why the index under ``manifest`` may describe another table than the one at the location
    now ("" when it is this table's).

    A table deleted and created anew at the location (its ``_lakecluster`` folder kept, or the
    index elsewhere) numbers its versions from 0 again, so the index's version alone says nothing.
    The manifest records the table's id (Delta's ``metaData.id``) and a stamp of the commit file
    at its version (``log.commit_stamp``). When the stamp agrees, that commit is the one the index
    was synced to, so the log is: one small read, what every read of the stored index costs.
    Otherwise (the file differs or is gone) the table's id is read (``DeltaLocation.table_id``:
    the first commit, or the last checkpoint's ``metaData``) and compared. An index that records
    no id (written before lakecluster recorded it) is never trusted: its next sync rebuilds it.

    Raises:
        TableNotFoundError: there is no table.
    """
    version = manifest.delta_version
    if manifest.table_id is None:
        return ("the index records no table id (an older lakecluster wrote it), so which table it describes "
                "is unknown")  # fmt: skip
    delta = spec.table.delta
    stamp = delta.commit_stamp(version)
    if stamp is not None and stamp == manifest.commit_stamp:
        return ""
    table_id = delta.table_id()
    if table_id != manifest.table_id:
        return (f"the table id changed from {manifest.table_id} (the index's) to {table_id}: the table was "
                "created anew at this location")  # fmt: skip
    if stamp is not None and manifest.commit_stamp is not None:
        return f"the table's commit {version} is not the one the index was synced to"
    if not delta.holds_version(version):
        return f"the table's log has no version {version}, the index's"
    return ""  # the same table, the commit file at the index's version cleaned up since


def stored_unusable(spec: IndexSpec, manifest: Manifest) -> str:
    """Why the stored index under ``manifest`` cannot answer for the table's latest version as it
    is ("" when it can): another table's (:func:`identity`), or behind the table."""
    why = identity(spec, manifest)
    if why:
        return why
    try:
        commits = pending_commits(spec, manifest)
    except LogGap as e:
        return f"it is behind the table ({e})"
    if commits:
        return f"it is behind the table (at version {manifest.delta_version}, the table at a newer one)"
    return ""


def sync(target: IndexSpec | LakeTable) -> SyncResult:
    """Bring the index to the table's latest version: the new commits' adds and removes as a
    segment, or a rebuild when there is no index, it is unreadable, its settings changed, a
    commit it needs is gone from the log, or it may be another table's (:func:`identity`: the
    table was created anew at its location, or the index records no table id).

    Args:
        target: the index, or a table (then its configured index, ``IndexSpec.of``).

    Returns:
        How it synced (current, incremental, rebuild), from and to which version, files added
        and removed.

    Raises:
        TableNotFoundError: there is no table.
    """
    result = _sync(_spec(target))
    metrics.INDEX_SYNC_SECONDS.labels(result.mode).observe(result.seconds)
    return result


@dataclass(frozen=True)
class Pending:
    """What the index under ``manifest`` lacks: the rows a sync appends as a segment (the added
    files' rows, the removed files' tombstones) to bring it to Delta ``version``."""

    manifest: Manifest
    version: int
    rows: pa.Table
    files_added: int
    files_removed: int
    commit_stamp: str | None  # of the commit at ``version`` (``log.commit_stamp``)


class RebuildNeeded(StatsIndexError):
    """The index cannot be brought up to date by a segment (``reason``); a rebuild numbers the
    files from ``seed``."""

    def __init__(self, reason: str, seed: int = 0) -> None:
        super().__init__(reason)
        self.reason, self.seed = reason, seed


def pending(spec: IndexSpec, store: IndexStore) -> Pending:
    """The rows the stored index lacks, read from the commits after its version (nothing is written).

    Raises:
        RebuildNeeded: there is no index, it is unreadable, it was built with other settings or
            for another table (:func:`identity`), a commit it needs is gone or changed the table's
            metadata, or a new file's number clashes.
    """
    try:
        manifest = store.manifest()
    except StatsIndexError as e:
        raise RebuildNeeded(str(e)) from None
    if manifest is None:
        raise RebuildNeeded("no index yet")
    if manifest.fingerprint != spec.fingerprint():
        raise RebuildNeeded("index settings changed")
    if why := identity(spec, manifest):
        raise RebuildNeeded(why)
    try:
        commits = pending_commits(spec, manifest)
        changes = NetChanges.of(commits)
    except LogGap as e:
        raise RebuildNeeded(str(e)) from None
    except (ValueError, KeyError) as e:
        raise RebuildNeeded(f"a commit could not be read: {e}") from None
    if not commits:
        return Pending(manifest, manifest.delta_version, pa.table({}), 0, 0, manifest.commit_stamp)
    version = manifest.delta_version + len(commits)
    stamp = spec.table.delta.commit_stamp(version)
    # Checked again after the commits were read: a table created anew meanwhile would have
    # passed its commits off as this one's (and the stamp just read is of the same log).
    if why := identity(spec, manifest):
        raise RebuildNeeded(why)
    indexed = manifest.indexed_columns()
    added, removed = changes.added, changes.removed
    physical = manifest.physical_names()
    partition_names = {physical[p] for p in manifest.partition_by}
    if any(set(action.get("partitionValues") or {}) != partition_names for action in added.values()):
        # Read by other names than the log's, every partition value would look null and the
        # file be skipped wrongly (an index written before it recorded physical names).
        raise RebuildNeeded("new files' partition values are not keyed by the partition columns' names "
                            "in the index (column mapping)")  # fmt: skip
    delta = spec.table.delta
    nans = scan_nan_counts(delta.fs, delta.root, list(added), indexed) if spec.nan_counts == "scan" else None
    adds = from_log_actions(list(added.values()), indexed, manifest.partition_by, manifest.fid_seed, nans,
                            physical=physical)  # fmt: skip
    try:
        clash = _number_clash(store, manifest, adds)
    except StatsIndexError as e:  # a data file of the manifest is missing: only a rebuild helps
        raise RebuildNeeded(f"the index is missing files: {e}") from None
    if clash:
        raise RebuildNeeded(clash, seed=manifest.fid_seed + 1)
    dead = tombstones(_removed_keys(removed, manifest), manifest.fid_seed)
    rows = pa.concat_tables([adds, dead])
    return Pending(manifest, version, rows, len(added), len(removed), stamp)


def _sync(spec: IndexSpec) -> SyncResult:
    started = time.monotonic()  # the files of the manifest read next are safe for the grace period from here
    store = store_for(spec)
    try:
        lacking = pending(spec, store)
    except RebuildNeeded as e:
        return rebuild(spec, e.reason, seed=e.seed)
    manifest = lacking.manifest
    if lacking.version == manifest.delta_version:
        return SyncResult("current", manifest.delta_version, manifest.delta_version, 0, 0,
                          time.monotonic() - started)  # fmt: skip
    try:
        published = store.append(lacking.rows, manifest, lacking.version, spec.max_segments, started=started,
                                 commit_stamp=lacking.commit_stamp)  # fmt: skip
    except IndexFilesMissing as e:
        return rebuild(spec, str(e))
    return SyncResult("incremental", manifest.delta_version, lacking.version, lacking.files_added,
                      lacking.files_removed, time.monotonic() - started, published.reason,
                      published.published)  # fmt: skip


def _number_clash(store: IndexStore, manifest: Manifest, adds: pa.Table) -> str:
    """Why the added files cannot be numbered under the index's seed ("" when they can): two of
    them, or one of them and a live file of another path, share a number."""
    added = adds.filter(pc.equal(adds["column"], FILE_ROWS))
    fids = added["fid"].to_numpy()
    if not len(fids):
        return ""
    if not distinct(fids):
        return "two added files share a file number"
    hits = find(store.read_files([], manifest=manifest)["fid"].to_numpy(), fids)[1]  # live files: sorted
    if not hits.any():
        return ""
    # The same path added again (after a remove this sync nets out) keeps its number; another
    # path with that number is a clash.
    known = store.files_of(fids[hits], manifest=manifest).rows["file"].to_pylist()
    for path, other in zip(added["file"].filter(pa.array(hits)).to_pylist(), known, strict=True):
        if path != other:
            return f"files {path} and {other} share a file number"
    return ""


def _removed_keys(removed: dict[str, dict], manifest: Manifest) -> list[tuple[str, str]]:
    """(file, partition key) of removed files; the key only orders the tombstone rows."""
    if not removed:
        return []
    by_name = {c.name: c for c in manifest.columns()}
    physical = manifest.physical_names()
    values = {p: partition_array(by_name[p], [(r.get("partitionValues") or {}).get(physical[p])
                                              for r in removed.values()])
              for p in manifest.partition_by}  # fmt: skip
    keys = partition_keys(values, manifest.partition_by, len(removed)).to_pylist()
    return list(zip(removed, keys, strict=True))
