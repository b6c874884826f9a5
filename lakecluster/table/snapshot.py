"""A table's live files read from its log directly: the last checkpoint, column-pruned and in
batches, then the JSON commits after it.

delta-rs's ``get_add_actions(flatten=True)`` materialises every add action with the stats of every
column (gigabytes at a million files) to hand back a few of them. This reads only the checkpoint
columns it needs (``add.path``, ``size``, ``partitionValues``, ``stats``), a batch of rows at a
time, and keeps of each file's stats JSON only the requested columns, parsed vectorised by
Arrow's JSON reader. A batch Arrow cannot parse under the columns' types (a bound written as
text, NaN, a number off an integer) is read value by value with :func:`typed_stat`, the reading of
the log's stats everywhere else: the result is the same either way, unreadable bounds unknown.

The result has the columns of delta-rs's flattened add actions that lakecluster uses (``path``,
``size_bytes``, ``num_records``, ``partition.<p>``, ``null_count.<c>``, ``min.<c>``, ``max.<c>``),
typed as the table's columns, each file's ``deletion_vector`` descriptor (null for none:
``deletion_vectors.py``), and its ``base_row_id`` and ``default_row_commit_version`` (row tracking;
null without it). ``num_records`` is the file's, as its stats say; the rows a deletion
vector deletes are still in it.

Checkpoints are read in every form the protocol has: classic (one file or several parts) and V2
(UUID-named, JSON or Parquet, its file actions in sidecar files or in itself). Under column mapping
the log keys stats and partition values by the columns' physical names: they are looked up by
those and handed back under the names the caller asked for. What this still does not read (a
checkpoint ``_last_checkpoint`` names but that is gone) raises :class:`Unsupported`.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from decimal import Decimal
from typing import Any
from urllib.parse import unquote

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pajson
import pyarrow.parquet as pq

from lakecluster.errors import UnsupportedTableError
from lakecluster.log_stats import partition_array, typed_stat
from lakecluster.schema import ColumnSpec, arrow_type
from lakecluster.table.deletion_vectors import DESCRIPTOR_TYPE, descriptors
from lakecluster.table.log import NetChanges, commits_after, first_action, json_lines

BATCH_ROWS = 65_536
CLUSTERING_DOMAIN = "delta.clustering"  # Delta's own clustering: its columns (by physical name)
# Row tracking's fields of an add action, and the columns the live files hold them in.
ROW_TRACKING = {"baseRowId": "base_row_id", "defaultRowCommitVersion": "default_row_commit_version"}


class Unsupported(Exception):
    """The log holds something this reader does not read (the caller falls back to delta-rs)."""


# Reader features this reader reads right (a table with another is refused: ``readable``).
READER_FEATURES = frozenset({
    "columnMapping", "deletionVectors", "timestampNtz", "v2Checkpoint", "typeWidening", "typeWidening-preview",
    "vacuumProtocolCheck",
})  # fmt: skip
# The features the legacy protocol versions imply (before table features: reader 3, writer 7).
_LEGACY_READER = {2: {"columnMapping"}}
_LEGACY_WRITER = {2: {"appendOnly", "invariants"}, 3: {"checkConstraints"}, 4: {"changeDataFeed", "generatedColumns"},
                  5: {"columnMapping"}, 6: {"identityColumns"}}  # fmt: skip


@dataclass(frozen=True)
class Metadata:
    """The table's metadata and protocol at ``version`` (from the log: no data file is read)."""

    version: int
    schema_string: str
    partition_columns: tuple[str, ...]
    configuration: dict[str, str]
    reader_features: frozenset[str] = frozenset()  # every feature the protocol names or implies
    writer_features: frozenset[str] = frozenset()
    domains: Mapping[str, str] = field(default_factory=dict)  # domain metadata: domain -> its configuration

    def clustering_columns(self) -> tuple[str, ...] | None:
        """The columns Delta's own clustering (``CLUSTER BY``) clusters the table by, by their
        logical names; None when the table is not clustered that way.

        Raises:
            UnsupportedTableError: it clusters by a nested field, or by a column the schema lacks.
        """
        if "clustering" not in self.writer_features or CLUSTERING_DOMAIN not in self.domains:
            return None
        paths = json.loads(self.domains[CLUSTERING_DOMAIN]).get("clusteringColumns") or []
        logical = {physical: name for name, physical in physical_names(self).items()}
        out = []
        for path in paths:
            if len(path) != 1 or path[0] not in logical:
                raise UnsupportedTableError(f"the table is clustered by {'.'.join(path)}, not a top-level column "
                                            "of its schema")  # fmt: skip
            out.append(logical[path[0]])
        return tuple(out)


def protocol_features(protocol: dict | None) -> tuple[frozenset[str], frozenset[str]]:
    """(reader features, writer features) of a ``protocol`` action, the legacy versions' included."""
    if not protocol:
        return frozenset(), frozenset()
    reader, writer = int(protocol.get("minReaderVersion") or 1), int(protocol.get("minWriterVersion") or 1)
    readers = set(protocol.get("readerFeatures") or ()) if reader >= 3 else set()
    writers = set(protocol.get("writerFeatures") or ()) if writer >= 7 else set()
    for version, implied in _LEGACY_READER.items():
        readers |= implied if reader >= version and reader < 3 else set()
    for version, implied in _LEGACY_WRITER.items():
        writers |= implied if writer >= version and writer < 7 else set()
    return frozenset(readers), frozenset(writers)


def readable(metadata: Metadata, location: str) -> None:
    """Refuse a table whose reader features this reader does not read right.

    Raises:
        UnsupportedTableError: naming the feature.
    """
    if unknown := sorted(metadata.reader_features - READER_FEATURES):
        raise UnsupportedTableError(
            f"{location} uses the Delta reader feature(s) {', '.join(unknown)}, which lakecluster does not read; "
            f"it reads tables with {', '.join(sorted(READER_FEATURES))}")  # fmt: skip


@dataclass(frozen=True)
class LiveAdds:
    """The live files at ``metadata.version`` and the table's metadata there."""

    metadata: Metadata
    actions: pa.Table  # path, size_bytes, num_records, partition.<p>, null_count.<c>, min.<c>, max.<c>


def read_live_adds(fs: Any, log_dir: str, partition_by: Sequence[ColumnSpec], stats: Sequence[ColumnSpec],
                   *, null_counts: bool = False, batch_rows: int = BATCH_ROWS) -> LiveAdds:  # fmt: skip
    """The live files with ``stats``' min and max (and null counts), read from the log.

    Raises:
        Unsupported: a checkpoint named by ``_last_checkpoint`` (or one of its parts or sidecars)
            is missing, or the log cannot be parsed.
        LogGap: a commit after the checkpoint is missing.
    """
    try:
        return _read_live_adds(fs, log_dir, partition_by, stats, null_counts, batch_rows)
    except (KeyError, TypeError, ValueError, pa.ArrowException) as e:
        raise Unsupported(f"the log could not be read this way: {e}") from e


def physical_names(metadata: Metadata) -> dict[str, str]:
    """Each top-level column's physical name under column mapping (its own name without it)."""
    fields = json.loads(metadata.schema_string).get("fields", [])
    if metadata.configuration.get("delta.columnMapping.mode", "none") == "none":
        return {f["name"]: f["name"] for f in fields}
    return {f["name"]: (f.get("metadata") or {}).get("delta.columnMapping.physicalName", f["name"]) for f in fields}


def _read_live_adds(fs: Any, log_dir: str, partition_by: Sequence[ColumnSpec], stats: Sequence[ColumnSpec],
                    null_counts: bool, batch_rows: int) -> LiveAdds:  # fmt: skip
    checkpoint, commits, metadata = _log_state(fs, log_dir)
    # The log keys partition values and stats by physical names: read those, name the result as asked.
    physical = physical_names(metadata)
    as_logged = {c.name: physical.get(c.name, c.name) for c in (*partition_by, *stats)}
    logical = {f"partition.{as_logged[c.name]}": f"partition.{c.name}" for c in partition_by}
    logical.update({f"{kind}.{as_logged[c.name]}": f"{kind}.{c.name}" for c in stats
                    for kind in ("min", "max", "null_count")})  # fmt: skip
    partition_by = [replace(c, name=as_logged[c.name]) for c in partition_by]
    stats = [replace(c, name=as_logged[c.name]) for c in stats]
    changes = _net_changes([checkpoint.json_files, *commits])
    replaced = pa.array(list({*changes.added, *changes.removed}), pa.string())
    pieces = []
    for batch, parsed in _checkpoint_adds(fs, log_dir, checkpoint.parts, stats, null_counts, batch_rows):
        if len(replaced):
            kept = pc.invert(pc.is_in(batch["path"], value_set=replaced))
            batch = batch.filter(kept)
            parsed = None if parsed is None else {k: v.filter(kept) for k, v in parsed.items()}
        pieces.append(_flatten(batch, partition_by, stats, null_counts, parsed))
    added = list(changes.added.values())
    if added:
        rows = pa.table({"path": pa.array([a["path"] for a in added], pa.string()),
                         "size": pa.array([int(a.get("size") or 0) for a in added], pa.int64()),
                         "partitionValues": pa.array([list((a.get("partitionValues") or {}).items()) for a in added],
                                                     pa.map_(pa.string(), pa.string())),
                         "stats": pa.array([a.get("stats") for a in added], pa.string()),
                         "deletionVector": descriptors([a.get("deletionVector") for a in added]),
                         **{k: pa.array([a.get(k) for a in added], pa.int64()) for k in ROW_TRACKING}})  # fmt: skip
        pieces.append(_flatten(rows, partition_by, stats, null_counts))
    schema = _schema(partition_by, stats, null_counts)
    actions = pa.concat_tables([p.cast(schema) for p in pieces]) if pieces else schema.empty_table()
    return LiveAdds(metadata, actions.rename_columns([logical.get(n, n) for n in actions.column_names]))


def read_metadata(fs: Any, log_dir: str) -> Metadata:
    """The latest metadata: the last ``metaData`` action of the commits after the checkpoint, or
    the checkpoint's (only its ``metaData`` column is read).

    Raises:
        Unsupported, LogGap: as :func:`read_live_adds`.
    """
    try:
        return _log_state(fs, log_dir)[2]
    except (KeyError, TypeError, ValueError, pa.ArrowException) as e:
        raise Unsupported(f"the log could not be read this way: {e}") from e


def read_table_id(fs: Any, log_dir: str) -> str:
    """The table's id (``metaData.id``, a UUID fixed when the table was created): from the first
    commit while the log has it (read only up to its ``metaData`` action), else from the last
    checkpoint (only its ``metaData.id`` column, row groups holding none skipped by their footer
    statistics). Small reads: never the commits after the checkpoint, never its add actions.

    Raises:
        Unsupported: neither holds it (a V2 checkpoint, a log without ``_last_checkpoint``...).
    """
    try:
        first = first_action(fs, log_dir, 0, "metaData")
        if first is not None and isinstance(first.get("id"), str):
            return first["id"]
        checkpoint = last_checkpoint(fs, log_dir)
        for action in checkpoint.actions:
            if isinstance(action.get("metaData"), dict) and isinstance(action["metaData"].get("id"), str):
                return str(action["metaData"]["id"])
        for name in checkpoint.top:
            pf = pq.ParquetFile(fs.open_input_file(f"{log_dir}/{name}"))
            md = pf.metadata
            at = [i for i in range(md.num_columns) if md.schema.column(i).path == "metaData.id"]
            for g in range(md.num_row_groups if at else 0):
                st = md.row_group(g).column(at[0]).statistics
                if st is not None and st.has_null_count and st.null_count == md.row_group(g).num_rows:
                    continue
                ids = pc.struct_field(pf.read_row_group(g, columns=["metaData.id"]).column("metaData"), "id")
                ids = ids.filter(pc.is_valid(ids))
                if len(ids):
                    return str(ids[0].as_py())
    except (KeyError, TypeError, ValueError, pa.ArrowException) as e:
        raise Unsupported(f"the table id could not be read this way: {e}") from e
    where = f"checkpoint {checkpoint.version}" if checkpoint.version >= 0 else "no checkpoint"
    raise Unsupported(f"no table id in the first commit (gone, or without one) nor the last checkpoint ({where})")


@dataclass(frozen=True)
class Checkpoint:
    """The files of a table's last checkpoint (names relative to ``_delta_log``)."""

    version: int  # -1: the table has none
    top: tuple[str, ...] = ()  # Parquet files holding its other actions (metaData, protocol...)
    parts: tuple[str, ...] = ()  # Parquet files holding its add actions: the parts, its sidecars, or itself
    actions: tuple[dict, ...] = ()  # a JSON (V2) checkpoint's actions, read whole

    @property
    def json_files(self) -> list[dict]:
        """The add and remove actions a JSON checkpoint holds itself (none when its files are in sidecars)."""
        return [a for a in self.actions if "add" in a or "remove" in a]


def _log_state(fs: Any, log_dir: str) -> tuple[Checkpoint, list[list[dict]], Metadata]:
    """The last checkpoint, the commits after it, and the metadata at the latest version.

    Raises:
        UnsupportedTableError: the table has a reader feature this reader does not read.
    """
    checkpoint = last_checkpoint(fs, log_dir)
    commits = commits_after(fs, log_dir, checkpoint.version)
    meta = _latest(fs, log_dir, checkpoint, commits, "metaData")
    readers, writers = protocol_features(_latest(fs, log_dir, checkpoint, commits, "protocol"))
    domains = _domains(fs, log_dir, checkpoint, commits) if "domainMetadata" in writers else {}
    found = Metadata(checkpoint.version + len(commits), meta["schemaString"], tuple(meta.get("partitionColumns") or ()),
                     dict(meta.get("configuration") or {}), readers, writers, domains)  # fmt: skip
    readable(found, log_dir.rsplit("/_delta_log", 1)[0])
    return checkpoint, commits, found


def last_checkpoint(fs: Any, log_dir: str) -> Checkpoint:
    """The checkpoint ``_last_checkpoint`` names, in whichever form it was written.

    Raises:
        Unsupported: a file of it is missing.
    """
    try:
        with fs.open_input_stream(f"{log_dir}/_last_checkpoint") as f:
            info = json.loads(f.read())
    except FileNotFoundError:
        return Checkpoint(-1)
    version = int(info["version"])
    v2 = info.get("v2Checkpoint")
    if isinstance(v2, dict):  # a UUID-named V2 checkpoint: JSON or Parquet
        name = str(v2["path"]).rsplit("/", 1)[-1]
        _require(fs, log_dir, [name], version)
        if name.endswith(".json"):
            with fs.open_input_stream(f"{log_dir}/{name}") as f:
                actions = tuple(json_lines(f.read().decode()))
            sidecars = [a["sidecar"] for a in actions if "sidecar" in a]
            return Checkpoint(version, (), _sidecar_files(fs, log_dir, sidecars, version), actions)
        return _parquet_checkpoint(fs, log_dir, version, [name])
    parts = int(info.get("parts") or 0)
    if parts:
        names = [f"{version:020d}.checkpoint.{i:010d}.{parts:010d}.parquet" for i in range(1, parts + 1)]
    else:
        names = [f"{version:020d}.checkpoint.parquet"]
    _require(fs, log_dir, names, version)
    return _parquet_checkpoint(fs, log_dir, version, names)


def _require(fs: Any, log_dir: str, names: Sequence[str], version: int) -> None:
    infos = fs.get_file_info([f"{log_dir}/{n}" for n in names])
    missing = [n for n, i in zip(names, infos, strict=True) if not i.is_file]
    if missing:
        raise Unsupported(f"checkpoint {version} named by _last_checkpoint is missing {missing[0]}")


def _parquet_checkpoint(fs: Any, log_dir: str, version: int, names: list[str]) -> Checkpoint:
    """A Parquet checkpoint: its add actions in itself, or (V2, also under a classic name) in sidecars."""
    sidecars: list[dict] = []
    for name in names:
        pf = pq.ParquetFile(fs.open_input_file(f"{log_dir}/{name}"))
        if "sidecar" in pf.schema_arrow.names and not _all_null(pf, "sidecar.path"):
            column = pf.read(columns=["sidecar"]).column("sidecar")
            sidecars += [s for s in column.to_pylist() if s is not None]
    if sidecars:
        return Checkpoint(version, tuple(names), _sidecar_files(fs, log_dir, sidecars, version))
    return Checkpoint(version, tuple(names), tuple(names))


def _sidecar_files(fs: Any, log_dir: str, sidecars: Sequence[dict], version: int) -> tuple[str, ...]:
    """The sidecar files' names relative to ``_delta_log`` (they all live in ``_delta_log/_sidecars``)."""
    names = [f"_sidecars/{unquote(str(s['path'])).rsplit('/', 1)[-1]}" for s in sidecars]
    _require(fs, log_dir, names, version)
    return tuple(names)


def _all_null(pf: pq.ParquetFile, leaf: str) -> bool:
    """Whether the footer's statistics show column ``leaf`` null in every row (no column read;
    False when a row group has no null count)."""
    md = pf.metadata
    at = [i for i in range(md.num_columns) if md.schema.column(i).path == leaf]
    if len(at) != 1:
        return False
    for g in range(md.num_row_groups):
        group = md.row_group(g)
        st = group.column(at[0]).statistics
        if st is None or not st.has_null_count or st.null_count != group.num_rows:
            return False
    return True


def _latest(fs: Any, log_dir: str, checkpoint: Checkpoint, commits: list[list[dict]], kind: str) -> dict:
    """The newest action of ``kind`` (``metaData``, ``protocol``): from the commits after the
    checkpoint, else the checkpoint's (only that column of its Parquet files is read)."""
    for actions in [*reversed(commits), checkpoint.actions]:
        for action in actions:
            if kind in action:
                return dict(action[kind])
    for name in checkpoint.top:
        pf = pq.ParquetFile(fs.open_input_file(f"{log_dir}/{name}"))
        if kind not in pf.schema_arrow.names:
            continue
        for batch in pf.iter_batches(columns=[kind]):
            column = batch.column(kind)
            found = column.filter(pc.is_valid(column))
            if len(found):
                raw = found[0].as_py()
                if "configuration" in raw:
                    raw["configuration"] = dict(raw.get("configuration") or [])
                return dict(raw)
    if kind == "protocol":
        return {}
    raise Unsupported(f"no {kind} action up to version {checkpoint.version + len(commits)}")


def _domains(fs: Any, log_dir: str, checkpoint: Checkpoint, commits: list[list[dict]]) -> dict[str, str]:
    """Each domain's configuration at the latest version (a later action wins; removed ones go)."""
    actions = [a["domainMetadata"] for a in checkpoint.actions if "domainMetadata" in a]
    for name in checkpoint.top:
        pf = pq.ParquetFile(fs.open_input_file(f"{log_dir}/{name}"))
        if "domainMetadata" in pf.schema_arrow.names and not _all_null(pf, "domainMetadata.domain"):
            column = pf.read(columns=["domainMetadata"]).column("domainMetadata")
            actions += [d for d in column.to_pylist() if d is not None]
    actions += [a["domainMetadata"] for commit in commits for a in commit if "domainMetadata" in a]
    out: dict[str, str] = {}
    for action in actions:
        if action.get("removed"):
            out.pop(action["domain"], None)
        else:
            out[action["domain"]] = action.get("configuration") or ""
    return out


def _net_changes(commits: list[list[dict]]) -> NetChanges:
    """The commits' adds and removes taken together (a metaData action is allowed here: this is
    a full read)."""
    return NetChanges.of([[a for a in actions if "metaData" not in a] for actions in commits])


def _checkpoint_adds(fs: Any, log_dir: str, parts: Sequence[str], stats: Sequence[ColumnSpec], null_counts: bool,
                     batch_rows: int) -> Iterator[tuple[pa.Table, dict[str, pa.Array] | None]]:  # fmt: skip
    """Batches of the checkpoint's add actions (path, size, partitionValues, deletionVector), each with its
    stats: typed from ``stats_parsed`` when the checkpoint has it (Delta-Spark writes it by
    default, delta-rs with ``delta.checkpoint.writeStatsAsStruct``), reading only the requested
    columns' fields; else None and the batch has the JSON ``stats`` column."""
    for name in parts:
        pf = pq.ParquetFile(fs.open_input_file(f"{log_dir}/{name}"))
        add_type = pf.schema_arrow.field("add").type
        parsed_type = _field(add_type, "stats_parsed")
        columns = ["add.path", "add.size", "add.partitionValues"]
        has_vectors = _field(add_type, "deletionVector") is not None
        if has_vectors:
            columns.append("add.deletionVector")
        tracked = [key for key in ROW_TRACKING if _field(add_type, key) is not None]
        columns += [f"add.{key}" for key in tracked]
        # Columns whose stats the structs lack are read from the JSON text (Delta-Spark and
        # delta-rs keep no boolean bounds in their structs, though the text may have them).
        from_text = list(stats) if parsed_type is None else _not_in(parsed_type, stats, null_counts)
        if parsed_type is not None:
            columns += _parsed_columns(parsed_type, stats, null_counts)
        has_text = _field(add_type, "stats") is not None
        if (from_text or parsed_type is None) and not has_text:
            raise Unsupported(f"checkpoint {name} has no stats text for {', '.join(c.name for c in from_text)}")
        if from_text or parsed_type is None:
            columns.append("add.stats")
        for batch in pf.iter_batches(batch_size=batch_rows, columns=columns):
            add = batch.column("add")
            if add.null_count:  # rows of other actions (protocol, metaData, remove...): a copy without them
                add = add.filter(pc.is_valid(add))
            if not len(add):
                continue
            rows = pa.table({k: pc.struct_field(add, k) for k in ("path", "size", "partitionValues")})
            vectors = pc.struct_field(add, "deletionVector").cast(DESCRIPTOR_TYPE) if has_vectors else \
                pa.nulls(len(add), DESCRIPTOR_TYPE)  # fmt: skip
            rows = rows.append_column("deletionVector", vectors)
            for key in ROW_TRACKING:
                rows = rows.append_column(key, pc.struct_field(add, key).cast(pa.int64()) if key in tracked
                                          else pa.nulls(len(add), pa.int64()))  # fmt: skip
            if parsed_type is None:
                yield rows.append_column("stats", pc.struct_field(add, "stats")), None
                continue
            parsed = _from_parsed(pc.struct_field(add, "stats_parsed"), stats, null_counts)
            if from_text:
                texts = parse_stats(pc.struct_field(add, "stats"), from_text, null_counts)
                texts.pop("num_records")
                parsed.update(texts)
            yield rows, parsed


def _groups(null_counts: bool) -> list[str]:
    """The fields of a stats object read for each column."""
    return ["minValues", "maxValues", *(["nullCount"] if null_counts else [])]


def _not_in(parsed: pa.DataType, stats: Sequence[ColumnSpec], null_counts: bool) -> list[ColumnSpec]:
    """The columns some of whose stats fields ``stats_parsed`` lacks."""
    inner = [_field(parsed, g) for g in _groups(null_counts)]
    return [c for c in stats if any(t is None or _field(t, c.name) is None for t in inner)]


def _field(struct: pa.DataType, name: str) -> pa.DataType | None:
    if not pa.types.is_struct(struct):
        return None
    index = struct.get_field_index(name)
    return struct.field(index).type if index >= 0 else None


def _parsed_columns(parsed: pa.DataType, stats: Sequence[ColumnSpec], null_counts: bool) -> list[str]:
    """The checkpoint columns of ``stats_parsed`` to read: numRecords and the requested columns'
    fields that it has (the columns it lacks are read from the stats text, see :func:`_not_in`)."""
    out = ["add.stats_parsed.numRecords"] if _field(parsed, "numRecords") is not None else []
    for group in _groups(null_counts):
        inner = _field(parsed, group)
        out += [f"add.stats_parsed.{group}.{c.name}" for c in stats if inner is not None and _field(inner, c.name)]
    return out or ["add.stats_parsed.numRecords"]


def _from_parsed(parsed: pa.Array, stats: Sequence[ColumnSpec], null_counts: bool) -> dict[str, pa.Array]:
    """num_records and the columns' null_count, min and max from a batch of ``stats_parsed``."""
    n = len(parsed)

    def get(*names: str) -> pa.Array | None:
        arr = parsed
        for name in names:
            if _field(arr.type, name) is None:
                return None
            arr = pc.struct_field(arr, name)
        return arr

    records = get("numRecords")
    out = {"num_records": pa.nulls(n, pa.int64()) if records is None else records.cast(pa.int64())}
    try:
        for c in stats:
            if null_counts:
                nulls = get("nullCount", c.name)
                out[f"null_count.{c.name}"] = pa.nulls(n, pa.int64()) if nulls is None else nulls.cast(pa.int64())
            for side, group in (("min", "minValues"), ("max", "maxValues")):
                values = get(group, c.name)
                out[f"{side}.{c.name}"] = pa.nulls(n, arrow_type(c)) if values is None else _typed(values, c)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError) as e:
        raise Unsupported(f"stats_parsed does not hold the columns' types: {e}") from e
    return out


def _typed(values: pa.Array, c: ColumnSpec) -> pa.Array:
    if c.type == "timestamp" and pa.types.is_timestamp(values.type) and values.type.tz is None:
        values = values.cast(pa.timestamp("us")).cast(pa.timestamp("us", tz="UTC"))  # Delta: UTC micro-seconds
    return values.cast(arrow_type(c))


def _schema(partition_by: Sequence[ColumnSpec], stats: Sequence[ColumnSpec], null_counts: bool) -> pa.Schema:
    fields = [pa.field("path", pa.string()), pa.field("size_bytes", pa.int64()), pa.field("num_records", pa.int64())]
    fields += [pa.field(f"partition.{p.name}", arrow_type(p)) for p in partition_by]
    for c in stats:
        if null_counts:
            fields.append(pa.field(f"null_count.{c.name}", pa.int64()))
        fields += [pa.field(f"min.{c.name}", arrow_type(c)), pa.field(f"max.{c.name}", arrow_type(c))]
    fields.append(pa.field("deletion_vector", DESCRIPTOR_TYPE))
    fields += [pa.field(name, pa.int64()) for name in ROW_TRACKING.values()]
    return pa.schema(fields)


def _flatten(rows: pa.Table, partition_by: Sequence[ColumnSpec], stats: Sequence[ColumnSpec], null_counts: bool,
             parsed: dict[str, pa.Array] | None = None) -> pa.Table:  # fmt: skip
    """path, size, partitionValues, the stats (JSON ``stats``, or already ``parsed``) and the
    deletion vector (``deletionVector``, when the rows have one) -> the flattened columns, typed."""
    n = rows.num_rows
    out: dict[str, pa.Array] = {"path": rows["path"].combine_chunks().cast(pa.string()),
                                "size_bytes": rows["size"].combine_chunks().cast(pa.int64())}  # fmt: skip
    if parsed is None:
        parsed = parse_stats(rows["stats"].combine_chunks(), stats, null_counts)
    else:
        parsed = dict(parsed)
    out["num_records"] = parsed.pop("num_records")
    values = rows["partitionValues"].combine_chunks()
    for p in partition_by:
        text = pc.map_lookup(values, pa.scalar(p.name, pa.string()), "first") if n else pa.array([], pa.string())
        out[f"partition.{p.name}"] = partition_array(p, text.to_pylist()) if n else pa.array([], arrow_type(p))
    out.update(parsed)
    out["deletion_vector"] = rows["deletionVector"].combine_chunks().cast(DESCRIPTOR_TYPE) \
        if "deletionVector" in rows.column_names else pa.nulls(n, DESCRIPTOR_TYPE)  # fmt: skip
    for key, name in ROW_TRACKING.items():
        out[name] = rows[key].combine_chunks().cast(pa.int64()) if key in rows.column_names else pa.nulls(n, pa.int64())
    return pa.table(out, schema=_schema(partition_by, stats, null_counts))


def _json_lines(texts: pa.Array) -> pa.Buffer:
    """The stats texts as newline-delimited JSON (a missing text as an empty object): each text
    joined with a newline by Arrow, whose data buffer then holds them back to back.

    Raises ``ArrowInvalid`` unless every text is one compact JSON object on one line (``{`` first,
    ``}`` last, no newline), as Delta writers write them: anything else is read value by value
    (Arrow's JSON reader must never see a top-level ``null``: it crashes the process).
    """
    texts = pc.fill_null(texts.cast(pa.large_string()), "{}")
    texts = pc.if_else(pc.equal(texts, ""), pa.scalar("{}", pa.large_string()), texts)
    offsets = np.frombuffer(texts.buffers()[1], dtype=np.int64)[texts.offset : texts.offset + len(texts) + 1]
    data = np.frombuffer(texts.buffers()[2], dtype=np.uint8) if len(texts) else np.zeros(0, np.uint8)
    body = data[offsets[0] : offsets[-1]]
    if len(texts) and (
        (data[offsets[:-1]] != ord("{")).any() or (data[offsets[1:] - 1] != ord("}")).any() or (body == 10).any()
    ):
        raise pa.ArrowInvalid("a stats text is not one JSON object on one line")
    lines = pc.binary_join_element_wise(texts, pa.scalar("", pa.large_string()), pa.scalar("\n", pa.large_string()))
    line_offsets = np.frombuffer(lines.buffers()[1], dtype=np.int64)[lines.offset : lines.offset + len(lines) + 1]
    return lines.buffers()[2][int(line_offsets[0]) : int(line_offsets[-1])]


def _stats_type(c: ColumnSpec) -> pa.DataType:
    """The JSON value's type for Arrow's reader: text for dates and timestamps (cast after)."""
    if c.type in ("date", "timestamp"):
        return pa.string()
    if c.is_floating:
        return pa.float64()
    if c.decimal:
        return pa.decimal128(38, c.decimal[1])
    return arrow_type(c)


def parse_stats(texts: pa.Array, stats: Sequence[ColumnSpec], null_counts: bool) -> dict[str, pa.Array]:
    """``num_records`` and, per column, ``null_count.<c>``, ``min.<c>`` and ``max.<c>`` of each
    stats text, typed as :func:`typed_stat` reads them (unreadable: null), vectorised by Arrow's
    JSON reader; a batch it will not convert is read value by value."""
    n = len(texts)
    if n and stats:
        bounds = pa.struct([(c.name, _stats_type(c)) for c in stats])
        fields = [("numRecords", pa.int64()), ("minValues", bounds), ("maxValues", bounds)]
        if null_counts:
            fields.append(("nullCount", pa.struct([(c.name, pa.int64()) for c in stats])))
        try:
            return _fast(texts, stats, null_counts, pa.schema(fields))
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError):
            pass  # some value Arrow will not convert: read this batch value by value
    return _slow(texts, stats, null_counts)


def _fast(texts: pa.Array, stats: Sequence[ColumnSpec], null_counts: bool, schema: pa.Schema) -> dict[str, pa.Array]:
    options = pajson.ParseOptions(explicit_schema=schema, unexpected_field_behavior="ignore")
    table = pajson.read_json(pa.BufferReader(_json_lines(texts)), parse_options=options,
                             read_options=pajson.ReadOptions(block_size=1 << 24))  # fmt: skip
    if table.num_rows != len(texts):
        raise pa.ArrowInvalid("a stats text holds more than one JSON value")
    out: dict[str, pa.Array] = {"num_records": table["numRecords"].combine_chunks()}
    for c in stats:
        if null_counts:
            out[f"null_count.{c.name}"] = pc.struct_field(table["nullCount"].combine_chunks(), c.name)
        for side, key in (("min", "minValues"), ("max", "maxValues")):
            raw = pc.struct_field(table[key].combine_chunks(), c.name)
            if c.type == "timestamp":
                raw = _utc_timestamps(raw)
            elif c.decimal:
                raw = raw.cast(pa.decimal128(c.decimal[0], c.decimal[1]))
            out[f"{side}.{c.name}"] = raw.cast(arrow_type(c))
    return out


def _stats_object(text: str | None) -> dict:
    """One file's stats text as a dict; text that is not a JSON object reads as no stats."""
    try:
        value = json.loads(text or "{}", parse_float=Decimal)
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def _utc_timestamps(text: pa.Array) -> pa.Array:
    """ISO timestamps as UTC micro-seconds: with a zone offset (``Z``, ``+01:00``) as written,
    without one as UTC (``timestamp_ntz`` columns, as :func:`typed_stat` reads them)."""
    try:
        return text.cast(pa.timestamp("us", tz="UTC"))
    except pa.ArrowInvalid:
        return pc.assume_timezone(text.cast(pa.timestamp("us")), "UTC")


def _slow(texts: pa.Array, stats: Sequence[ColumnSpec], null_counts: bool) -> dict[str, pa.Array]:
    parsed = [_stats_object(t) for t in texts.to_pylist()]
    out: dict[str, pa.Array] = {"num_records": pa.array([p.get("numRecords") for p in parsed], pa.int64())}
    for c in stats:
        if null_counts:
            nulls = [p.get("nullCount", {}).get(c.name) for p in parsed]
            out[f"null_count.{c.name}"] = pa.array([v if isinstance(v, int) else None for v in nulls], pa.int64())
        for side, upper in (("min", False), ("max", True)):
            values = [typed_stat(c, p.get(f"{side}Values", {}).get(c.name), upper) for p in parsed]
            out[f"{side}.{c.name}"] = pa.array(values, arrow_type(c))
    return out
