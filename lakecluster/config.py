"""Typed, frozen configuration, loaded from defaults, a TOML file, the environment and flags.

Precedence (later wins): built-in defaults < ``--config`` TOML file < ``LAKECLUSTER_*`` environment
variables (``__`` separates levels: ``LAKECLUSTER_SOURCE__KAFKA__BOOTSTRAP_SERVERS``) < ``--set
key=value`` flags. Everything is validated before Spark starts; a bad key or value raises
:class:`ConfigError` naming the key. Every key is documented in ``docs/configuration.md``.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import tomllib
import types
import typing
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from lakecluster.errors import ConfigError
from lakecluster.schema import ColumnSpec, validate_type

ENV_PREFIX = "LAKECLUSTER_"
MAX_CLUSTERING_COLUMNS = 8


def _ssb_columns() -> tuple[ColumnSpec, ...]:
    # Imported lazily: the generator module pulls numpy/pyarrow, config must stay light.
    from lakecluster.stream.ssb import SSB_COLUMNS

    return SSB_COLUMNS


@dataclass(frozen=True)
class KafkaSourceConfig:
    bootstrap_servers: str = "localhost:9092"
    topics: tuple[str, ...] = ()
    topic_pattern: str | None = None
    starting_offsets: str = "earliest"
    max_offsets_per_trigger: int | None = None
    options: Mapping[str, str] = field(default_factory=dict)
    connect_retries: int = 5
    connect_backoff_s: float = 1.0
    request_timeout_s: float = 30.0
    fail_on_data_loss: bool = True


@dataclass(frozen=True)
class GeneratorSourceConfig:
    rows_per_second: int = 20_000
    partitions: int = 2
    brand_skew: float = 0.0
    seed: int = 42
    max_rows: int | None = None
    max_rows_per_trigger: int | None = None


@dataclass(frozen=True)
class SourceConfig:
    kind: Literal["generator", "kafka"] = "generator"
    kafka: KafkaSourceConfig = field(default_factory=KafkaSourceConfig)
    generator: GeneratorSourceConfig = field(default_factory=GeneratorSourceConfig)


@dataclass(frozen=True)
class TableConfig:
    path: str = "lakecluster-data/lineorder"
    columns: tuple[ColumnSpec, ...] = field(default_factory=_ssb_columns)
    partition_by: tuple[str, ...] = ("d_year",)
    clustering_columns: tuple[str, ...] = ("s_city", "c_city", "p_brand")
    quarantine_path: str | None = None
    target_file_rows: int = 1_000_000

    @property
    def resolved_quarantine_path(self) -> str:
        return self.quarantine_path or self.path.rstrip("/") + "_quarantine"

    def column(self, name: str) -> ColumnSpec:
        return next(c for c in self.columns if c.name == name)


@dataclass(frozen=True)
class StreamConfig:
    trigger_interval_s: float = 5.0
    checkpoint_location: str | None = None
    app_id: str = "lakecluster-stream"
    progress: bool = True
    cluster_on_write: bool = True

    def resolved_checkpoint(self, table: TableConfig) -> str:
        return self.checkpoint_location or table.path.rstrip("/") + "/_lakecluster/checkpoint"


@dataclass(frozen=True)
class SketchConfig:
    enabled: bool = True
    k: int = 200
    boundaries: int = 1024
    retain_versions: int = 20


@dataclass(frozen=True)
class CompactionConfig:
    """Thresholds of the compaction loop; every key is documented in docs/configuration.md."""

    curve: Literal["hilbert", "zorder"] = "hilbert"
    column_weights: Mapping[str, str] = field(default_factory=dict)
    interval_s: float = 60.0
    target_file_bytes: int = 128 << 20
    min_file_bytes: int = 32 << 20
    max_group_bytes: int = 2 << 30
    max_groups_per_run: int = 8
    min_input_files: int = 4
    merge_fanout: int = 4
    max_generation: int = 6
    orphan_min_age_s: float = 3600.0
    commit_attempts: int = 100

    def weights(self) -> dict[str, float]:
        return {k: float(v) for k, v in self.column_weights.items()}


@dataclass(frozen=True)
class IndexConfig:
    """The column-stats index (docs/index.md); every key is documented in docs/configuration.md."""

    enabled: bool = True
    path: str | None = None
    columns: tuple[str, ...] = ()
    max_columns: int = 32
    row_group_rows: int = 16_384
    max_segments: int = 8
    sync_after_compaction: bool = True
    sync_after_stream: bool = False
    nan_counts: Literal["assume", "scan"] = "assume"

    def resolved_path(self, table: TableConfig) -> str:
        return self.path or table.path.rstrip("/") + "/_lakecluster/index"


@dataclass(frozen=True)
class MetricsConfig:
    port: int = 9464
    host: str = "0.0.0.0"


@dataclass(frozen=True)
class SparkConfig:
    master: str = "local[2]"
    conf: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Config:
    source: SourceConfig = field(default_factory=SourceConfig)
    table: TableConfig = field(default_factory=TableConfig)
    stream: StreamConfig = field(default_factory=StreamConfig)
    sketches: SketchConfig = field(default_factory=SketchConfig)
    compaction: CompactionConfig = field(default_factory=CompactionConfig)
    index: IndexConfig = field(default_factory=IndexConfig)
    metrics: MetricsConfig = field(default_factory=MetricsConfig)
    spark: SparkConfig = field(default_factory=SparkConfig)


# --------------------------------------------------------------------------------------------
# Loading


def load_config(
    path: str | os.PathLike[str] | None = None,
    *,
    overrides: Mapping[str, str] | None = None,
    environ: Mapping[str, str] | None = None,
) -> Config:
    """Load, merge and validate the configuration. Raises :class:`ConfigError`."""
    data: dict[str, Any] = {}
    if path is not None:
        p = Path(path)
        try:
            data = tomllib.loads(p.read_text())
        except FileNotFoundError:
            raise ConfigError("--config", f"file not found: {p}") from None
        except tomllib.TOMLDecodeError as e:
            raise ConfigError("--config", f"{p} is not valid TOML: {e}") from None
    env = os.environ if environ is None else environ
    for name, value in sorted(env.items()):
        if name.startswith(ENV_PREFIX) and not name.startswith(ENV_PREFIX + "TEST_"):
            key = ".".join(part.lower() for part in name[len(ENV_PREFIX) :].split("__"))
            _set_path(data, key, _parse_scalar(value), source=name)
    for key, value in (overrides or {}).items():
        _set_path(data, key, _parse_scalar(value), source=f"--set {key}")
    config = _build(Config, data, "")
    validate(config)
    return config


def parse_overrides(items: list[str]) -> dict[str, str]:
    """Turn ``["a.b=1", ...]`` from ``--set`` flags into a mapping."""
    out: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ConfigError(item, "--set takes key=value, e.g. --set table.path=/data/t")
        out[key.strip()] = value
    return out


def _parse_scalar(text: str) -> Any:
    """Environment and flag values are TOML values when they parse as one, else plain strings."""
    try:
        return tomllib.loads(f"v = {text}")["v"]
    except tomllib.TOMLDecodeError:
        return text


def _set_path(data: dict[str, Any], key: str, value: Any, *, source: str) -> None:
    parts = key.split(".")
    node = data
    for part in parts[:-1]:
        child = node.setdefault(part, {})
        if not isinstance(child, dict):
            raise ConfigError(key, f"{source} sets a key below '{part}', which is not a section")
        node = child
    node[parts[-1]] = value


def _build(cls: type, data: Any, prefix: str) -> Any:
    if not isinstance(data, Mapping):
        raise ConfigError(prefix or "<root>", f"expected a section (table), got {data!r}")
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls)}
    unknown = sorted(set(data) - set(fields))
    if unknown:
        key = f"{prefix}{unknown[0]}"
        raise ConfigError(key, f"unknown key; known keys here: {', '.join(sorted(fields))}")
    kwargs = {name: _convert(hints[name], data[name], f"{prefix}{name}") for name in data}
    return cls(**kwargs)


def _convert(tp: Any, value: Any, key: str) -> Any:
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        inner = [a for a in args if a is not type(None)]
        return _convert(inner[0], value, key)
    if dataclasses.is_dataclass(tp) and isinstance(tp, type):
        return _build(tp, value, key + ".")
    if tp is ColumnSpec:
        return _column(value, key)
    if origin is Literal:
        if value not in args:
            raise ConfigError(key, f"must be one of {', '.join(map(str, args))}, got {value!r}")
        return value
    if origin is tuple:
        if isinstance(value, str):
            value = [v.strip() for v in value.split(",") if v.strip()]
        if not isinstance(value, list | tuple):
            raise ConfigError(key, f"expected a list, got {value!r}")
        return tuple(_convert(args[0], v, f"{key}[{i}]") for i, v in enumerate(value))
    if origin is Mapping or tp is Mapping:
        if isinstance(value, str):
            try:
                value = json.loads(value)
            except json.JSONDecodeError:
                raise ConfigError(key, f"expected a table or JSON object, got {value!r}") from None
        if not isinstance(value, Mapping):
            raise ConfigError(key, f"expected a table of key = value, got {value!r}")
        return types.MappingProxyType({str(k): str(v) for k, v in value.items()})
    if tp is bool:
        if not isinstance(value, bool):
            raise ConfigError(key, f"expected true or false, got {value!r}")
        return value
    if tp is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(key, f"expected an integer, got {value!r}")
        return value
    if tp is float:
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise ConfigError(key, f"expected a number, got {value!r}")
        return float(value)
    if tp is str:
        if not isinstance(value, str):
            raise ConfigError(key, f"expected a string, got {value!r}")
        return value
    raise ConfigError(key, f"unsupported config type {tp}")  # pragma: no cover - programming error


def _column(value: Any, key: str) -> ColumnSpec:
    if not isinstance(value, Mapping):
        raise ConfigError(key, f'expected {{ name = "...", type = "..." }}, got {value!r}')
    return _build(ColumnSpec, value, key + ".")


# --------------------------------------------------------------------------------------------
# Validation: relations between keys, checked once at load.

_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def validate(config: Config) -> None:
    t = config.table
    if not t.path:
        raise ConfigError("table.path", "must not be empty")
    if not t.columns:
        raise ConfigError("table.columns", "declare at least one column")
    names = [c.name for c in t.columns]
    for i, c in enumerate(t.columns):
        if not _NAME.match(c.name):
            raise ConfigError(f"table.columns[{i}].name", f"'{c.name}' is not a plain identifier")
        problem = validate_type(c.type)
        if problem:
            raise ConfigError(f"table.columns[{i}].type", problem)
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        raise ConfigError("table.columns", f"duplicate column names: {', '.join(dupes)}")
    for list_key, cols in (("partition_by", t.partition_by), ("clustering_columns", t.clustering_columns)):
        for c in cols:
            if c not in names:
                raise ConfigError(f"table.{list_key}", f"unknown column '{c}'; columns: {', '.join(names)}")
    if not 1 <= len(t.clustering_columns) <= MAX_CLUSTERING_COLUMNS:
        raise ConfigError("table.clustering_columns", f"give 1 to {MAX_CLUSTERING_COLUMNS} columns")
    overlap = set(t.partition_by) & set(t.clustering_columns)
    if overlap:
        raise ConfigError("table.clustering_columns", f"{sorted(overlap)} are partition columns")
    _positive("table.target_file_rows", t.target_file_rows)
    if t.resolved_quarantine_path.rstrip("/") == t.path.rstrip("/"):
        raise ConfigError("table.quarantine_path", "must differ from table.path")

    s = config.stream
    if s.trigger_interval_s < 0:
        raise ConfigError("stream.trigger_interval_s", "must be >= 0")
    if not s.app_id:
        raise ConfigError("stream.app_id", "must not be empty")

    k = config.sketches
    if not 8 <= k.k <= 65535:
        raise ConfigError("sketches.k", f"must be 8..65535, got {k.k}")
    if not 2 <= k.boundaries <= 1 << 20:
        raise ConfigError("sketches.boundaries", f"must be 2..1048576, got {k.boundaries}")
    _positive("sketches.retain_versions", k.retain_versions)

    _validate_compaction(config.compaction, t)
    _validate_index(config.index, t)
    if not 0 <= config.metrics.port <= 65535:
        raise ConfigError("metrics.port", f"must be 0 (off) or a TCP port, got {config.metrics.port}")

    src = config.source
    if src.kind == "kafka":
        _validate_kafka(src.kafka)
    else:
        _validate_generator(src.generator, t)


def _validate_compaction(c: CompactionConfig, t: TableConfig) -> None:
    for name, value in c.column_weights.items():
        if name not in t.clustering_columns:
            known = ", ".join(t.clustering_columns)
            raise ConfigError(f"compaction.column_weights.{name}", f"not a clustering column; known: {known}")
        try:
            ok = float(value) > 0
        except ValueError:
            ok = False
        if not ok:
            raise ConfigError(f"compaction.column_weights.{name}", f"must be a number > 0, got {value!r}")
    for key in ("interval_s", "target_file_bytes", "min_file_bytes", "max_group_bytes", "max_groups_per_run",
                "min_input_files", "commit_attempts", "max_generation"):  # fmt: skip
        _positive(f"compaction.{key}", getattr(c, key))
    if c.min_file_bytes > c.target_file_bytes:
        raise ConfigError("compaction.min_file_bytes", "must be <= compaction.target_file_bytes")
    if c.max_group_bytes < c.target_file_bytes:
        raise ConfigError("compaction.max_group_bytes", "must be >= compaction.target_file_bytes")
    if c.merge_fanout < 2:
        raise ConfigError("compaction.merge_fanout", f"must be >= 2, got {c.merge_fanout}")
    if c.orphan_min_age_s < 0:
        raise ConfigError("compaction.orphan_min_age_s", "must be >= 0")


def _validate_index(c: IndexConfig, t: TableConfig) -> None:
    names = [col.name for col in t.columns]
    for i, name in enumerate(c.columns):
        if name not in names:
            raise ConfigError(f"index.columns[{i}]", f"unknown column '{name}'; columns: {', '.join(names)}")
    if c.path is not None and not c.path.strip():
        raise ConfigError("index.path", "must not be empty (leave it unset for <table.path>/_lakecluster/index)")
    for key in ("max_columns", "row_group_rows", "max_segments"):
        _positive(f"index.{key}", getattr(c, key))


def _positive(key: str, value: float | None) -> None:
    if value is not None and value <= 0:
        raise ConfigError(key, f"must be > 0, got {value}")


def _validate_kafka(kc: KafkaSourceConfig) -> None:
    if not kc.bootstrap_servers.strip():
        raise ConfigError("source.kafka.bootstrap_servers", "must not be empty")
    if bool(kc.topics) == bool(kc.topic_pattern):
        raise ConfigError("source.kafka.topics", "set exactly one of topics or topic_pattern")
    if kc.topic_pattern:
        try:
            re.compile(kc.topic_pattern)
        except re.error as e:
            raise ConfigError("source.kafka.topic_pattern", f"not a valid regex: {e}") from None
    parse_starting_offsets(kc.starting_offsets)
    _positive("source.kafka.max_offsets_per_trigger", kc.max_offsets_per_trigger)
    if kc.connect_retries < 0:
        raise ConfigError("source.kafka.connect_retries", "must be >= 0")
    _positive("source.kafka.connect_backoff_s", kc.connect_backoff_s)
    _positive("source.kafka.request_timeout_s", kc.request_timeout_s)


def parse_starting_offsets(text: str) -> str | dict[str, dict[int, int]]:
    """``earliest``, ``latest`` or JSON ``{"topic": {"0": 42, "1": -2}}`` (-2 earliest, -1 latest)."""
    if text in ("earliest", "latest"):
        return text
    key = "source.kafka.starting_offsets"
    try:
        raw = json.loads(text)
    except json.JSONDecodeError:
        raise ConfigError(key, f"expected earliest, latest or a JSON object, got {text!r}") from None
    if not isinstance(raw, dict):
        raise ConfigError(key, "the JSON form maps topic -> {partition: offset}")
    out: dict[str, dict[int, int]] = {}
    for topic, parts in raw.items():
        if not isinstance(parts, dict):
            raise ConfigError(key, f"topic {topic!r}: expected {{partition: offset}}")
        try:
            out[topic] = {int(p): int(o) for p, o in parts.items()}
        except (TypeError, ValueError):
            raise ConfigError(key, f"topic {topic!r}: partitions and offsets must be integers") from None
        if any(o < -2 for o in out[topic].values()):
            raise ConfigError(key, f"topic {topic!r}: offsets must be >= -2")
    return out


def _validate_generator(gc: GeneratorSourceConfig, table: TableConfig) -> None:
    from lakecluster.stream.ssb import SSB_COLUMNS

    known = {c.name: c for c in SSB_COLUMNS}
    for i, c in enumerate(table.columns):
        if c.name not in known:
            raise ConfigError(
                f"table.columns[{i}].name",
                f"the generator source does not produce '{c.name}'; it produces {', '.join(known)}",
            )
        if known[c.name].type != c.type:
            raise ConfigError(f"table.columns[{i}].type", f"the generator produces {c.name} as {known[c.name].type}")
    _positive("source.generator.rows_per_second", gc.rows_per_second)
    _positive("source.generator.partitions", gc.partitions)
    _positive("source.generator.max_rows", gc.max_rows)
    _positive("source.generator.max_rows_per_trigger", gc.max_rows_per_trigger)
    if gc.brand_skew < 0:
        raise ConfigError("source.generator.brand_skew", "must be >= 0 (0 = uniform, 1 = Zipf)")


def describe(config: Config) -> dict[str, Any]:
    """The effective configuration as plain data (for ``lakecluster config`` and logs)."""

    def plain(v: Any) -> Any:
        if dataclasses.is_dataclass(v) and not isinstance(v, type):
            return {f.name: plain(getattr(v, f.name)) for f in dataclasses.fields(v)}
        if isinstance(v, Mapping):
            return {k: plain(x) for k, x in v.items()}
        if isinstance(v, tuple):
            return [plain(x) for x in v]
        return v

    return plain(config)
