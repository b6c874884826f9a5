"""A rewrite's commit: the group's inputs removed and its outputs added, atomically, beside a busy
stream, never twice — a plan for the commit protocol (``lakecluster.commit``).

One Delta transaction removes the group's input files and adds the output files, all with
``dataChange=false``, as operation ``OPTIMIZE`` with its operation metrics; lakecluster's own
details (curve, columns, levels, generation, attempt id) go into ``userMetadata``. Delta's
conflict checker does the rest: stream appends never conflict with it, a concurrent transaction
that removed one of our input files makes it fail (``ConcurrentDeleteDeleteException``).

Before committing, every output file must exist with the size its writer reported, and every input
file must still be live in the snapshot the transaction starts from, as it was read: its path and
its deletion vector (Delta checks removes against concurrent commits, not against older ones; a
``DELETE`` that marked rows of an input deleted re-adds its path with a new deletion vector, and
the rewrite, made from the rows before it, must not land over it). Each ``remove`` carries the
input's deletion vector, so it names the logical file it removes. A commit call that fails without saying whether it
landed is resolved from the log by the attempt id; output files are never deleted here:
unreferenced files are vacuum's job, after the retention period.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.compute as pc

from lakecluster import delta_txn
from lakecluster.commit import Committed, Transaction, commit, marked
from lakecluster.compaction.planner import Group
from lakecluster.errors import CompactionConflictError, TableError
from lakecluster.parquet_files import WrittenFile
from lakecluster.table import DeltaLocation
from lakecluster.table.deletion_vectors import file_keys
from lakecluster.table.live_files import DataFile

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

# Delta's conflicts a rewrite can lose, and what each means for it.
_CONFLICTS = {
    "ConcurrentDeleteDeleteException": "another commit (a second compactor, a delete) removed input files of the "
                                       "group after this rewrite's transaction started",
    "ConcurrentDeleteReadException": "another commit (a second compactor, a delete) removed files this rewrite read "
                                     "after its transaction started",
    "ConcurrentTransactionException": "another commit of the same application id landed first",
    "MetadataChangedException": "the table's metadata (schema, properties) changed while the group was rewritten",
    "ProtocolChangedException": "the table's protocol changed while the group was rewritten",
}  # fmt: skip

# (version, file keys) -> the keys not live at it (``DataFile.key``: a path and its deletion vector)
GoneSince = Callable[[int, Sequence[str]], list[str]]


def _remove_json(f: DataFile, now_ms: int) -> str:
    """The file's ``remove``: its path and its deletion vector name the logical file removed."""
    return json.dumps({"remove": {
        **f.logged(), "deletionTimestamp": now_ms, "dataChange": False, "extendedFileMetadata": True,
    }})  # fmt: skip


def live_at_version(location: DeltaLocation) -> GoneSince:
    """``gone_since`` answered by the table's live files at its latest version (at least the one
    asked about: conservative)."""

    def gone(version: int, keys: Sequence[str]) -> list[str]:
        live = location.read_live_adds([], [])
        if live.metadata.version < version:
            raise TableError(f"the log of {location.uri} is at version {live.metadata.version}, behind {version}")
        known = file_keys(live.actions["path"], live.actions["deletion_vector"])
        present = pc.is_in(pa.array(list(keys), pa.string()), value_set=known).to_numpy(zero_copy_only=False)
        return [k for k, ok in zip(keys, present, strict=True) if not ok]

    return gone


def verify_outputs(location: DeltaLocation, written: Sequence[WrittenFile]) -> None:
    """Every output file exists with the size its writer reported (or the rewrite is abandoned)."""
    infos = location.fs.get_file_info([f"{location.root}/{f.path}" for f in written])
    for f, info in zip(written, infos, strict=True):
        if info.size is None or info.size != f.size:
            raise CompactionConflictError(
                f"output file {f.path} is missing or has {info.size} bytes instead of {f.size}; "
                "the rewrite is abandoned (nothing was committed)"
            )


@dataclass
class RewriteCommit:
    """The commit of one group's rewrite (a :class:`~lakecluster.commit.CommitPlan`).

    ``gone_since(version, paths)`` names the paths not live at ``version`` (answering from a later
    version is conservative: a file removed since then is named too).
    """

    location: DeltaLocation
    group: Group
    written: Sequence[WrittenFile]
    details: Mapping[str, str]
    gone_since: GoneSince
    zorder_by: Sequence[str] = ()
    attempt: str = field(default_factory=lambda: uuid.uuid4().hex)
    fail_point: str = "compaction_after_commit_call"

    @property
    def what(self) -> str:
        return f"rewrite attempt {self.attempt}"

    def precheck(self, txn: Transaction) -> bool:
        gone = self.gone_since(txn.read_version, [f.key for f in self.group.files])
        if gone:
            path, _, vector = gone[0].partition("\x00")
            raise CompactionConflictError(
                f"{len(gone)} input file(s) of the group are no longer in the table as they were read at version "
                f"{txn.read_version} (another compactor rewrote them, or a DELETE, UPDATE or MERGE changed them), "
                f"e.g. {path}{f' with deletion vector {vector}' if vector else ''}; the rewrite is abandoned"
            )
        return True

    def actions(self, now_ms: int) -> list[str]:
        return [*(_remove_json(f, now_ms) for f in self.group.files),
                *(delta_txn.add_json(f, now_ms, data_change=False) for f in self.written)]  # fmt: skip

    def operation(self, jvm: Any) -> Any:
        optimize = getattr(jvm.org.apache.spark.sql.delta, "DeltaOperations$Optimize")
        return optimize(delta_txn.seq(jvm, []), delta_txn.seq(jvm, list(self.zorder_by)), False,
                        jvm.scala.Option.empty(), False)  # fmt: skip

    def metrics(self) -> dict[str, int]:
        sizes = sorted(f.size for f in self.written) or [0]
        return {"numRemovedFiles": len(self.group.files), "numAddedFiles": len(self.written),
                "numRemovedBytes": self.group.bytes, "numAddedBytes": sum(f.size for f in self.written),
                "minFileSize": sizes[0], "maxFileSize": sizes[-1], "p50FileSize": sizes[len(sizes) // 2],
                "p25FileSize": sizes[len(sizes) // 4], "p75FileSize": sizes[(3 * len(sizes)) // 4]}  # fmt: skip

    def metadata(self) -> dict[str, str]:
        return {**self.details, "attempt": self.attempt}

    def refused(self, text: str) -> Exception | None:
        for name, meaning in _CONFLICTS.items():
            if name in text:
                # Delta's message, under the exception's name (pyspark's conversion of it drops the name).
                delta = delta_txn.first_line(text)
                delta = delta if name in delta else f"{name}: {delta}"
                return CompactionConflictError(
                    f"{meaning}; the rewrite is abandoned and nothing was lost (the table keeps that commit's "
                    f"files, this rewrite's new files are left unreferenced for vacuum): {delta}"
                )
        return None

    def landed_in(self, actions: Sequence[dict]) -> bool:
        return marked(actions, "attempt", self.attempt)


def commit_rewrite(spark: SparkSession, location: DeltaLocation, group: Group, written: Sequence[WrittenFile], *,
                   details: Mapping[str, str], gone_since: GoneSince | None = None,
                   zorder_by: Sequence[str] = ()) -> Committed:  # fmt: skip
    """Swap the group's files for ``written`` in one Delta transaction.

    ``gone_since`` checks the inputs against the transaction's snapshot (default: a snapshot of
    the table at its version; the compactor passes its live-file view).

    Returns:
        The committed version (``resolved_from_log`` when the call failed after it landed).

    Raises:
        CompactionConflictError: an output is missing, an input is gone, or a concurrent commit
            conflicted; nothing was committed.
        TableError: the commit failed for another reason (nothing was committed, or the log
            could not tell).
    """
    verify_outputs(location, written)
    plan = RewriteCommit(location, group, written, details, gone_since or live_at_version(location), zorder_by)
    return commit(spark, plan)
