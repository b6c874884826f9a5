"""The columns a stream's micro-batches are read into and written with, following the table
(``stream.schema_evolution``, stream/schema_evolution.py): a field the records carry that becomes
a column is added to the table before the batch that met it commits anything, and that batch is
read again with it."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING

from lakecluster import metrics
from lakecluster.checkpoints import BackgroundCheckpoints
from lakecluster.stream import resume
from lakecluster.stream.add_columns import add_columns
from lakecluster.stream.append import table_facts
from lakecluster.stream.avro_records import AvroRecords
from lakecluster.stream.batch_task import TaskSummary
from lakecluster.stream.schema_evolution import SchemaFollower
from lakecluster.table import LakeTable, LogGap
from lakecluster.table.snapshot import Unsupported

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger(__name__)

MAX_FIELDS_SHOWN = 20  # fields per list in a batch's commit metadata


class ColumnsAdded(Exception):
    """A pass met fields that have just become columns: the batch is read again with them."""


class BatchColumns:
    """The declared columns, and with ``add_columns`` every other column of the table the stream
    can type; the fields of the records that are none of them, counted and reported."""

    def __init__(self, table: LakeTable, spark: SparkSession, stream_id: str, avro: AvroRecords | None, *,
                 checkpoints: BackgroundCheckpoints | None, before_commit: Callable[[], None]) -> None:  # fmt: skip
        s = table.config.stream
        self.table = table
        self.spark = spark
        self.stream_id = stream_id
        self.avro = avro
        self.checkpoints = checkpoints
        self.before_commit = before_commit
        self.declared = table.config.table.columns
        self.follower = SchemaFollower(self.declared, s.schema_evolution, s.schema_evolution_min_records)
        self.columns = self.declared
        self.added: list[str] = []  # columns added for the batch in flight
        if self.follower.adds_columns:
            self.follower.resume(_carried_counts(table, stream_id))

    def follow_table(self) -> bool:
        """Takes the table's columns (``add_columns``: any added since, by this stream or another
        writer); returns whether they changed."""
        if not self.follower.adds_columns:
            return False
        if not self.follower.follow_table(table_facts(self.spark, self.table.delta).fields):
            return False
        self.columns = self.follower.columns
        if self.avro is not None:
            self.avro.set_columns(self.columns)
        others = [c.name for c in self.columns if c not in self.declared]
        log.info("the stream reads and writes the declared columns and %s", ", ".join(others) or "no other")
        return True

    def evolve(self, total: TaskSummary, batch_id: int) -> None:
        """Counts the batch's fields that are no column; with ``add_columns``, adds those due and
        raises :class:`ColumnsAdded` (the pass read their records without them: nothing of it may
        be committed)."""
        if self.avro is not None:  # an Avro field becomes a column at its schema's first record
            add = self.follower.met(self.avro.unseen(total.schema_ids), batch_id, min_records=1)
        else:
            add = self.follower.met(total.unseen, batch_id)
        if not add:
            return
        self.before_commit()
        version = add_columns(self.spark, self.table.delta, add, stream_id=self.stream_id,
                              checkpoints=self.checkpoints)  # fmt: skip
        if version is not None:
            metrics.STREAM_COLUMNS_ADDED.inc(len(add))
        described = ", ".join(f"{c.name} {c.type}" for c in add)
        log.warning("columns %s added to the table (version %s): records carry them", described, version)
        self.added += [c.name for c in add]
        raise ColumnsAdded(described)

    def fields_meta(self, total: TaskSummary) -> dict:
        """For the batch's commit: its fields that are no column (records carrying each), the
        columns added for it, the columns whose values had another type (records quarantined for
        it), and with ``add_columns`` the counts carried toward a column."""
        unseen = self.avro.unseen(total.schema_ids) if self.avro is not None else total.unseen
        names = {c.name for c in self.columns}
        records: dict[str, int] = {}
        for (name, _), n in unseen.items():
            if name not in names:
                records[name] = records.get(name, 0) + n
        found: dict[str, object] = {}
        if records:
            found["unseen"] = dict(sorted(records.items())[:MAX_FIELDS_SHOWN])
        if self.added:
            found["added"] = list(self.added)
        if total.mismatched:
            found["mismatched"] = dict(sorted(total.mismatched.items())[:MAX_FIELDS_SHOWN])
        if self.follower.adds_columns and (carried := self.follower.carried()):
            found["counted"] = carried  # toward stream.schema_evolution_min_records, after a restart too
        return found


def _carried_counts(table: LakeTable, stream_id: str) -> dict:
    """The counts of fields that are no column yet which the stream's last commit kept."""
    try:
        last = table.delta.last_commit_of(resume.batch_commit_of(stream_id))
    except (Unsupported, LogGap):
        return {}
    counted = ((last or {}).get("fields") or {}).get("counted")
    return counted if isinstance(counted, dict) else {}
