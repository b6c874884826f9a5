"""Nullable columns added to the table for fields its records carry — a plan for the commit
protocol (``lakecluster.commit``).

The commit is Delta's ``ADD COLUMNS``: a new ``metaData`` whose schema is the snapshot's with the
columns appended, staged through the transaction's own ``updateMetadata`` (which checks the
change and, on a table with column mapping, gives the columns their ids and physical names). It
reads no files, so appends and rewrites committed meanwhile do not conflict with it; a column
another writer added first (by any case of its name) is not added again. The commit carries an
attempt id in its ``userMetadata``: a commit call that fails without an answer is resolved from
the log by it.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from lakecluster import delta_txn
from lakecluster.checkpoints import BackgroundCheckpoints
from lakecluster.commit import Transaction, commit, marked
from lakecluster.schema import ColumnSpec
from lakecluster.table import DeltaLocation, TableSpec

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

MARK = "add_columns"
ATTEMPTS = 5


class SchemaChangedMeanwhile(Exception):
    """Another writer changed the table's metadata during the commit: nothing was committed."""


@dataclass(frozen=True)
class AddColumnsCommit:
    """Adds ``columns`` (nullable) to the table at ``location`` unless it has them."""

    location: DeltaLocation
    columns: tuple[ColumnSpec, ...]
    stream_id: str
    attempt: str = field(default_factory=lambda: uuid.uuid4().hex)
    fail_point: str = "stream_after_add_columns_call"

    @property
    def what(self) -> str:
        return f"adding columns {', '.join(c.name for c in self.columns)} for {self.stream_id}"

    def precheck(self, txn: Transaction) -> bool:
        """Stages the new schema on ``txn``; False when the table has every column already."""
        schema = json.loads(txn.txn.metadata().schemaString())
        present = {str(f["name"]).lower() for f in schema.get("fields", [])}
        missing = [c for c in self.columns if c.name.lower() not in present]
        if not missing:
            return False
        jvm = txn.jvm
        schema["fields"] = [*schema.get("fields", []), *delta_txn.expected_fields(jvm, _ddl(missing))]
        action = json.loads(txn.txn.metadata().json())
        action["metaData"]["schemaString"] = json.dumps(schema, separators=(",", ":"))
        metadata = jvm.lakecluster.delta.ActionLines.parse(json.dumps(action)).get(0)
        txn.txn.updateMetadata(metadata, False)
        return True

    def actions(self, now_ms: int) -> list[str]:
        return []  # the metadata is staged on the transaction (precheck)

    def operation(self, jvm: Any) -> Any:
        delta = jvm.org.apache.spark.sql.delta
        logged = getattr(delta, "DeltaOperations$QualifiedColTypeWithPositionForLog")
        struct = jvm.org.apache.spark.sql.types.StructType.fromDDL(_ddl(self.columns))
        none = jvm.scala.Option.empty()
        added = [logged(delta_txn.seq(jvm, []), f, none) for f in struct.fields()]
        return getattr(delta, "DeltaOperations$AddColumns")(delta_txn.seq(jvm, added))

    def metrics(self) -> dict[str, int]:
        return {}

    def metadata(self) -> Mapping[str, Any]:
        return {MARK: self.attempt, "stream": self.stream_id, "columns": [c.name for c in self.columns]}

    def refused(self, text: str) -> Exception | None:
        if "MetadataChangedException" in text or "ProtocolChangedException" in text:
            return SchemaChangedMeanwhile(delta_txn.first_line(text))
        return None

    def landed_in(self, actions: Sequence[dict]) -> bool:
        return marked(actions, MARK, self.attempt)


def _ddl(columns: Sequence[ColumnSpec]) -> str:
    """The columns as Spark DDL, nullable (the columns added are never required)."""
    return TableSpec.of_columns([ColumnSpec(c.name, c.type) for c in columns]).ddl


def add_columns(spark: SparkSession, location: DeltaLocation, columns: Sequence[ColumnSpec], *, stream_id: str,
                checkpoints: BackgroundCheckpoints | None = None) -> int | None:  # fmt: skip
    """Adds the nullable ``columns`` the table lacks; returns the version committed (None: the
    table had them all)."""
    for attempt in range(ATTEMPTS):
        plan = AddColumnsCommit(location, tuple(columns), stream_id)
        try:
            return commit(spark, plan, checkpoints=checkpoints).version
        except SchemaChangedMeanwhile:
            if attempt == ATTEMPTS - 1:
                raise
    return None
