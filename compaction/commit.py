"""Commit a rewrite atomically, beside a busy stream, and never twice.

One Delta commit removes the group's input files and adds the output files, all with
``dataChange=false``. delta-rs 1.6.6 does not check ``dataChange=false`` removes against newer
commits (brief §5): two compactors of the same files would both commit and duplicate rows. So
every attempt is a compare-and-swap:

1. refresh to the latest version V and check that every input file is still live there;
2. commit as version V+1 with no delta-rs retries (``max_commit_retries=0``).

If anyone committed first, step 2 fails and we go back to 1: a stream append only costs a
re-check (appends never remove our inputs), while a commit that removed one of our inputs makes
step 1 fail for good with :class:`CompactionConflictError`. Nothing is retried forever: the
number of attempts is bounded by ``compaction.commit_attempts``.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping, Sequence

from deltalake import CommitProperties, DeltaTable
from deltalake.exceptions import CommitFailedError
from deltalake.transaction import RemoveAction

from lakecluster.compaction.planner import Group
from lakecluster.errors import CompactionConflictError, TableError
from lakecluster.parquet_files import WrittenFile, filesystem
from lakecluster.table import TableSpec, add_actions, referenced_paths

log = logging.getLogger(__name__)


def commit_rewrite(
    table: DeltaTable,
    spec: TableSpec,
    group: Group,
    written: Sequence[WrittenFile],
    *,
    metadata: Mapping[str, str],
    attempts: int,
) -> int:
    """Swap the group's files for ``written`` in one commit; returns the new table version."""
    now_ms = int(time.time() * 1000)
    removes = [RemoveAction(f.path, False, now_ms, f.size, f.partition_values) for f in group.files]
    actions = [*removes, *add_actions(written, data_change=False)]
    for attempt in range(1, attempts + 1):
        table.update_incremental()
        live = referenced_paths(table)
        gone = [f.path for f in group.files if f.path not in live]
        if gone:
            raise CompactionConflictError(
                f"{len(gone)} input file(s) of the group were removed by another commit "
                f"(at or before version {table.version()}), e.g. {gone[0]}; the rewrite is abandoned"
            )
        try:
            table.create_write_transaction(
                actions,
                mode="append",
                schema=spec.schema,
                partition_by=list(spec.partition_by) or None,
                commit_properties=CommitProperties(custom_metadata=dict(metadata), max_commit_retries=0),
            )
        except CommitFailedError:
            log.debug("commit attempt %d lost a race; re-checking the inputs", attempt)
            continue
        except OSError as e:
            raise TableError(f"compaction commit to {spec.uri} failed: {e}") from e
        table.update_incremental()
        return table.version()
    raise CompactionConflictError(f"no commit slot after {attempts} attempts (a very busy table?)")


def delete_files(table_uri: str, files: Sequence[WrittenFile]) -> None:
    """Remove output files of an abandoned rewrite (never referenced by the log)."""
    fs, root = filesystem(table_uri)
    for f in files:
        try:
            fs.delete_file(f"{root}/{f.path}")
        except FileNotFoundError:
            pass
