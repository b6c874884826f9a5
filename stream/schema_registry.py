"""A client of a Confluent-compatible schema registry: writer schemas by id, subjects, registration.

The stream asks for the writer schema of every schema id its records carry, once per id and
process (a schema id names one schema for good, so the answer is kept). The registry's answers
fall into three kinds, which the stream treats differently: a schema; a definite "no such id"
(HTTP 404, :class:`UnknownSchemaIdError`: the records carrying that id go to quarantine); and no
answer at all (a refused connection, a timeout, a 5xx, :class:`SchemaRegistryUnavailableError`:
a fault the stream rides out with its retries, never a reason to quarantine). Several URLs are
tried in turn, as Confluent's clients do.

Subjects follow one of Confluent's naming strategies: ``topic_name`` (``<topic>-value``),
``record_name`` (the record's full name) or ``topic_record_name`` (``<topic>-<full name>``).
"""

from __future__ import annotations

import base64
import json
import ssl
import threading
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from lakecluster.errors import SourceError

SubjectStrategy = Literal["topic_name", "record_name", "topic_record_name"]
CONTENT_TYPE = "application/vnd.schemaregistry.v1+json"


class SchemaRegistryUnavailableError(SourceError):
    """No schema registry URL answered (refused, timed out, or a server error): a transient fault."""


class UnknownSchemaIdError(SourceError):
    """The registry answered that no schema has this id."""

    def __init__(self, schema_id: int) -> None:
        super().__init__(f"the schema registry has no schema with id {schema_id}")
        self.schema_id = schema_id


class SchemaRegistryRefusedError(SourceError):
    """The registry answered a request with an error that retrying will not change (a 4xx other
    than "not found": bad credentials, an incompatible schema), or its certificate is not one the
    configured trust store accepts."""


@dataclass(frozen=True)
class WriterSchema:
    """A schema as the registry keeps it: its id and its Avro text (parsed: :attr:`parsed`)."""

    schema_id: int
    text: str

    @property
    def parsed(self) -> Any:
        return json.loads(self.text)


def subject_name(strategy: SubjectStrategy, topic: str, record_name: str | None = None) -> str:
    """The subject a value schema of ``topic`` is registered under (``record_name``: the Avro
    record's full name, needed by the record strategies)."""
    if strategy == "topic_name":
        return f"{topic}-value"
    if record_name is None:
        raise ValueError(f"the {strategy} strategy needs the record's full name")
    return record_name if strategy == "record_name" else f"{topic}-{record_name}"


def record_full_name(schema: Any) -> str | None:
    """``namespace.name`` of an Avro record schema (as parsed JSON), or None for other schemas."""
    if not isinstance(schema, dict) or schema.get("type") != "record":
        return None
    name = str(schema["name"])
    namespace = schema.get("namespace")
    return name if "." in name or not namespace else f"{namespace}.{name}"


class SchemaRegistryClient:
    """Requests to one registry, reached through any of ``urls`` (tried in order, the last one
    that answered first).

    Args:
        urls: the API roots (``https://registry:8081``; Apicurio's ``.../apis/ccompat/v6``).
        user, password: HTTP basic authentication, when both are given.
        ca_file: PEM certificates to trust instead of the system's; ``cert_file`` and
            ``key_file``: a client certificate for mutual TLS.
        timeout_s: for each request to each URL.
    """

    def __init__(
        self,
        urls: Sequence[str],
        *,
        user: str | None = None,
        password: str | None = None,
        ca_file: str | None = None,
        cert_file: str | None = None,
        key_file: str | None = None,
        timeout_s: float = 10.0,
    ) -> None:
        if not urls:
            raise ValueError("no schema registry URL")
        self.urls = [u.rstrip("/") for u in urls]
        self.timeout_s = timeout_s
        self._headers = {"Accept": CONTENT_TYPE}
        if user is not None and password is not None:
            token = base64.b64encode(f"{user}:{password}".encode()).decode()
            self._headers["Authorization"] = f"Basic {token}"
        self._ssl: ssl.SSLContext | None = None
        if any(u.startswith("https:") for u in self.urls):
            self._ssl = ssl.create_default_context(cafile=ca_file)
            if cert_file is not None:
                self._ssl.load_cert_chain(cert_file, key_file)
        self._schemas: dict[int, WriterSchema] = {}
        self._lock = threading.Lock()
        self._preferred = 0

    # -- reads -------------------------------------------------------------------------------------

    def schema(self, schema_id: int) -> WriterSchema:
        """The writer schema of ``schema_id`` (asked once per id; later calls answer from memory).

        Raises:
            UnknownSchemaIdError: the registry has no such id.
            SchemaRegistryUnavailableError: no URL answered.
        """
        with self._lock:
            known = self._schemas.get(schema_id)
        if known is not None:
            return known
        try:
            answer = self._request("GET", f"/schemas/ids/{int(schema_id)}")
        except _NotFound:
            raise UnknownSchemaIdError(schema_id) from None
        found = WriterSchema(int(schema_id), str(answer["schema"]))
        with self._lock:
            self._schemas[schema_id] = found
        return found

    def known(self) -> dict[int, WriterSchema]:
        """The schemas asked for so far, by id."""
        with self._lock:
            return dict(self._schemas)

    def versions_of(self, schema_id: int) -> list[tuple[str, int]]:
        """The (subject, version) pairs registered with ``schema_id`` (empty when the registry does
        not tell)."""
        try:
            answer = self._request("GET", f"/schemas/ids/{int(schema_id)}/versions")
        except (_NotFound, SchemaRegistryRefusedError):
            return []
        return [(str(v["subject"]), int(v["version"])) for v in answer]

    def latest(self, subject: str) -> tuple[int, int, WriterSchema] | None:
        """The newest (version, id, schema) of ``subject``, or None when it has none."""
        try:
            answer = self._request("GET", f"/subjects/{urllib.parse.quote(subject, safe='')}/versions/latest")
        except _NotFound:
            return None
        schema = WriterSchema(int(answer["id"]), str(answer["schema"]))
        return int(answer["version"]), schema.schema_id, schema

    # -- writes ------------------------------------------------------------------------------------

    def register(self, subject: str, schema: Any) -> int:
        """Registers ``schema`` (Avro, as text or parsed JSON) under ``subject``; the id it has (the
        same id again for a schema registered before)."""
        text = schema if isinstance(schema, str) else json.dumps(schema)
        answer = self._request("POST", f"/subjects/{urllib.parse.quote(subject, safe='')}/versions",
                               {"schema": text})  # fmt: skip
        schema_id = int(answer["id"])
        with self._lock:
            self._schemas.setdefault(schema_id, WriterSchema(schema_id, text))
        return schema_id

    # -- transport ---------------------------------------------------------------------------------

    def _request(self, method: str, path: str, body: dict[str, Any] | None = None) -> Any:
        data = json.dumps(body).encode() if body is not None else None
        headers = {**self._headers, **({"Content-Type": CONTENT_TYPE} if data is not None else {})}
        failures = []
        order = [*self.urls[self._preferred :], *self.urls[: self._preferred]]
        for url in order:
            request = urllib.request.Request(url + path, data=data, headers=headers, method=method)
            try:
                with urllib.request.urlopen(request, timeout=self.timeout_s, context=self._ssl) as response:
                    answer = json.load(response)
            except urllib.error.HTTPError as error:
                detail = _error_text(error)
                if error.code == 404:
                    raise _NotFound(detail) from None
                if error.code >= 500 or error.code == 429:
                    failures.append(f"{url}: HTTP {error.code} {detail}")
                    continue
                raise SchemaRegistryRefusedError(f"{url}{path}: HTTP {error.code} {detail}") from None
            except (OSError, ValueError) as error:  # refused, reset, timed out, a body that is not JSON
                reason = getattr(error, "reason", None) or error
                if isinstance(reason, ssl.SSLCertVerificationError):  # a wrong trust store stays wrong
                    raise SchemaRegistryRefusedError(f"{url}: {reason}") from None
                failures.append(f"{url}: {reason}")
                continue
            self._preferred = self.urls.index(url)
            return answer
        raise SchemaRegistryUnavailableError(f"no schema registry answered {method} {path}: " + "; ".join(failures))


class _NotFound(Exception):
    pass


def _error_text(error: urllib.error.HTTPError) -> str:
    """The registry's message of an error answer (``{"error_code": ..., "message": ...}``)."""
    try:
        body = json.loads(error.read() or b"{}")
    except (OSError, ValueError):
        return ""
    return str(body.get("message", "")) if isinstance(body, dict) else ""
