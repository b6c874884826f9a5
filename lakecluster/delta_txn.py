"""Pieces of a Delta transaction made through py4j: Scala collections, actions, metrics, facts.

The compactor's rewrite and the stream's append both commit files they wrote themselves through
delta-spark's ``OptimisticTransaction``: Delta writes the log (conflict checks, checkpoints, row
tracking, in-commit timestamps), lakecluster supplies the actions.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from lakecluster.parquet_files import WrittenFile

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

# Writer features an append of plain Parquet files with full stats honours as it is. The features
# that change what a data file must hold (column mapping, constraints, generated, identity and
# default columns, Iceberg compatibility, ...) are not listed: such a table is written by Delta's
# own writer. The ones listed with a condition are checked on the metadata (``append_blocker``).
APPEND_SAFE_FEATURES = frozenset({
    "appendOnly", "changeDataFeed", "deletionVectors", "domainMetadata", "clustering", "inCommitTimestamp",
    "rowTracking", "v2Checkpoint", "vacuumProtocolCheck", "timestampNtz", "typeWidening", "typeWidening-preview",
    "checkpointProtection",
    # conditional: no constraint in the configuration, no invariant in the schema, mode "none"
    "checkConstraints", "invariants", "columnMapping",
})  # fmt: skip


def seq(jvm: Any, items: Sequence[Any]) -> Any:
    """A Scala immutable Seq (Spark's own py4j helper)."""
    java_list = jvm.java.util.ArrayList()
    for item in items:
        java_list.add(item)
    return jvm.org.apache.spark.api.python.PythonUtils.toSeq(java_list)


def scala_map(jvm: Any, items: Mapping[str, Any]) -> Any:
    java_map = jvm.java.util.HashMap()
    for k, v in items.items():
        java_map.put(k, v)
    return jvm.org.apache.spark.api.python.PythonUtils.toScalaMap(java_map)


def actions(jvm: Any, lines: Sequence[str]) -> Any:
    """Delta actions from their JSON lines, parsed in one JVM call (``lakecluster/jvm/ActionLines.java``)."""
    parsed = jvm.lakecluster.delta.ActionLines.parse("\n".join(lines))
    return jvm.org.apache.spark.api.python.PythonUtils.toSeq(parsed)


def add_json(f: WrittenFile, now_ms: int, *, data_change: bool) -> str:
    """The ``add`` action of a file lakecluster wrote (``data_change``: new rows, not a rewrite)."""
    return json.dumps({"add": {
        "path": f.path, "partitionValues": dict(f.partition_values), "size": f.size, "modificationTime": now_ms,
        "dataChange": data_change, "stats": f.stats,
    }})  # fmt: skip


def files_frame(spark: SparkSession, table_uri: str, adds: Sequence[Mapping[str, Any]]) -> DataFrame:
    """The live rows of the data files ``adds`` name (``add`` actions: path, partitionValues,
    size, deletionVector), read by Delta's own reader: deletion vectors applied, columns by their
    physical names under column mapping, partition columns from the values given, every column
    of the table's latest schema."""
    from pyspark.sql import DataFrame

    jvm: Any = spark._jvm  # type: ignore[attr-defined]
    delta_log = jvm.org.apache.spark.sql.delta.DeltaLog.forTable(spark._jsparkSession, table_uri)  # type: ignore[attr-defined]
    none = jvm.scala.Option.empty()
    snapshot = delta_log.update(False, none, none)
    lines = [json.dumps({"add": {"modificationTime": 0, "dataChange": False, **dict(a)}}) for a in adds]
    return DataFrame(delta_log.createDataFrame(snapshot, actions(jvm, lines), False, none), spark)


def register_metrics(spark: SparkSession, txn: Any, values: Mapping[str, int]) -> None:
    """Operation metrics of the commit (Delta keeps the ones its operation names)."""
    jvm: Any = spark._jvm  # type: ignore[attr-defined]
    sc = spark.sparkContext._jsc.sc()  # type: ignore[union-attr]
    metrics = {}
    for name, value in values.items():
        metric = jvm.org.apache.spark.sql.execution.metric.SQLMetrics.createMetric(sc, name)
        metric.set(int(value))
        metrics[name] = metric
    txn.registerSQLMetrics(spark._jsparkSession, scala_map(jvm, metrics))  # type: ignore[attr-defined]


@dataclass(frozen=True)
class TableFacts:
    """What a snapshot says about a table's schema and features."""

    fields: tuple[dict, ...]  # the schema's fields, as in the log's schemaString
    partition_columns: tuple[str, ...]
    configuration: Mapping[str, str]
    writer_features: frozenset[str]

    @classmethod
    def of_transaction(cls, jvm: Any, txn: Any) -> TableFacts:
        """From a transaction's snapshot (or a ``Snapshot``: both have ``metadata`` and ``protocol``)."""
        meta, protocol = txn.metadata(), txn.protocol()
        converters = jvm.scala.jdk.javaapi.CollectionConverters
        configuration = dict(converters.asJava(meta.configuration()).items())
        partitions = tuple(converters.asJava(meta.partitionColumns()))
        features = frozenset(converters.asJava(protocol.writerFeatureNames()))
        fields = tuple(json.loads(meta.schemaString()).get("fields", []))
        return cls(fields, partitions, configuration, features)


def expected_fields(jvm: Any, ddl: str) -> tuple[dict, ...]:
    """The schema fields a table created from ``ddl`` has (Spark's own parse of it)."""
    struct = jvm.org.apache.spark.sql.types.StructType.fromDDL(ddl)
    return tuple(json.loads(struct.json()).get("fields", []))


def append_blocker(facts: TableFacts, fields: Sequence[dict], partition_by: Sequence[str]) -> str | None:
    """Why files lakecluster writes itself cannot be appended to this table as they are (None: they can).

    They can when the table holds the declared columns exactly (names, types, nullability, no
    field metadata: no generated, identity or default column, no invariant) and any other column
    is a plain nullable one (another writer added it: the files lack it, which readers read as
    null), is partitioned as declared, has no CHECK constraint and no column mapping, and uses
    no writer feature outside ``APPEND_SAFE_FEATURES``.
    """
    declared = {f["name"]: f for f in fields}
    table = {f["name"]: f for f in facts.fields}
    if any(table.get(name) != field for name, field in declared.items()):
        return "the table's schema does not hold the declared columns as declared"
    if extra := [f["name"] for f in facts.fields if f["name"] not in declared and not _plain_nullable(f)]:
        return f"the table has columns that are not declared and not plain nullable ones ({', '.join(extra)})"
    if tuple(facts.partition_columns) != tuple(partition_by):
        return "the table's partition columns are not the declared ones"
    constraints = sorted(k for k in facts.configuration if k.startswith("delta.constraints."))
    if constraints:
        return f"the table has CHECK constraints ({', '.join(constraints)})"
    if facts.configuration.get("delta.columnMapping.mode", "none") != "none":
        return "the table uses column mapping"
    unknown = sorted(facts.writer_features - APPEND_SAFE_FEATURES)
    if unknown:
        return f"the table uses writer features {', '.join(unknown)}"
    return None


def _plain_nullable(field: Mapping[str, Any]) -> bool:
    """A nullable column with no metadata (no generated expression, default, identity, invariant)."""
    return bool(field.get("nullable", True)) and not field.get("metadata")


# py4j's own first line of a failed call ("An error occurred while calling o75.commit."): the JVM's
# exception and its message follow on the next line, after ": ".
_PY4J_CALL = re.compile(r"An error occurred while calling [\w.$:]+\.?$")  # o75.commit, z:io.delta...forPath


def first_line(text: str) -> str:
    """The first non-blank line of a JVM error's text, clipped: the exception and its message,
    not py4j's line about the call nor the stack."""
    for line in text.splitlines():
        line = line.strip().removeprefix(": ").strip()
        if line and not _PY4J_CALL.match(line):
            return line[:300]
    return text[:300]
