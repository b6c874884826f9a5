"""lakecluster: streaming ingestion into Delta tables, kept compact and clustered.

Shared core of the components: configuration, errors, table access (Delta log through delta-rs),
Parquet writing, boundary sketches and the CLI. Components live in ``lakecluster.stream``,
``lakecluster.compaction`` and ``lakecluster.index`` (the top-level ``stream/``, ``compaction/``
and ``index/`` folders of the repository).
"""

from lakecluster.config import Config, load_config
from lakecluster.errors import ConfigError, LakeclusterError

__all__ = ["Config", "ConfigError", "LakeclusterError", "load_config"]
__version__ = "0.1.0"
