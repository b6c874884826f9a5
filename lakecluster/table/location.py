"""A Delta table's location and the storage settings to reach it: every read of its log.

Reads go through delta-rs (``deltalake``) and through lakecluster's own reader of the log's JSON
tail (``log.py``): no JVM, so a command fails in a second on a missing table, before Spark starts.
A :class:`~lakecluster.table.LakeTable` has two locations, the table and its quarantine table.
"""

from __future__ import annotations

import contextlib
import functools
import os
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.fs as pafs
from deltalake import DeltaTable
from deltalake.exceptions import TableNotFoundError as DeltaRsTableNotFound

from lakecluster import storage
from lakecluster.config import StorageConfig
from lakecluster.errors import TableNotFoundError, TableNotWritableError, UnsupportedTableError
from lakecluster.schema import ColumnSpec
from lakecluster.table import log, snapshot
from lakecluster.table.metadata import parse_user_metadata
from lakecluster.uris import is_local, normalize


@dataclass(frozen=True)
class DeltaLocation:
    """The Delta table at ``uri`` (normalised), reached with ``storage``."""

    uri: str
    storage: StorageConfig

    def __post_init__(self) -> None:
        object.__setattr__(self, "uri", normalize(self.uri))

    @functools.cached_property
    def _fs_root(self) -> tuple[pafs.FileSystem, str]:
        return storage.filesystem(self.uri, self.storage)

    @property
    def fs(self) -> pafs.FileSystem:
        """The pyarrow filesystem the table is on."""
        return self._fs_root[0]

    @property
    def root(self) -> str:
        """The table's directory inside :attr:`fs`."""
        return self._fs_root[1]

    @property
    def log_dir(self) -> str:
        return f"{self.root}/_delta_log"

    # -- delta-rs ---------------------------------------------------------------------------------

    def open(self, version: int | None = None) -> DeltaTable:
        """The table's snapshot (latest, or ``version``) through delta-rs.

        Raises:
            TableNotFoundError: there is no Delta table at the location.
        """
        try:
            return DeltaTable(self.uri, version=version, storage_options=storage.delta_options(self.uri, self.storage))
        except DeltaRsTableNotFound:
            raise TableNotFoundError(self.uri) from None

    def open_if_exists(self) -> DeltaTable | None:
        try:
            return self.open()
        except TableNotFoundError:
            return None

    def history(self, limit: int | None = None) -> list[dict[str, Any]]:
        """Commit infos, newest first (at most ``limit``)."""
        return self.open().history(limit)

    def last_commit_of(self, predicate: Callable[[dict], bool], *, page: int = 200,
                       table: DeltaTable | None = None) -> dict | None:  # fmt: skip
        """The newest commit whose lakecluster metadata satisfies ``predicate``, scanning back.

        Reads commit infos newest first, in growing pages, until one matches or the log's history
        (within log retention) is exhausted; None also when there is no table.
        """
        table = table or self.open_if_exists()
        if table is None:
            return None
        limit = page
        seen = 0
        while True:
            history = table.history(limit)
            for entry in history[seen:]:
                meta = parse_user_metadata(entry.get("userMetadata"))
                if meta is not None and predicate(meta):
                    return {"version": entry.get("version"), **meta}
            if len(history) < limit:
                return None
            seen, limit = len(history), limit * 4

    # -- the log's JSON tail ---------------------------------------------------------------------

    def exists(self) -> bool:
        """Whether a Delta table is at the location (its log's first commit or a checkpoint)."""
        return log.log_exists(self.fs, self.log_dir)

    def live_adds(self, partition_by: Sequence[ColumnSpec], stats: Sequence[ColumnSpec], *,
                  null_counts: bool = False) -> snapshot.LiveAdds:  # fmt: skip
        """The live files with ``stats``' bounds, read from the log without delta-rs (``snapshot.py``).

        Raises:
            Unsupported: a checkpoint that reader does not read (use :meth:`open`).
            LogGap: a commit after the checkpoint is missing.
        """
        return snapshot.read_live_adds(self.fs, self.log_dir, partition_by, stats, null_counts=null_counts)

    def read_live_adds(self, partition_by: Sequence[ColumnSpec], stats: Sequence[ColumnSpec], *,
                       null_counts: bool = False) -> snapshot.LiveAdds:  # fmt: skip
        """:meth:`live_adds`, or delta-rs's snapshot for a log that reader does not read (a
        checkpoint ``_last_checkpoint`` names gone, a commit gone after it).

        Raises:
            TableNotFoundError: there is no table.
            UnsupportedTableError: neither reads the table right (delta-rs's add actions carry no
                deletion vectors and name stats as the log does, by physical names under column mapping).
        """
        try:
            return self.live_adds(partition_by, stats, null_counts=null_counts)
        except (snapshot.Unsupported, log.LogGap) as e:
            reason = str(e)
        table = self.open()
        meta = table.metadata()
        protocol = table.protocol()
        readers, writers = snapshot.protocol_features({
            "minReaderVersion": protocol.min_reader_version, "minWriterVersion": protocol.min_writer_version,
            "readerFeatures": protocol.reader_features, "writerFeatures": protocol.writer_features})  # fmt: skip
        if "deletionVectors" in readers or meta.configuration.get("delta.columnMapping.mode", "none") != "none":
            raise UnsupportedTableError(f"the log of {self.uri} could not be read ({reason}), and delta-rs does not "
                                        "read its deletion vectors or column mapping right")  # fmt: skip
        actions = pa.table(table.get_add_actions(flatten=True))
        wanted = {f"partition.{c.name}" for c in partition_by}
        kinds = ("min", "max", "null_count") if null_counts else ("min", "max")
        wanted |= {f"{kind}.{c.name}" for c in stats for kind in kinds}
        kept = ["path", "size_bytes", "num_records", *(n for n in actions.column_names if n in wanted)]
        found = snapshot.Metadata(table.version(), table.schema().to_json(), tuple(meta.partition_columns),
                                  dict(meta.configuration), readers, writers)  # fmt: skip
        snapshot.readable(found, self.uri)
        return snapshot.LiveAdds(found, actions.select([n for n in kept if n in actions.column_names]))

    def metadata(self) -> snapshot.Metadata:
        """The latest schema, partitioning and properties, read from the log without delta-rs.

        Raises:
            Unsupported: a checkpoint ``snapshot.py`` does not read (use :meth:`open`).
            LogGap: a commit after the checkpoint is missing.
        """
        return snapshot.read_metadata(self.fs, self.log_dir)

    def commits_after(self, version: int) -> list[list[dict]]:
        """The commits after ``version``, in order; :class:`~lakecluster.table.log.LogGap` when one is gone."""
        return log.commits_after(self.fs, self.log_dir, version)

    def commits_of(self, version: int) -> list[dict] | None:
        """The actions of commit ``version``; None when its file is gone (or never was)."""
        return log.read_commit(self.fs, self.log_dir, version)

    def commit_info(self, version: int) -> dict | None:
        """The ``commitInfo`` of commit ``version``; None when that commit file is gone (or has none)."""
        return log.commit_info(self.fs, self.log_dir, version)

    def holds_version(self, version: int) -> bool:
        """Whether the log holds ``version``: its commit, or a checkpoint at or after it (older
        commits cleaned up). False for a table created anew at this location since."""
        if self.commit_file_exists(version):
            return True
        checkpoint = log.last_checkpoint(self.fs, self.log_dir)
        return checkpoint is not None and checkpoint >= version

    def table_id(self) -> str:
        """The table's id (Delta's ``metaData.id``, fixed when the table was created; a table
        deleted and created anew at this location has another): from the first commit or the
        last checkpoint (``snapshot.read_table_id``), through delta-rs for a log that reader does
        not read.

        Raises:
            TableNotFoundError: there is no Delta table at the location.
        """
        try:
            return snapshot.read_table_id(self.fs, self.log_dir)
        except snapshot.Unsupported:
            return str(self.open().metadata().id)

    def commit_stamp(self, version: int) -> str | None:
        """A hash of the start of commit ``version``'s file (``log.commit_stamp``); None when it is gone."""
        return log.commit_stamp(self.fs, self.log_dir, version)

    def latest_version(self) -> int | None:
        """The newest version in the log (None: no table): from the last checkpoint, the commits
        after it probed one by one; no snapshot is read."""
        version = log.last_checkpoint(self.fs, self.log_dir)
        if version is None:
            if not self.commit_file_exists(0):
                return None
            version = 0
        while self.commit_file_exists(version + 1):
            version += 1
        return version

    def commit_file_exists(self, version: int) -> bool:
        return bool(self.fs.get_file_info(f"{self.log_dir}/{version:020d}.json").is_file)

    # -- writing ---------------------------------------------------------------------------------

    def check_writable(self) -> None:
        """Fail early, with the path in the message, if the location cannot be written.

        Leaves nothing behind: Delta refuses to create a table in a directory that already holds
        other files, so a probe of a location without a table removes what it created.

        Raises:
            TableNotWritableError: the location cannot be written (the cause in the message).
        """
        fs, root = self.fs, self.root
        created: list[str] = []
        if is_local(self.uri):
            path = root
            while not os.path.exists(path):
                created.append(path)
                path = os.path.dirname(path)
        probe = f"{root}/.lakecluster-write-probe-{uuid.uuid4().hex}"
        try:
            fs.create_dir(root, recursive=True)
            with fs.open_output_stream(probe) as out:
                out.write(b"ok")
            fs.delete_file(probe)
        except (OSError, pa.ArrowException) as e:
            raise TableNotWritableError(f"table location {self.uri} is not writable: {e}") from e
        finally:
            for path in created:  # deepest first
                with contextlib.suppress(OSError):
                    os.rmdir(path)
