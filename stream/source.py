"""Where a stream's records come from: the :class:`Source` protocol, and the one place that picks
the implementation for a configuration (:func:`open_source`).

Everything that differs between sources is asked of the source object: its checks before Spark
starts, the streaming DataFrame, how a stream resumed from the table's recorded offsets starts,
lag, and what the progress line and the metrics say about it. A new source (a file source, say)
is a class implementing :class:`Source` plus a config section and a line in ``_SOURCES``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

from lakecluster.config import Config, GeneratorSourceConfig, KafkaSourceConfig, SourceSection

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from lakecluster.table import LakeTable


class Source(Protocol):
    """A stream's source of records."""

    kind: str  # recorded in every commit's metadata ("kafka", "generator")
    # Records arrive as raw values (JSON) that can be malformed: they are parsed, and the ones that
    # cannot be are written to the quarantine table. False: typed rows, never quarantined.
    quarantines: bool

    def describe(self) -> str:
        """What the source reads, for the service's start line (``kafka broker:9092 [orders]``)."""
        ...

    def check(self) -> None:
        """Checks before Spark starts (a broker answers, the topics exist); raises a
        :class:`~lakecluster.errors.LakeclusterError` saying what to fix."""
        ...

    def configured_offsets(self) -> str:
        """Where a stream the table has never seen starts (Spark's ``startingOffsets``)."""
        ...

    def resume_offsets(self) -> Callable[[str], str] | None:
        """Turns offsets the table recorded (JSON) into what the source starts from; None: as recorded."""
        ...

    def frame(self, spark: SparkSession, starting_offsets: str | None) -> DataFrame:
        """The streaming DataFrame (``starting_offsets``: resume there, not where the checkpoint says)."""
        ...

    def start(self, table: LakeTable) -> None:
        """The stream runs (its tables exist): start what measures the source (lag)."""
        ...

    def committed(self, offsets: str | None) -> None:
        """A micro-batch committed the records up to ``offsets`` (the source's JSON)."""
        ...

    def stop(self) -> None:
        ...

    def lag(self) -> int | None:
        """Records the source holds that the table has not committed, as last measured (None: unknown)."""
        ...

    def measure_lag(self, table: LakeTable, timeout_s: float) -> dict[str, Any] | None:
        """Lag measured now, for ``lakecluster status`` (``{"records", "partitions"}`` or
        ``{"error"}``); None: the source has no lag to measure."""
        ...


def open_source(config: Config) -> Source:
    """The source ``config`` configures, its settings checked against the table's columns.

    Raises:
        ConfigError: a setting the source cannot honour (naming the key).
    """
    section: SourceSection = config.source.selected
    return _SOURCES[type(section)](config)


def _kafka(config: Config) -> Source:
    from lakecluster.stream.kafka_source import KafkaSource

    return KafkaSource(config)


def _generator(config: Config) -> Source:
    from lakecluster.stream.generator_source import GeneratorSource

    return GeneratorSource(config)


# The config section of each source (``source.kind`` chooses the section) and its implementation.
_SOURCES: dict[type, Callable[[Config], Source]] = {KafkaSourceConfig: _kafka, GeneratorSourceConfig: _generator}
