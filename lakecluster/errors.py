"""The project's exception hierarchy: one base class, subclasses named for the failure."""

from __future__ import annotations

from lakecluster.suggest import did_you_mean


class LakeclusterError(Exception):
    """Base class of every error lakecluster raises on purpose."""


class InputError(LakeclusterError, ValueError):
    """The user's input is wrong: a configuration key, a flag's value, a where-clause, a query file.

    The command exits with status 2 and one line naming where the input came from (:attr:`source`:
    a file and line, ``--set key``, an environment variable, a flag), set by whoever knows it.
    """

    source: str | None = None

    def one_line(self) -> str:
        """The error as the command line prints it: its source, then what is wrong, on one line."""
        return f"{self.source}: {self}" if self.source else str(self)


class ConfigError(InputError):
    """A configuration key is unknown, missing, or has a bad value.

    ``related`` names the other keys of a check between keys (their sources are named too);
    ``suggestion`` is the known key nearest to an unknown one.
    """

    def __init__(self, key: str, message: str, *, related: tuple[str, ...] = (), suggestion: str | None = None) -> None:
        self.key = key
        self.related = related
        self.suggestion = suggestion
        # A flag's own error (--config, --set) names no key of the configuration.
        super().__init__(message if key.startswith("-") else f"config key '{key}': {message}")

    def one_line(self) -> str:
        where = f" in {self.source}" if self.source else ""
        return f"configuration error{where}: {self}"


class UsageError(InputError):
    """A command-line flag has a value the command cannot use (the flag is the :attr:`source`)."""

    def __init__(self, source: str, message: str) -> None:
        self.source = source
        super().__init__(message)


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


class UnsupportedTableError(TableError):
    """The table uses a Delta feature (or a form of its log) lakecluster does not handle: refused,
    never read as something else."""


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


class LeaseLostError(LakeclusterError):
    """This process no longer holds the lease it needs: another process took it over, or it could
    not be renewed in time. Nothing more is committed under it."""


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


class PredicateError(InputError):
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

    def one_line(self) -> str:
        """The message and the position in the clause, without the caret's extra lines."""
        at = f", character {self.position + 1}" if self.position is not None else ""
        return f"{self.source or 'where-clause'}{at}: {self.message}"


class UnknownColumnError(PredicateError):
    """A where-clause names a column the table does not have; the message lists the known ones."""

    def __init__(self, column: str, known: list[str], text: str = "", position: int | None = None) -> None:
        self.column = column
        self.known = known
        hint = did_you_mean(column, known)
        super().__init__(f"unknown column '{column}'{hint}; known columns: {', '.join(known)}", text, position)
