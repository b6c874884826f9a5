"""A Spark DataFrame over only the files ``prune`` kept, read by Delta's own reader: a file's
deletion vector applied, columns by their physical names under column mapping.

Partition columns are not stored in Delta data files: their values come back from the stored
index (each partition column is indexed, its min is the partition value), one read per partition.
So the stored index must be the table's (``sync.identity``) and hold every candidate file: a
result of ``prune`` built in memory, or with new files read from the log, is read after a sync.
Each candidate is read as the table's latest version holds it (its deletion vector there); one
that version no longer holds (rewritten or deleted since the index's version) means the index is
behind: sync and prune again. So does a change of the table's columns since the index's version
(one renamed, dropped, retyped or added): Delta's reader names and types them as the table does now.
"""

from __future__ import annotations

from collections import defaultdict

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from lakecluster.delta_txn import files_frame
from lakecluster.errors import StatsIndexError
from lakecluster.index.encoding import decode_array
from lakecluster.index.prune import PruneResult
from lakecluster.index.spec import IndexSpec, schema_string_columns
from lakecluster.index.store import Manifest
from lakecluster.index.sync import identity, store_for
from lakecluster.schema import spark_ddl, spark_sql_type
from lakecluster.table.snapshot import Metadata, physical_names


def read_candidates(spark: SparkSession, spec: IndexSpec, result: PruneResult) -> DataFrame:
    """Rows of the candidate files only (all columns, table order). Apply the predicate on top:
    pruning keeps whole files, so the frame still holds non-matching rows of those files."""
    store = store_for(spec)
    manifest = store.manifest()
    if manifest is None:
        raise StatsIndexError(f"no index under {spec.index_path} (run `lakecluster index sync`)")
    if why := identity(spec, manifest):  # its columns and partition values would be another table's
        raise StatsIndexError(f"the stored index of {spec.table_uri} cannot be read: {why}; "
                              "run `lakecluster index sync`")  # fmt: skip
    columns = manifest.columns()
    data_columns = tuple(c for c in columns if c.name not in manifest.partition_by)
    if result.files.num_rows == 0:
        return spark.createDataFrame([], spark_ddl(columns))
    base = spec.table.uri
    values: dict[str, dict[str, object]] = defaultdict(dict)
    candidates = result.files["file"]
    by_name = {c.name: c for c in columns}
    for p in manifest.partition_by:
        rows = store.read_column(p, ["file", "min"]).rows
        rows = rows.filter(pc.is_in(rows["file"], value_set=candidates))
        decoded = decode_array(by_name[p], rows["min"].combine_chunks())
        for f, v in zip(rows["file"].to_pylist(), decoded.to_pylist(), strict=True):
            values[f][p] = v
    if manifest.partition_by and (absent := [f for f in candidates.to_pylist() if f not in values]):
        raise StatsIndexError(f"{len(absent)} candidate file(s) (such as {absent[0]}) are not in the stored index "
                              f"at version {manifest.delta_version}: prune with index='sync' (or run "
                              "`lakecluster index sync`) before reading them")  # fmt: skip
    adds, metadata = _latest_adds(spec, candidates.to_pylist(), manifest.partition_by)
    if changed := _columns_changed(manifest, metadata):
        raise StatsIndexError(f"the table's columns changed since the index's version {manifest.delta_version} "
                              f"({changed}): sync the index (`lakecluster index sync`) and prune again")  # fmt: skip
    groups: dict[tuple, list[str]] = defaultdict(list)
    for f in candidates.to_pylist():
        groups[tuple(values[f].get(p) for p in manifest.partition_by)].append(f)
    frames = []
    for key, files in groups.items():
        df = files_frame(spark, base, [adds[f] for f in files])
        if absent := [c.name for c in data_columns if c.name not in df.columns]:  # renamed since the check above
            raise StatsIndexError(f"the table has no column {absent[0]} now, the index's version "
                                  f"{manifest.delta_version} has: sync the index and prune again")  # fmt: skip
        df = df.select(*[F.col(f"`{c.name}`").cast(spark_sql_type(c)).alias(c.name) for c in data_columns])
        for p, v in zip(manifest.partition_by, key, strict=True):
            df = df.withColumn(p, F.lit(v).cast(spark_sql_type(by_name[p])))
        frames.append(df.select(*[c.name for c in columns]))
    out = frames[0]
    for df in frames[1:]:
        out = out.unionByName(df)
    return out


def _columns_changed(manifest: Manifest, metadata: Metadata) -> str:
    """How the table's columns at ``metadata``'s version differ from those the index recorded
    ("" when they do not): Delta's reader names and types a file's columns as the table does now,
    so a column renamed, dropped, retyped or added since would be read as null or missed."""
    now = {c.name: c.type for c in schema_string_columns(metadata.schema_string)}
    physical = physical_names(metadata)
    recorded = manifest.physical_names()
    by_physical = {physical.get(name, name): name for name in now}
    for c in manifest.columns():
        name = by_physical.get(recorded[c.name])
        if name is None:
            return f"{c.name} was dropped"
        if name != c.name:
            return f"{c.name} was renamed to {name}"
        if now[name] != c.type:
            return f"{c.name} is {now[name]} now, not {c.type}"
    if added := sorted(set(now) - {c.name for c in manifest.columns()}):
        return f"{', '.join(added)} added"
    return ""


def _latest_adds(spec: IndexSpec, paths: list[str], partition_by: list[str]) -> tuple[dict[str, dict], Metadata]:
    """Each candidate's ``add`` fields (path, partition values, size, deletion vector) at the
    table's latest version, and the table's metadata there."""
    version, live, metadata = spec.table.live_files().snapshot_with_metadata()
    rows = live.filter(pc.is_in(live["path"], value_set=pa.array(paths, pa.string())))
    found = {r["path"]: r for r in rows.to_pylist()}
    if absent := [p for p in paths if p not in found]:
        raise StatsIndexError(f"{len(absent)} candidate file(s) (such as {absent[0]}) are no longer in the table "
                              f"at version {version}: sync the index (`lakecluster index sync`) and prune again")
    physical = physical_names(metadata)  # the log's (and Delta's reader's) keys of partition values
    return {p: {"path": p, "size": found[p]["size"],
                "partitionValues": {physical.get(c, c): found[p].get(f"partition.{c}") for c in partition_by},
                **({"deletionVector": found[p]["deletion_vector"]} if found[p]["deletion_vector"] else {})}
            for p in paths}, metadata  # fmt: skip
