"""The configuration's sections: typed, frozen, with their defaults.

Every key is documented in docs/configuration.md; ``tests/lakecluster/test_config.py`` checks that
the documentation lists exactly the keys defined here, with these defaults.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

from lakecluster.schema import ColumnSpec

MAX_CLUSTERING_COLUMNS = 8

# table.columns by default: an SSB-like lineorder row joined with its dimensions (the built-in
# generator's 18 most used columns; lakecluster.stream.ssb has every column it can produce).
DEFAULT_COLUMNS: tuple[ColumnSpec, ...] = (
    ColumnSpec("lo_orderkey", "long", required=True),
    ColumnSpec("lo_linenumber", "int"),
    ColumnSpec("lo_orderdate", "date"),
    ColumnSpec("d_year", "int"),
    ColumnSpec("event_time", "timestamp"),
    ColumnSpec("c_city", "string"),
    ColumnSpec("c_nation", "string"),
    ColumnSpec("c_region", "string"),
    ColumnSpec("s_city", "string"),
    ColumnSpec("s_nation", "string"),
    ColumnSpec("s_region", "string"),
    ColumnSpec("p_brand", "string"),
    ColumnSpec("p_category", "string"),
    ColumnSpec("lo_shipmode", "string"),
    ColumnSpec("lo_quantity", "int"),
    ColumnSpec("lo_discount", "double"),
    ColumnSpec("lo_revenue", "decimal(18,2)"),
    ColumnSpec("is_returned", "boolean"),
)



@dataclass(frozen=True)
class SchemaRegistryConfig:
    """A Confluent-compatible schema registry: where records in Avro find their writer schemas."""

    url: str = ""  # comma-separated API roots, tried in turn
    basic_auth_user: str | None = None
    basic_auth_password: str | None = None
    ca_file: str | None = None  # PEM certificates trusted instead of the system's
    cert_file: str | None = None  # a client certificate (PEM) for mutual TLS ...
    key_file: str | None = None  # ... and its key
    subject_strategy: Literal["topic_name", "record_name", "topic_record_name"] = "topic_name"
    timeout_s: float = 10.0

    @property
    def urls(self) -> list[str]:
        return [u.strip() for u in self.url.split(",") if u.strip()]


@dataclass(frozen=True)
class KafkaSourceConfig:
    """Spark's Kafka source (spark-sql-kafka-0-10) and the kafka-python admin client beside it."""

    bootstrap_servers: str = "localhost:9092"
    topics: tuple[str, ...] = ()
    topic_pattern: str | None = None
    starting_offsets: str = "earliest"
    # Bounded memory: a backlog is read in micro-batches of at most this many records.
    max_offsets_per_trigger: int | None = 500_000
    min_partitions: int | None = None
    isolation_level: Literal["read_committed", "read_uncommitted"] = "read_committed"
    fail_on_data_loss: bool = True
    # Kafka client properties (Java names, e.g. "security.protocol"), passed to Spark's source as
    # kafka.<name>; the admin client (start-up checks, lag) gets the subset kafka-python knows.
    options: Mapping[str, str] = field(default_factory=dict)
    connect_timeout_s: float = 30.0
    # What a record's value holds: a JSON object, or Avro in the Confluent wire format.
    format: Literal["json", "avro"] = "json"
    schema_registry: SchemaRegistryConfig = field(default_factory=SchemaRegistryConfig)

    def identity(self) -> dict[str, object]:
        """What makes two streams from Kafka the same stream: the cluster and the topics."""
        servers = sorted(s.strip() for s in self.bootstrap_servers.split(",") if s.strip())
        return {"kind": "kafka", "servers": servers, "topics": sorted(self.topics), "pattern": self.topic_pattern}


@dataclass(frozen=True)
class GeneratorSourceConfig:
    rows_per_second: int = 20_000
    partitions: int = 2
    brand_skew: float = 0.0
    scale_factor: float = 1.0
    seed: int = 42
    max_rows: int | None = None
    max_rows_per_trigger: int | None = 500_000

    def identity(self) -> dict[str, object]:
        """What makes two streams from the generator the same stream: the seed of its rows."""
        return {"kind": "generator", "seed": self.seed}


SourceSection = KafkaSourceConfig | GeneratorSourceConfig


@dataclass(frozen=True)
class SourceConfig:
    """``source.kind`` names the section that configures the source; the others are ignored."""

    kind: Literal["generator", "kafka"] = "generator"
    kafka: KafkaSourceConfig = field(default_factory=KafkaSourceConfig)
    generator: GeneratorSourceConfig = field(default_factory=GeneratorSourceConfig)

    @property
    def selected(self) -> SourceSection:
        """The section of ``kind`` (the one place the kind is looked up; the stream's sources are
        chosen by the type of this section)."""
        section: SourceSection = getattr(self, self.kind)
        return section

    def identity(self) -> dict[str, object]:
        """What makes two streams the same stream (``stream.id`` is derived from it)."""
        return self.selected.identity()


@dataclass(frozen=True)
class TableConfig:
    path: str = "lakecluster-data/lineorder"
    columns: tuple[ColumnSpec, ...] = DEFAULT_COLUMNS
    partition_by: tuple[str, ...] = ("d_year",)
    clustering_columns: tuple[str, ...] = ("s_city", "c_city", "p_brand")
    quarantine_path: str | None = None
    # The table's short name in metrics (their `table` label); none: the last segment of the path.
    name: str | None = None

    def column(self, name: str) -> ColumnSpec:
        return next(c for c in self.columns if c.name == name)

    def clustering_types(self) -> dict[str, str]:
        """Declared type of each clustering column."""
        return {c: self.column(c).type for c in self.clustering_columns}


@dataclass(frozen=True)
class RecordsConfig:
    """Limits of the record parser (docs/records.md): a record over one is quarantined."""

    max_record_bytes: int = 1 << 20
    max_depth: int = 64
    max_string_chars: int = 32_768


@dataclass(frozen=True)
class StreamConfig:
    trigger_interval_s: float = 5.0
    checkpoint_location: str | None = None
    # The stream's identity in the table: its commits and source offsets are recorded under it.
    id: str | None = None
    progress: bool = True
    cluster_on_write: bool = True
    # Spark's writer cuts a file after this many records; 0: one file per task and table partition.
    max_records_per_file: int = 0
    # Each task writes the files of the rows it parsed (one pass); false: Delta's writer, a second pass.
    write_in_tasks: bool = True
    # A task sorts and writes its rows in pieces of at most this many bytes (Arrow, decoded).
    write_buffer_bytes: int = 64 << 20
    # A micro-batch that waits this long for its source's offsets (broker unreachable) is reported.
    source_wait_warning_s: float = 60.0
    # Consumer lag (brokers' end offsets minus the table's committed offsets) is measured this often; 0: off.
    lag_interval_s: float = 15.0
    # On SIGTERM / Ctrl-C, how long the micro-batch in flight may take to commit before it is abandoned.
    stop_timeout_s: float = 10.0
    # A field of the records that is no column: "none" keeps its values out (a warning, a metric);
    # "add_columns" adds it to the table as a nullable column (docs/records.md, "Schema evolution").
    schema_evolution: Literal["none", "add_columns"] = "none"
    # A JSON key becomes a column once this many records carried it (an Avro field at its schema's first record).
    schema_evolution_min_records: int = 100


@dataclass(frozen=True)
class SketchConfig:
    enabled: bool = True
    k: int = 200
    boundaries: int = 1024
    retain_versions: int = 20
    max_string_chars: int = 64


@dataclass(frozen=True)
class CompactionConfig:
    """Thresholds of the compaction loop; every key is documented in docs/configuration.md."""

    curve: Literal["hilbert", "zorder"] = "hilbert"
    column_weights: Mapping[str, str] = field(default_factory=dict)
    round_cuts: bool = True
    group_by_parents: bool = True
    interval_s: float = 60.0
    target_file_bytes: int = 128 << 20
    min_file_bytes: int = 32 << 20
    max_group_bytes: int = 1 << 30
    local_rewrite_max_bytes: int = 128 << 20
    # A Spark task of a rewrite sorts and writes within this much memory, whatever the file size,
    # spilling what it receives beyond a quarter of it to spill_dir (docs/operations.md).
    task_memory_bytes: int = 512 << 20
    spill_dir: str = ""
    max_groups_per_run: int = 8
    min_input_files: int = 4
    merge_fanout: int = 4
    max_generation: int = 6
    # 0: off. Else a partition is re-clustered into one run once its bytes outside its largest run
    # reach this share of that run's (planner.py).
    main_run_merge_ratio: float = 0.0
    # Files whose deletion vector deletes at least this share of their rows are rewritten without
    # those rows, whatever their run (as Delta's REORG TABLE ... APPLY (PURGE)).
    purge_deletion_vectors: bool = True
    purge_deleted_share: float = 0.05
    # After another writer deleted rows, the sketches and the index are rebuilt from the live data
    # at most this often (compaction/erasure.py).
    forget_interval_s: float = 3600.0
    stop_timeout_s: float = 10.0
    # The layout chosen from the captured workload (docs/tuning.md, "The layout loop").
    auto_layout: Literal["off", "advise", "apply"] = "advise"
    auto_layout_partitioning: bool = False
    auto_layout_min_gain: float = 0.2
    auto_layout_confirmations: int = 2  # scorings in a row that must agree on the layout adopted
    auto_layout_min_scans: int = 100
    auto_layout_min_span_s: float = 3600.0
    auto_layout_window_s: float = 7 * 86_400.0  # the captured scans scored: the last week's
    auto_layout_half_life_s: float = 86_400.0  # a scan a day old weighs half a fresh one; 0: all alike
    auto_layout_interval_s: float = 3600.0
    auto_layout_max_cost_share: float = 0.05  # of the compactor's wall time spent scoring, at most
    auto_layout_sample_rows: int = 100_000
    # Bytes a layout change may rewrite per rolling window (24 h); none: half the table's bytes.
    rewrite_budget_bytes_per_day: int | None = None
    rewrite_budget_window_s: float = 86_400.0

    def weights(self) -> dict[str, float]:
        return {k: float(v) for k, v in self.column_weights.items()}


@dataclass(frozen=True)
class VacuumConfig:
    """Deleting files no table version within the retention period references (docs/retention.md)."""

    retention_hours: float = 168.0
    interval_s: float = 3600.0
    force: bool = False
    quarantine_retention_days: float = 30.0  # quarantined records older than this are deleted; 0: kept


@dataclass(frozen=True)
class IndexConfig:
    """The column-stats index (docs/index.md); every key is documented in docs/configuration.md."""

    enabled: bool = True
    path: str | None = None
    columns: tuple[str, ...] = ()
    max_columns: int = 32
    row_group_rows: int = 262_144
    max_segments: int = 8
    sync_after_compaction: bool = True
    sync_after_stream: bool = False
    nan_counts: Literal["assume", "scan"] = "assume"
    gc_grace_s: float = 3600.0


@dataclass(frozen=True)
class WorkloadConfig:
    """Workload capture (docs/workload.md): what the query listener records into
    ``<table>/_lakecluster/workload/``, how long it is kept and how much of it is read."""

    # Kept this long; older capture files are deleted by the compactor (with its vacuum schedule).
    retention_days: float = 30.0
    # At most this many bytes of capture files per table: the compactor deletes the oldest beyond
    # it, readers read only the newest this many.
    max_bytes: int = 64 << 20
    # The listener starts a new file at this size; readers skip a file over twice this.
    max_file_bytes: int = 1 << 20
    # The listener's own settings (spark.lakecluster.workload.*, printed by `workload --listener-conf`).
    flush_records: int = 1000
    flush_interval_s: float = 300.0
    max_in_values: int = 32
    max_bytes_per_app_day: int = 16 << 20

    @property
    def retention_s(self) -> float:
        return self.retention_days * 86_400


@dataclass(frozen=True)
class RetryConfig:
    """Transient faults (broker, storage, commit conflicts) are retried with capped backoff."""

    initial_backoff_s: float = 1.0
    max_backoff_s: float = 60.0
    # 0: retry transient faults for as long as the service runs (alerts tell operators).
    give_up_after_s: float = 0.0


@dataclass(frozen=True)
class MetricsConfig:
    port: int = 9464
    host: str = "127.0.0.1"
    # How often the compactor brings the table gauges up to date (0: only after each round).
    table_interval_s: float = 15.0


@dataclass(frozen=True)
class SparkConfig:
    master: str = "local[2]"
    conf: Mapping[str, str] = field(default_factory=dict)
    jars_cache: str | None = None
    # The JVM's own console logging; "fatal" keeps handled failures to lakecluster's one-line messages.
    log_level: Literal["off", "fatal", "error", "warn", "info", "debug"] = "fatal"
    # Extra JVM options of the driver (and executors), after lakecluster's own.
    java_options: str = ""
    # Driver starts map a class-data-sharing archive of the classes an earlier start loaded.
    class_archive: bool = True


@dataclass(frozen=True)
class StorageConfig:
    """Object storage access; unset keys fall back to the standard AWS environment variables."""

    s3_endpoint: str | None = None
    s3_region: str | None = None
    s3_access_key_id: str | None = None
    s3_secret_access_key: str | None = None
    s3_session_token: str | None = None
    s3_path_style: bool = True


@dataclass(frozen=True)
class Config:
    source: SourceConfig = field(default_factory=SourceConfig)
    table: TableConfig = field(default_factory=TableConfig)
    records: RecordsConfig = field(default_factory=RecordsConfig)
    stream: StreamConfig = field(default_factory=StreamConfig)
    sketches: SketchConfig = field(default_factory=SketchConfig)
    compaction: CompactionConfig = field(default_factory=CompactionConfig)
    vacuum: VacuumConfig = field(default_factory=VacuumConfig)
    index: IndexConfig = field(default_factory=IndexConfig)
    workload: WorkloadConfig = field(default_factory=WorkloadConfig)
    retry: RetryConfig = field(default_factory=RetryConfig)
    metrics: MetricsConfig = field(default_factory=MetricsConfig)
    spark: SparkConfig = field(default_factory=SparkConfig)
    storage: StorageConfig = field(default_factory=StorageConfig)

    @property
    def skipping_columns(self) -> tuple[str, ...]:
        """Columns the layout and the index skip files by: the clustering columns and the index's
        requested ones (the services warn when the table's properties give them no file stats)."""
        requested = self.index.columns if self.index.enabled else ()
        return tuple(dict.fromkeys((*self.table.clustering_columns, *requested)))
