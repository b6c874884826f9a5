"""Riding out faults: which failures are worth retrying, and a capped exponential backoff.

Services (the stream, the compactor) retry transient faults (a broker or the storage unreachable
for a while, commit conflict storms) with exponential backoff capped at ``retry.max_backoff_s``,
log once when an episode starts and once when it ends, and count every retry in the metrics. A
fault that retrying cannot fix (bad configuration, schema mismatch, lost data, authorisation) or
an unknown fault that repeats without any progress in between stops the service with a non-zero
exit code.
"""

from __future__ import annotations

import logging
import random
import re
import time
from dataclasses import dataclass, field
from typing import Literal

from lakecluster.config import RetryConfig

log = logging.getLogger(__name__)
Kind = Literal["transient", "fatal", "unknown"]

_FATAL = re.compile(
    "|".join([
        r"ConfigError", r"SchemaMismatchError", r"UnsupportedTableError", r"CheckpointError", r"LeaseHeldError",
        r"TableNotFoundError",
        r"AnalysisException", r"DELTA_SCHEMA_", r"DELTA_FAILED_TO_MERGE_FIELDS", r"DELTA_NOT_NULL_",
        r"NOT_NULL_CONSTRAINT", r"DELTA_VIOLATE_CONSTRAINT", r"Some data may have been lost", r"failOnDataLoss",
        r"DataLossError",
        r"TopicAuthorizationException", r"SaslAuthenticationException", r"AuthenticationException",
        r"UNSUPPORTED_", r"ClassNotFoundException", r"NoClassDefFoundError", r"SchemaRegistryRefusedError",
    ])
)  # fmt: skip
_TRANSIENT = re.compile(
    "|".join([
        r"TimeoutException", r"[Tt]imed? ?out", r"Connection refused", r"Connection reset", r"Broken pipe",
        r"BrokerUnavailableError", r"NetworkException", r"DisconnectException", r"LEADER_NOT_AVAILABLE",
        r"NotLeaderOrFollower", r"UnknownTopicOrPartition", r"NoSuchFileException", r"AccessDeniedException",
        r"Permission denied", r"PermissionError", r"No space left", r"IOException", r"OSError", r"SocketException",
        r"ConcurrentAppendException", r"ConcurrentDeleteReadException", r"ConcurrentTransactionException",
        r"ProtocolChangedException", r"MetadataChangedException", r"ConcurrentModificationException",
        r"FileAlreadyExistsException", r"SdkClientException", r"SlowDown", r"503 ", r"ServiceUnavailable",
        r"TableNotWritableError", r"TableError", r"Python worker failed to connect back",
        r"SchemaRegistryUnavailableError",
    ])
)  # fmt: skip


FAULT_KINDS = ("transient", "fatal", "unknown")  # what classify() returns: the kind label of the metrics


def classify(text: str) -> Kind:
    """Transient, fatal or unknown, from an error's text (Spark wraps JVM and Python errors as text)."""
    if _FATAL.search(text):
        return "fatal"
    if _TRANSIENT.search(text):
        return "transient"
    return "unknown"


@dataclass
class Backoff:
    """Delays of one fault episode: ``initial * 2^n`` capped, with jitter; knows when to give up."""

    config: RetryConfig
    max_unknown: int = 3
    attempts: int = 0
    unknown_in_a_row: int = 0
    started: float | None = None
    _rng: random.Random = field(default_factory=random.Random)

    def next_delay(self, kind: Kind) -> float | None:
        """Seconds to wait before the next attempt, or None when the service should give up."""
        now = time.monotonic()
        if self.started is None:
            self.started = now
        self.attempts += 1
        if kind == "fatal":
            return None
        self.unknown_in_a_row = self.unknown_in_a_row + 1 if kind == "unknown" else 0
        if self.unknown_in_a_row >= self.max_unknown:
            return None
        if self.config.give_up_after_s and now - self.started > self.config.give_up_after_s:
            return None
        delay = min(self.config.max_backoff_s, self.config.initial_backoff_s * 2 ** (self.attempts - 1))
        return delay * (0.75 + 0.5 * self._rng.random())

    @property
    def in_episode(self) -> bool:
        return self.started is not None

    def reset(self) -> float:
        """Progress was made: the episode is over. Returns its length in seconds."""
        length = time.monotonic() - self.started if self.started is not None else 0.0
        self.attempts = 0
        self.unknown_in_a_row = 0
        self.started = None
        return length


_NOISE = ("Traceback (most recent call last)", "An exception was raised by the Python Proxy", "at ", "File \"")


def first_line(text: str) -> str:
    """The line of an error's text that says what went wrong: the first that names a known fault,
    else the first that is not a traceback header or frame (Spark wraps causes in several layers)."""
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    for line in lines:
        if (_FATAL.search(line) or _TRANSIENT.search(line)) and not line.startswith(_NOISE):
            return _clip(line)
    return _clip(next((ln for ln in lines if not ln.startswith(_NOISE)), text))


def _clip(line: str) -> str:
    return line[:300] + ("..." if len(line) > 300 else "")
