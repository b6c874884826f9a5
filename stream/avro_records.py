"""The writer schemas a stream of Avro records has met, the plans that read them, and the registry
they come from.

A micro-batch is decoded in one pass with the plans of the schema ids met so far
(:meth:`AvroRecords.decode`). Its tasks count the records of every schema id; an id the stream
had not met (a producer's new schema version) is then asked of the registry
(:meth:`AvroRecords.learn`). When the registry knows it, the pass read those records as of an
unknown id, so the batch is decoded again with the new plan before anything is committed: a
second pass only in the batch where a schema version first shows up. When the registry answers
that it has no such id, the records stay quarantined (``unknown_schema_id``); when it does not
answer, the batch fails and the stream retries it (a transient fault), quarantining nothing.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING

from lakecluster import metrics
from lakecluster.config import Config
from lakecluster.schema import ColumnSpec
from lakecluster.stream.avro import Decoder, SchemaPlan, plan_schema
from lakecluster.stream.parse import ParseLimits
from lakecluster.stream.schema_registry import (
    SchemaRegistryClient,
    SchemaRegistryUnavailableError,
    UnknownSchemaIdError,
    subject_name,
)

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

log = logging.getLogger(__name__)


class NewSchemasMet(Exception):
    """A pass met schema ids the registry has just told: the batch is decoded again."""

    def __init__(self, schema_ids: list[int]) -> None:
        super().__init__(schema_ids)
        self.schema_ids = schema_ids


class AvroRecords:
    """Plans by schema id for the table's ``columns``, learned from ``client``."""

    def __init__(self, client: SchemaRegistryClient, columns: Sequence[ColumnSpec], limits: ParseLimits) -> None:
        self.client = client
        self.columns = tuple(columns)
        self.limits = limits
        self.plans: dict[int, SchemaPlan] = {}
        self.writers: dict[int, object] = {}  # id -> the writer schema (parsed), to plan again
        self.unknown: set[int] = set()  # ids the registry said it does not have (an id is never reused)
        self.versions: dict[int, list[tuple[str, int]]] = {}  # id -> (subject, version) pairs, as registered
        self._decoder: tuple[tuple[str, ...], Decoder] | None = None  # for the source's columns, until a plan changes

    @classmethod
    def of(cls, config: Config, limits: ParseLimits) -> AvroRecords | None:
        """The stream's Avro records, or None when its records are JSON or typed rows."""
        kafka = config.source.kafka
        if config.source.kind != "kafka" or kafka.format != "avro":
            return None
        sr = kafka.schema_registry
        client = SchemaRegistryClient(sr.urls, user=sr.basic_auth_user, password=sr.basic_auth_password,
                                      ca_file=sr.ca_file, cert_file=sr.cert_file, key_file=sr.key_file,
                                      timeout_s=sr.timeout_s)  # fmt: skip
        return cls(client, config.table.columns, limits)

    def _answered(self, up: bool) -> None:
        metrics.SCHEMA_REGISTRY_UP.labels(",".join(self.client.urls)).set(1 if up else 0)

    def prefetch(self, topics: Iterable[str], strategy: str) -> None:
        """Plans for the newest schema of each topic's subject (``topic_name`` strategy), so that the
        first batch needs no second pass; a registry out of reach now is left to the first batch."""
        if strategy != "topic_name":
            return
        for topic in topics:
            try:
                latest = self.client.latest(subject_name("topic_name", topic))
            except SchemaRegistryUnavailableError as error:
                self._answered(False)
                log.warning("schema registry: %s; the first batch asks again", error)
                return
            self._answered(True)
            if latest is not None:
                _, schema_id, schema = latest
                self._plan(schema_id, schema.parsed)

    def decode(self, frame: DataFrame) -> DataFrame:
        """``frame``'s records decoded with the plans learned so far (stream/avro.py, ``decode``)."""
        source = tuple(frame.columns)
        if self._decoder is None or self._decoder[0] != source:
            self._decoder = (source, Decoder.of(source, "value", self.plans, self.columns,
                                                max_record_bytes=self.limits.max_record_bytes,
                                                max_string_chars=self.limits.max_string_chars))  # fmt: skip
        return self._decoder[1](frame)

    def learn(self, schema_ids: Iterable[int]) -> list[int]:
        """Asks the registry for the ids not met before; returns those it knows (the batch must be
        decoded again). Raises :class:`SchemaRegistryUnavailableError` when it does not answer."""
        learned = []
        for schema_id in sorted(set(schema_ids) - set(self.plans) - self.unknown):
            try:
                schema = self.client.schema(schema_id)
            except UnknownSchemaIdError:
                self._answered(True)
                self.unknown.add(schema_id)
                continue
            except SchemaRegistryUnavailableError:
                self._answered(False)
                raise
            self._answered(True)
            self._plan(schema_id, schema.parsed)
            learned.append(schema_id)
        return learned

    def check(self, schema_ids: Iterable[int]) -> None:
        """Raises :class:`NewSchemasMet` when :meth:`learn` learns any of ``schema_ids`` (a pass
        read their records as of unknown ids: nothing of it may be committed)."""
        learned = self.learn(schema_ids)
        if learned:
            raise NewSchemasMet(learned)

    def describe(self, counts: Mapping[int, int]) -> dict[str, dict[str, object]]:
        """The schema ids of a batch (its records per id) with the subjects and versions they are
        registered as, and the reason code of a schema whose records go to quarantine."""
        out: dict[str, dict[str, object]] = {}
        for schema_id, records in sorted(counts.items()):
            plan = self.plans.get(schema_id)
            out[str(schema_id)] = {
                "records": records,
                "versions": [f"{subject} v{version}" for subject, version in self.versions.get(schema_id, [])],
                "refused": None if plan is None else plan.refusal and plan.refusal[0].value,
                "reason": None if plan is None or plan.refusal is None else plan.refusal[1],
                "unknown": schema_id in self.unknown,
            }
        return out

    def set_columns(self, columns: Sequence[ColumnSpec]) -> None:
        """Reads the table's ``columns`` from now on: every schema met is planned again."""
        self.columns = tuple(columns)
        for schema_id, writer in self.writers.items():
            self.plans[schema_id] = plan_schema(schema_id, writer, self.columns)
        self._decoder = None

    def unseen(self, counts: Mapping[int, int]) -> dict[tuple[str, str], int]:
        """The fields of the writer schemas of a batch's records that are no column: ``(field,
        column type or "unsupported") -> records`` of the schemas that have it."""
        out: dict[tuple[str, str], int] = {}
        for schema_id, records in counts.items():
            plan = self.plans.get(schema_id)
            for key in plan.unseen if plan is not None else ():
                out[key] = out.get(key, 0) + records
        return out

    def _plan(self, schema_id: int, writer: object) -> None:
        self.writers[schema_id] = writer
        try:
            self.versions[schema_id] = self.client.versions_of(schema_id)
        except SchemaRegistryUnavailableError:  # only a name for status: the plan needs none
            self.versions[schema_id] = []
        plan = plan_schema(schema_id, writer, self.columns)
        if plan.refusal is not None:
            log.warning("schema %d cannot be read into the table, its records go to quarantine: %s", schema_id,
                        plan.refusal[1])  # fmt: skip
        self.plans[schema_id] = plan
        self._decoder = None
