"""Typed, frozen configuration: sections with defaults, loading, validation, description.

Precedence (later wins): built-in defaults < ``--config`` TOML file < ``LAKECLUSTER_*`` environment
variables (``__`` separates levels: ``LAKECLUSTER_SOURCE__KAFKA__BOOTSTRAP_SERVERS``) < ``--set
key=value`` flags. Everything is validated before Spark starts; a bad key or value raises
:class:`~lakecluster.errors.ConfigError` naming the key. Every key is documented in
``docs/configuration.md``.
"""

from lakecluster.config.describe import REDACTED, describe, is_secret
from lakecluster.config.load import ENV_PREFIX, TEST_ENV_PREFIX, config_origins, load_config, locate, parse_overrides
from lakecluster.config.sections import (
    DEFAULT_COLUMNS,
    MAX_CLUSTERING_COLUMNS,
    CompactionConfig,
    Config,
    GeneratorSourceConfig,
    IndexConfig,
    KafkaSourceConfig,
    MetricsConfig,
    RecordsConfig,
    RetryConfig,
    SchemaRegistryConfig,
    SketchConfig,
    SourceConfig,
    SourceSection,
    SparkConfig,
    StorageConfig,
    StreamConfig,
    TableConfig,
    VacuumConfig,
    WorkloadConfig,
)
from lakecluster.config.validate import MIN_RETENTION_HOURS, parse_starting_offsets, validate

__all__ = [
    "DEFAULT_COLUMNS",
    "ENV_PREFIX",
    "MAX_CLUSTERING_COLUMNS",
    "MIN_RETENTION_HOURS",
    "REDACTED",
    "TEST_ENV_PREFIX",
    "CompactionConfig",
    "Config",
    "GeneratorSourceConfig",
    "IndexConfig",
    "KafkaSourceConfig",
    "MetricsConfig",
    "RecordsConfig",
    "RetryConfig",
    "SchemaRegistryConfig",
    "SketchConfig",
    "SourceConfig",
    "SourceSection",
    "SparkConfig",
    "StorageConfig",
    "StreamConfig",
    "TableConfig",
    "VacuumConfig",
    "WorkloadConfig",
    "config_origins",
    "describe",
    "is_secret",
    "load_config",
    "locate",
    "parse_overrides",
    "parse_starting_offsets",
    "validate",
]
