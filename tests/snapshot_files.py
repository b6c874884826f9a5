"""The live files read whole from the log, in one go: the reference the incremental live-file view
(``lakecluster.table.live_files.LiveFiles``) and the planner's files are checked against."""

from __future__ import annotations

from collections.abc import Sequence

from lakecluster.schema import ColumnSpec
from lakecluster.table.live_files import DataFile, data_files, live_file_rows
from lakecluster.table.location import DeltaLocation
from lakecluster.table.snapshot import LiveAdds


def snapshot_files(location: DeltaLocation, columns: Sequence[ColumnSpec],
                   partition_by: Sequence[str]) -> tuple[LiveAdds, list[DataFile]]:  # fmt: skip
    """The table's latest live files (``LiveAdds``: its version and metadata, the add actions with
    every data column of ``columns``' stats, typed), and those files as the planner's."""
    by_name = {c.name: c for c in columns}
    partitions = [by_name[p] for p in partition_by]
    live = location.read_live_adds(partitions, [c for c in columns if c.name not in partition_by])
    return live, data_files(live_file_rows(live.actions, partitions, []), partition_by)
