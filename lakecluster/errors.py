"""The project's exception hierarchy: one base class, subclasses named for the failure."""

from __future__ import annotations


class LakeclusterError(Exception):
    """Base class of every error lakecluster raises on purpose."""


class ConfigError(LakeclusterError, ValueError):
    """A configuration key is unknown, missing, or has a bad value."""

    def __init__(self, key: str, message: str) -> None:
        self.key = key
        super().__init__(f"config key '{key}': {message}")


class JarResolutionError(LakeclusterError):
    """The JVM jars Spark needs cannot be resolved, compiled or found (Java, Maven Central)."""


class SourceError(LakeclusterError):
    """The record source cannot be read."""


class BrokerUnavailableError(SourceError):
    """No Kafka broker answered after the configured retries."""


class KafkaLoginError(BrokerUnavailableError):
    """A Kafka broker answered but refused the configured SASL login."""


class TopicNotFoundError(SourceError):
    """A configured Kafka topic (or pattern) matches no topic on the broker."""


class DataLossError(SourceError):
    """Offsets the stream still had to read are gone from the broker (retention, truncation)."""


class TableError(LakeclusterError):
    """The Delta table cannot be created, opened or written."""


class StorageError(LakeclusterError):
    """The object store refused or could not serve a request; ``cause`` names why, ``hint`` what to do."""

    def __init__(self, location: str, cause: str, hint: str, detail: str = "") -> None:
        self.location = location
        self.cause = cause
        self.hint = hint
        self.detail = detail
        where = f" ({detail})" if detail else ""
        super().__init__(f"{location}: {cause}{where}; {hint}")


class TableNotFoundError(TableError):
    """No Delta table exists at the location (read-only commands never create one)."""

    def __init__(self, uri: str) -> None:
        self.uri = uri
        super().__init__(f"no Delta table at {uri} (check table.path; the stream creates it on its first run)")


class TableNotWritableError(TableError):
    """The table location cannot be written to."""


class SchemaMismatchError(TableError):
    """The schema in the config disagrees with the schema of the existing table."""

    def __init__(self, table: str, differences: list[str]) -> None:
        self.table = table
        self.differences = differences
        super().__init__(f"schema of existing table {table} disagrees with the config: " + "; ".join(differences))


class CheckpointError(LakeclusterError):
    """The stream's checkpoint cannot be used as it is (written by another stream or program)."""


class LeaseHeldError(LakeclusterError):
    """Another process already runs this stream (or holds the lease it needs)."""


class FatalServiceError(LakeclusterError):
    """A service met a fault that retrying cannot fix; it stops with a non-zero exit code."""


class RetentionError(LakeclusterError):
    """A vacuum retention Delta cannot honour exactly (not a whole number of hours)."""


class SketchStoreError(LakeclusterError):
    """A persisted boundary-sketch file is missing, unreadable or inconsistent."""


class CompactionConflictError(LakeclusterError):
    """A compaction's input files were removed by someone else (e.g. a second compactor)."""


class NoBoundariesError(LakeclusterError):
    """The table has no boundary sketches yet (the stream writes them)."""


class StatsIndexError(LakeclusterError):
    """The column-stats index is missing, unreadable, stale or inconsistent (it can be rebuilt)."""


class PredicateError(LakeclusterError, ValueError):
    """A where-clause cannot be parsed or typed; carries the character position of the problem."""

    def __init__(self, message: str, text: str = "", position: int | None = None) -> None:
        self.message = message
        self.text = text
        self.position = position
        where = ""
        if position is not None and text:
            # The clause with a caret under the offending character: the quickest way to see it.
            where = f" at position {position}\n  {text}\n  {' ' * position}^"
        elif position is not None:
            where = f" at position {position}"
        super().__init__(f"{message}{where}")


class UnknownColumnError(PredicateError):
    """A where-clause names a column the table does not have; the message lists the known ones."""

    def __init__(self, column: str, known: list[str], text: str = "", position: int | None = None) -> None:
        self.column = column
        self.known = known
        super().__init__(f"unknown column '{column}'; known columns: {', '.join(known)}", text, position)
