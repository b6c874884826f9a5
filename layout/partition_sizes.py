"""Whether a table is large enough for its layout to matter: its largest partition against the
target file size.

Compaction writes a partition of ``b`` bytes as about ``b / target_file_bytes`` files and never
fewer than one. A table whose every partition is below one target file is therefore compacted
into one file per partition: a query reads one file of each partition it cannot prune, whatever
the clustering columns, their weights or the thresholds. ``status`` says so beside the files a
point query reads, and ``tune`` recommends nothing for such a table.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

import pyarrow as pa

from lakecluster.sizes import human_bytes
from lakecluster.table.live_files import DataFile


@dataclass(frozen=True)
class PartitionSizes:
    """The number of partitions with live files and the bytes of the largest one."""

    partitions: int
    largest_bytes: int

    @classmethod
    def of_live_files(cls, files: pa.Table, partition_by: Sequence[str]) -> PartitionSizes:
        """From the live files' table (``size`` and ``partition.<column>`` columns)."""
        if files.num_rows == 0:
            return cls(0, 0)
        keys = [f"partition.{p}" for p in partition_by]
        totals = files.select([*keys, "size"]).group_by(keys, use_threads=False).aggregate([("size", "sum")])
        return cls(totals.num_rows, int(max(totals["size_sum"].to_pylist())))

    @classmethod
    def of_data_files(cls, files: Sequence[DataFile]) -> PartitionSizes:
        """From the planner's files."""
        totals: Counter[tuple[tuple[str, str | None], ...]] = Counter()
        for f in files:
            totals[f.partition] += f.size
        return cls(len(totals), max(totals.values(), default=0))

    def below_one_file(self, target_file_bytes: int) -> bool:
        """Whether compaction leaves every partition one file of at most ``target_file_bytes``."""
        return self.largest_bytes < target_file_bytes

    def describe(self, target_file_bytes: int) -> str:
        """Why the layout cannot matter yet, in one sentence (for a table :meth:`below_one_file`)."""
        count = "1 partition" if self.partitions == 1 else f"{self.partitions:,} partitions"
        return (f"the table is below one target file per partition ({count}, the largest "
                f"{human_bytes(self.largest_bytes)}; compaction.target_file_bytes {human_bytes(target_file_bytes)}): "
                "compacted, each partition is one file, so a query reads one file of every partition it cannot "
                "prune whatever the layout")  # fmt: skip

    def as_dict(self, target_file_bytes: int) -> dict[str, object]:
        return {"count": self.partitions, "largest_bytes": self.largest_bytes, "target_file_bytes": target_file_bytes,
                "below_one_target_file": self.below_one_file(target_file_bytes)}  # fmt: skip
