"""Validation: relations between keys, checked once at load, each error naming its key; a check
between keys names the other keys too (``related``) and shows every value it compared."""

from __future__ import annotations

import json
import os
import re

from lakecluster.config.sections import (
    MAX_CLUSTERING_COLUMNS,
    CompactionConfig,
    Config,
    GeneratorSourceConfig,
    IndexConfig,
    KafkaSourceConfig,
    SchemaRegistryConfig,
    TableConfig,
    WorkloadConfig,
)
from lakecluster.errors import ConfigError
from lakecluster.schema import validate_type
from lakecluster.sizes import human_bytes
from lakecluster.suggest import did_you_mean

_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_STREAM_ID = re.compile(r"^[A-Za-z0-9_.:-]{1,100}$")
_TABLE_NAME = _STREAM_ID  # a label value on every series: short and plain
# Below this, vacuum could delete files that a running rewrite or a slow reader still needs.
MIN_RETENTION_HOURS = 168.0


def validate(config: Config) -> None:
    _validate_table(config.table)
    t = config.table
    s = config.stream
    if s.trigger_interval_s < 0:
        raise ConfigError("stream.trigger_interval_s", "must be >= 0")
    if s.max_records_per_file < 0:
        raise ConfigError("stream.max_records_per_file", "must be >= 0 (0: no limit)")
    if s.write_buffer_bytes < 1 << 20:
        raise ConfigError("stream.write_buffer_bytes", f"must be >= 1048576 (1 MiB), got {s.write_buffer_bytes}")
    _positive("stream.source_wait_warning_s", s.source_wait_warning_s)
    if s.stop_timeout_s < 0:
        raise ConfigError("stream.stop_timeout_s", "must be >= 0 (0: abandon the micro-batch in flight at once)")
    if s.stop_timeout_s > MAX_STOP_TIMEOUT_S:
        raise ConfigError("stream.stop_timeout_s",
                          f"must be at most {MAX_STOP_TIMEOUT_S:g} s, got {s.stop_timeout_s:g}")  # fmt: skip
    if s.lag_interval_s < 0:
        raise ConfigError("stream.lag_interval_s", "must be >= 0 (0: off)")
    if s.schema_evolution_min_records < 1:
        raise ConfigError("stream.schema_evolution_min_records", f"must be >= 1, got {s.schema_evolution_min_records}")
    if s.id is not None and not _STREAM_ID.match(s.id):
        raise ConfigError("stream.id", f"1-100 characters of letters, digits and _.:- ; got {s.id!r}")

    r = config.records
    for key in ("max_record_bytes", "max_depth", "max_string_chars"):
        _positive(f"records.{key}", getattr(r, key))
    if r.max_depth > 512:
        raise ConfigError("records.max_depth", f"must be at most 512 (the exact parser recurses), got {r.max_depth}")
    for key in ("max_record_bytes", "max_string_chars"):
        if getattr(r, key) > 1 << 30:
            raise ConfigError(f"records.{key}", f"must be at most 1 GiB, got {getattr(r, key)}")

    k = config.sketches
    if not 8 <= k.k <= 65535:
        raise ConfigError("sketches.k", f"must be 8..65535, got {k.k}")
    if not 2 <= k.boundaries <= 1 << 20:
        raise ConfigError("sketches.boundaries", f"must be 2..1048576, got {k.boundaries}")
    _positive("sketches.retain_versions", k.retain_versions)
    if not 8 <= k.max_string_chars <= 4096:
        raise ConfigError("sketches.max_string_chars", f"must be 8..4096, got {k.max_string_chars}")

    _validate_compaction(config.compaction, t)
    v = config.vacuum
    if v.interval_s < 0:
        raise ConfigError("vacuum.interval_s", "must be >= 0 (0 turns the scheduled vacuum off)")
    _positive("vacuum.retention_hours", v.retention_hours)
    if v.retention_hours != int(v.retention_hours):
        raise ConfigError("vacuum.retention_hours", f"must be a whole number of hours, got {v.retention_hours:g} "
                                                    "(Delta's VACUUM rounds the retention to whole hours: 0.4 would "
                                                    "become 0 and delete files a concurrent writer just committed)")
    if v.retention_hours < MIN_RETENTION_HOURS and not v.force:
        raise ConfigError(
            "vacuum.retention_hours",
            f"{v.retention_hours:g} h is below {MIN_RETENTION_HOURS:g} h: files a running rewrite or a slow "
            "reader still needs could be deleted; set vacuum.force = true if you are sure",
            related=("vacuum.force",),
        )
    if v.quarantine_retention_days < 0:
        raise ConfigError("vacuum.quarantine_retention_days", "must be >= 0 (0 keeps quarantined records for good), "
                          f"got {v.quarantine_retention_days:g}")  # fmt: skip
    _validate_index(config.index, t)
    _validate_workload(config.workload)
    rt = config.retry
    _positive("retry.initial_backoff_s", rt.initial_backoff_s)
    if rt.max_backoff_s < rt.initial_backoff_s:
        raise ConfigError("retry.max_backoff_s", f"{rt.max_backoff_s:g} must be >= retry.initial_backoff_s "
                          f"{rt.initial_backoff_s:g}", related=("retry.initial_backoff_s",))  # fmt: skip
    if rt.give_up_after_s < 0:
        raise ConfigError("retry.give_up_after_s", "must be >= 0 (0 retries transient faults forever)")
    if not 0 <= config.metrics.port <= 65535:
        raise ConfigError("metrics.port", f"must be 0 (off) or a TCP port, got {config.metrics.port}")
    if config.metrics.table_interval_s < 0:
        raise ConfigError("metrics.table_interval_s", f"must be >= 0 (0: after each round only), got "
                          f"{config.metrics.table_interval_s}")  # fmt: skip
    if not config.metrics.host.strip():
        raise ConfigError("metrics.host", "must not be empty (127.0.0.1 serves this machine only)")

    section = config.source.selected
    if config.source.kafka.format == "avro" and not isinstance(section, KafkaSourceConfig):
        raise ConfigError("source.kafka.format", f"avro needs source.kind = \"kafka\" (the {config.source.kind} "
                          "source yields typed rows, not records)", related=("source.kind",))  # fmt: skip
    if isinstance(section, KafkaSourceConfig):
        _validate_kafka(section)
    else:
        _validate_generator(section)


def _validate_table(t: TableConfig) -> None:
    if not t.path.strip():
        raise ConfigError("table.path", "must not be empty")
    if t.name is not None and not _TABLE_NAME.match(t.name):
        raise ConfigError("table.name", f"1-100 characters of letters, digits and _.:- ; got {t.name!r}")
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
    for list_key, listed in (("partition_by", t.partition_by), ("clustering_columns", t.clustering_columns)):
        for name in listed:
            if name not in names:
                raise ConfigError(f"table.{list_key}", f"unknown column '{name}'{did_you_mean(name, names)}; "
                                                       f"columns: {', '.join(names)}")  # fmt: skip
    if not 1 <= len(t.clustering_columns) <= MAX_CLUSTERING_COLUMNS:
        raise ConfigError("table.clustering_columns", f"give 1 to {MAX_CLUSTERING_COLUMNS} columns")
    overlap = set(t.partition_by) & set(t.clustering_columns)
    if overlap:
        raise ConfigError("table.clustering_columns", f"{sorted(overlap)} are partition columns (table.partition_by "
                          f"= {list(t.partition_by)}): a partition column has one value per file",
                          related=("table.partition_by",))  # fmt: skip


def _validate_compaction(c: CompactionConfig, t: TableConfig) -> None:
    for name, value in c.column_weights.items():
        if name not in t.clustering_columns:
            known = ", ".join(t.clustering_columns)
            hint = did_you_mean(name, t.clustering_columns)
            raise ConfigError(f"compaction.column_weights.{name}", f"not a clustering column{hint}; table.clustering_"
                              f"columns: {known}", related=("table.clustering_columns",))  # fmt: skip
        try:
            ok = float(value) > 0
        except ValueError:
            ok = False
        if not ok:
            raise ConfigError(f"compaction.column_weights.{name}", f"must be a number > 0, got {value!r}")
    for key in ("interval_s", "target_file_bytes", "min_file_bytes", "max_group_bytes", "max_groups_per_run",
                "min_input_files", "max_generation"):  # fmt: skip
        _positive(f"compaction.{key}", getattr(c, key))
    if c.stop_timeout_s < 0:
        raise ConfigError("compaction.stop_timeout_s", "must be >= 0 (0: abandon the group in flight at once)")
    if c.stop_timeout_s > MAX_STOP_TIMEOUT_S:
        raise ConfigError("compaction.stop_timeout_s",
                          f"must be at most {MAX_STOP_TIMEOUT_S:g} s, got {c.stop_timeout_s:g}")  # fmt: skip
    if c.min_file_bytes > c.target_file_bytes:
        raise ConfigError("compaction.min_file_bytes", f"{_size(c.min_file_bytes)} must be <= compaction.target_file_"
                          f"bytes {_size(c.target_file_bytes)}", related=("compaction.target_file_bytes",))  # fmt: skip
    if c.max_group_bytes < c.target_file_bytes:
        raise ConfigError("compaction.max_group_bytes", f"{_size(c.max_group_bytes)} must be >= compaction.target_"
                          f"file_bytes {_size(c.target_file_bytes)}",
                          related=("compaction.target_file_bytes",))  # fmt: skip
    if c.task_memory_bytes < 16 << 20:
        raise ConfigError("compaction.task_memory_bytes", f"must be at least 16 MiB, got {_size(c.task_memory_bytes)}")
    if c.local_rewrite_max_bytes < 0:
        raise ConfigError("compaction.local_rewrite_max_bytes", f"must be >= 0, got {c.local_rewrite_max_bytes}")
    if c.merge_fanout < 2:
        raise ConfigError("compaction.merge_fanout", f"must be >= 2, got {c.merge_fanout}")
    if c.forget_interval_s < 0:
        raise ConfigError("compaction.forget_interval_s", f"must be >= 0 (seconds), got {c.forget_interval_s:g}")
    if not 0 < c.purge_deleted_share <= 1:
        raise ConfigError("compaction.purge_deleted_share", "must be > 0 and <= 1 (the share of a file's rows its "
                          f"deletion vector deletes before the file is purged), got {c.purge_deleted_share:g}")
    if c.main_run_merge_ratio < 0:
        raise ConfigError("compaction.main_run_merge_ratio", "must be >= 0 (0: off; 0.5: a partition is merged into "
                          f"its main run when half its bytes are outside it), got {c.main_run_merge_ratio:g}")
    if not 0 < c.auto_layout_max_cost_share <= 1:
        raise ConfigError("compaction.auto_layout_max_cost_share", "must be > 0 and <= 1 (0.05: at most 5 % of the "
                          f"compactor's time spent scoring layouts), got {c.auto_layout_max_cost_share}")  # fmt: skip
    if not 0 < c.auto_layout_min_gain <= 1:
        raise ConfigError("compaction.auto_layout_min_gain", "must be > 0 and <= 1 (0.2: 20 % fewer files read), "
                          f"got {c.auto_layout_min_gain}")  # fmt: skip
    for key in ("auto_layout_min_scans", "auto_layout_confirmations",
                "auto_layout_interval_s", "auto_layout_window_s", "auto_layout_sample_rows",
                "rewrite_budget_bytes_per_day", "rewrite_budget_window_s"):  # fmt: skip
        _positive(f"compaction.{key}", getattr(c, key))
    for key in ("auto_layout_min_span_s", "auto_layout_half_life_s"):
        if getattr(c, key) < 0:
            raise ConfigError(f"compaction.{key}", f"must be >= 0, got {getattr(c, key)}")


def _validate_index(c: IndexConfig, t: TableConfig) -> None:
    names = [col.name for col in t.columns]
    for i, name in enumerate(c.columns):
        if name not in names:
            raise ConfigError(f"index.columns[{i}]", f"unknown column '{name}'{did_you_mean(name, names)}; "
                                                     f"columns: {', '.join(names)}")  # fmt: skip
    if c.path is not None and not c.path.strip():
        raise ConfigError("index.path", "must not be empty (leave it unset for <table.path>/_lakecluster/index)")
    for key in ("max_columns", "row_group_rows", "max_segments"):
        _positive(f"index.{key}", getattr(c, key))
    if c.gc_grace_s < 0:
        raise ConfigError("index.gc_grace_s", "must be >= 0")


def _size(n: int) -> str:
    """A byte count as a cross-key error shows it: exact, and in binary units when large."""
    return f"{n:,}" if n < 1024 else f"{n:,} ({human_bytes(n)})"


# A stop waits at most this long for work in flight (a supervisor's grace period is minutes at most).
MAX_STOP_TIMEOUT_S = 3600.0


def _validate_workload(w: WorkloadConfig) -> None:
    for key in ("retention_days", "flush_interval_s", "flush_records"):
        _positive(f"workload.{key}", getattr(w, key))
    if w.max_file_bytes < 4096:
        raise ConfigError("workload.max_file_bytes", f"must be >= 4096, got {w.max_file_bytes}")
    for key in ("max_bytes", "max_bytes_per_app_day"):
        if getattr(w, key) < w.max_file_bytes:
            raise ConfigError(f"workload.{key}", f"must be >= workload.max_file_bytes ({w.max_file_bytes}), "
                              f"got {getattr(w, key)}", related=("workload.max_file_bytes",))
    if not 0 <= w.max_in_values <= 100_000:
        raise ConfigError("workload.max_in_values", f"must be 0..100000, got {w.max_in_values}")


def _positive(key: str, value: float | None) -> None:
    if value is not None and value <= 0:
        raise ConfigError(key, f"must be > 0, got {value}")


def _validate_kafka(kc: KafkaSourceConfig) -> None:
    if not kc.bootstrap_servers.strip():
        raise ConfigError("source.kafka.bootstrap_servers", "must not be empty")
    if bool(kc.topics) == bool(kc.topic_pattern):
        raise ConfigError("source.kafka.topics", f"set exactly one of topics or topic_pattern (topics = "
                          f"{list(kc.topics)}, topic_pattern = {kc.topic_pattern!r})",
                          related=("source.kafka.topic_pattern",))  # fmt: skip
    if kc.topic_pattern:
        try:
            re.compile(kc.topic_pattern)
        except re.error as e:
            raise ConfigError("source.kafka.topic_pattern", f"not a valid regex: {e}") from None
    parse_starting_offsets(kc.starting_offsets)
    _positive("source.kafka.max_offsets_per_trigger", kc.max_offsets_per_trigger)
    _positive("source.kafka.min_partitions", kc.min_partitions)
    _positive("source.kafka.connect_timeout_s", kc.connect_timeout_s)
    for name in kc.options:
        if name.startswith("kafka."):
            raise ConfigError(f"source.kafka.options.{name}", f"give Kafka client properties without the "
                                                              f"'kafka.' prefix: {name[6:]}")  # fmt: skip
        if "_" in name and "." not in name:  # kafka-python's spelling (security_protocol): Spark would ignore it
            raise ConfigError(f"source.kafka.options.{name}", "give Kafka client properties under their Java names, "
                                                              f"with dots: {name.replace('_', '.')!r}")  # fmt: skip
    if kc.format == "avro":
        _validate_schema_registry(kc.schema_registry)


def _validate_schema_registry(sr: SchemaRegistryConfig) -> None:
    key = "source.kafka.schema_registry"
    if not sr.urls:
        raise ConfigError(f"{key}.url", "set the schema registry's URL: Avro records name their writer schema by id",
                          related=("source.kafka.format",))  # fmt: skip
    for url in sr.urls:
        if not url.startswith(("http://", "https://")):
            raise ConfigError(f"{key}.url", f"expected http:// or https:// URLs, got {url!r}")
    if (sr.basic_auth_user is None) != (sr.basic_auth_password is None):
        raise ConfigError(f"{key}.basic_auth_password", "set both basic_auth_user and basic_auth_password, or neither",
                          related=(f"{key}.basic_auth_user",))  # fmt: skip
    if sr.key_file is not None and sr.cert_file is None:
        raise ConfigError(f"{key}.key_file", "a client key needs its certificate (cert_file)",
                          related=(f"{key}.cert_file",))  # fmt: skip
    for name in ("ca_file", "cert_file", "key_file"):
        path = getattr(sr, name)
        if path is not None and not os.path.isfile(path):
            raise ConfigError(f"{key}.{name}", f"no such file: {path}")
    _positive(f"{key}.timeout_s", sr.timeout_s)


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


def _validate_generator(gc: GeneratorSourceConfig) -> None:
    """The generator's own keys (which columns it can produce, the stream's generator source checks)."""
    _positive("source.generator.rows_per_second", gc.rows_per_second)
    _positive("source.generator.partitions", gc.partitions)
    _positive("source.generator.max_rows", gc.max_rows)
    _positive("source.generator.max_rows_per_trigger", gc.max_rows_per_trigger)
    if gc.brand_skew < 0:
        raise ConfigError("source.generator.brand_skew", "must be >= 0 (0 = uniform, 1 = Zipf)")
    if not 0 < gc.scale_factor <= 1_000:  # 30 M customers: what one worker holds in memory comfortably
        raise ConfigError("source.generator.scale_factor", f"must be > 0 and <= 1000, got {gc.scale_factor}")
