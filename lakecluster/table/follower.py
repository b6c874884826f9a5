"""One writer's view of a table's log, followed commit by commit: the version, its application's
transaction version and the recent commit infos (the stream's sink after every micro-batch)."""

from __future__ import annotations

from lakecluster.table.location import DeltaLocation
from lakecluster.table.log import LogGap


class TableLog:
    """A table's version, one application's transaction version and its recent commit infos,
    followed commit by commit.

    The stream needs these after every micro-batch. delta-rs's ``update_incremental`` rebuilds its
    view of every live file (seconds on a table of a million files, and gigabytes held); this reads
    only the new commits' JSON. The whole snapshot is read once, at the start, or again after a gap.
    """

    KEEP_INFOS = 256  # newest commit infos kept (a micro-batch looks only at the commits since it began)

    def __init__(self, location: DeltaLocation, app_id: str) -> None:
        self.location = location
        self.app_id = app_id
        self.version = -1
        self.txn_version: int | None = None
        self.infos: dict[int, dict] = {}
        self.full_reads = 0
        self._read_snapshot()

    def _read_snapshot(self) -> None:
        table = self.location.open()
        self.version = table.version()
        self.txn_version = table.transaction_version(self.app_id)
        self.infos = {}
        self.full_reads += 1

    def refresh(self) -> int:
        """Apply the commits after the known version; returns the latest version."""
        try:
            commits = self.location.commits_after(self.version)
        except LogGap:
            self._read_snapshot()
            return self.version
        for actions in commits:
            self.version += 1
            for action in actions:
                txn = action.get("txn")
                if isinstance(txn, dict) and txn.get("appId") == self.app_id:
                    self.txn_version = int(txn["version"])
                info = action.get("commitInfo")
                if isinstance(info, dict):
                    self.infos[self.version] = info
        for old in sorted(self.infos)[: max(0, len(self.infos) - self.KEEP_INFOS)]:
            del self.infos[old]
        return self.version

    def commit_infos_after(self, version: int) -> list[tuple[int, dict]]:
        """(version, commitInfo) of the known commits after ``version``, oldest first."""
        return [(v, self.infos[v]) for v in sorted(self.infos) if v > version]
