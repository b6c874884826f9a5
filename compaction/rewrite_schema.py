"""What a rewrite writes the table's rows in, read from its log: the schema, the columns that get
stats, and where each row's id goes under row tracking; and the tables the rewrites refuse.

A rewrite changes no row (the same values, in other files), so it keeps the writer features in
:data:`REWRITE_FEATURES` as they are; a table with any other (Iceberg compatibility, a feature
newer than this list), partitioned otherwise than configured, lacking a clustering column or
mapping columns by id is refused before any work, with one line naming what to do.
"""

from __future__ import annotations

from lakecluster.config import Config
from lakecluster.errors import UnsupportedTableError
from lakecluster.stats_columns import WithoutStatsWarning, stats_columns
from lakecluster.table.delta_schema import DeltaSchema
from lakecluster.table.file_rows import RowTracking
from lakecluster.table.snapshot import Metadata

# Writer features a rewrite keeps as they are: it changes no row (the same values, in other
# files: constraints, generated and identity columns hold), writes dataChange=false (no change
# data), purges deletion vectors, and commits through Delta's own transaction (in-commit
# timestamps, checkpoints), moves each row's id with it under row tracking, and leaves the
# domain metadata of Delta's own clustering (and lakecluster's layout record) as it is. Iceberg
# compatibility (its own file rules) and any feature newer than this list are not kept.
REWRITE_FEATURES = frozenset({
    "appendOnly", "invariants", "checkConstraints", "changeDataFeed", "generatedColumns", "allowColumnDefaults",
    "identityColumns", "columnMapping", "deletionVectors", "domainMetadata", "v2Checkpoint", "vacuumProtocolCheck",
    "timestampNtz", "typeWidening", "typeWidening-preview", "inCommitTimestamp", "checkpointProtection",
    "rowTracking",  # each row's id and commit version written into the new files (RowTracking)
    "clustering",  # Delta's own clustering: kept when the configured columns are the table's
})  # fmt: skip
ROW_ID_COLUMN = "delta.rowTracking.materializedRowIdColumnName"
ROW_VERSION_COLUMN = "delta.rowTracking.materializedRowCommitVersionColumnName"


def rewrite_schema(meta: Metadata, config: Config, uri: str) -> DeltaSchema:
    """The table's schema as its log says it (``meta``): what groups are rewritten in.

    Raises:
        UnsupportedTableError: the table is partitioned otherwise than configured, is clustered
            by Delta on other columns, lacks a clustering column, maps columns by id, or has a
            writer feature the rewrites do not keep.
    """
    schema = DeltaSchema.of(meta.schema_string, meta.partition_columns, meta.configuration)
    t = config.table
    if tuple(schema.partition_by) != tuple(t.partition_by):
        raise UnsupportedTableError(f"{uri} is partitioned by {list(schema.partition_by)}, the "
                                    f"configuration says {list(t.partition_by)}: set table.partition_by")
    clustered = meta.clustering_columns()
    if clustered is not None and set(clustered) != set(t.clustering_columns):
        raise UnsupportedTableError(
            f"{uri} is clustered by Delta on {', '.join(clustered)} (CLUSTER BY), "
            f"table.clustering_columns says {', '.join(t.clustering_columns)}: set it to the table's columns, or "
            "leave it unset to take them")  # fmt: skip
    if missing := [c for c in t.clustering_columns if c not in schema.names]:
        raise UnsupportedTableError(f"clustering column {missing[0]} is not a column of {uri} "
                                    f"(renamed or dropped?); its columns: {', '.join(schema.names)}; "
                                    "set table.clustering_columns")  # fmt: skip
    if schema.mapping == "id":
        raise UnsupportedTableError(f"{uri} maps columns by id (delta.columnMapping.mode = id), "
                                    "which the compactor does not rewrite; use mode 'name'")  # fmt: skip
    if unhandled := sorted(meta.writer_features - REWRITE_FEATURES):
        raise UnsupportedTableError(
            f"{uri} uses the Delta writer feature(s) {', '.join(unhandled)}, which the compactor's "
            "rewrites do not keep; `lakecluster compact` refuses the table (the stream, status, explain and "
            "vacuum still work on it)")  # fmt: skip
    return schema


def row_tracking(meta: Metadata, uri: str) -> RowTracking | None:
    """Where the rewrites keep each row's id and commit version (None: the table tracks none).

    Raises:
        UnsupportedTableError: the table supports row tracking but names no columns for them.
    """
    if "rowTracking" not in meta.writer_features:
        return None
    names = meta.configuration.get(ROW_ID_COLUMN), meta.configuration.get(ROW_VERSION_COLUMN)
    if names[0] is None or names[1] is None:
        raise UnsupportedTableError(f"{uri} supports row tracking but its properties name no "
                                    f"materialized columns ({ROW_ID_COLUMN}): a rewrite could not keep its rows' "
                                    "ids; enable row tracking (delta.enableRowTracking = true) first")  # fmt: skip
    return RowTracking(names[0], names[1])


def rewritten_stats_columns(schema: DeltaSchema, configuration: dict[str, str],
                            warning: WithoutStatsWarning) -> tuple[str, ...]:  # fmt: skip
    """The columns rewritten files carry stats for, as the table's properties choose them now
    (by physical name); ``warning`` names the skipping columns they leave out (once)."""
    data_columns = [c.name for c in schema.columns if c.name not in schema.partition_by]
    warning.check(data_columns, configuration)
    return tuple(schema.physical(c) for c in stats_columns(data_columns, configuration))
