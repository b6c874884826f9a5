"""Kafka: Spark's Kafka source reads the records; kafka-python does what Spark does not.

Spark's source (``spark-sql-kafka-0-10``) is configured from ``[source.kafka]``: topics or a
pattern, starting offsets, the per-trigger cap, minimum partitions, read_committed, data-loss
policy, and every Kafka client property under ``options`` (SASL/SSL...) passed as ``kafka.<name>``.
kafka-python serves the checks before Spark starts (a broker answers, the topics exist), the list
of partitions a resumed stream must name, and consumer lag (Spark commits no offsets to Kafka, so
lag tools see nothing; lakecluster computes it from the offsets it records in the table).
"""

from __future__ import annotations

import json
import logging
import re
import socket
import time
from typing import Any

from lakecluster.config import KafkaSourceConfig
from lakecluster.errors import BrokerUnavailableError, ConfigError, KafkaLoginError, TopicNotFoundError
from lakecluster.stream import kafka_login

log = logging.getLogger(__name__)
# While no broker answers, a line saying so at the first failed try and then this often: a start
# waiting out source.kafka.connect_timeout_s (30 s by default) is never silent.
PROGRESS_EVERY_S = 10.0
Offsets = dict[str, dict[int, int]]  # topic -> partition -> next offset to read


def reader_options(k: KafkaSourceConfig, starting_offsets: str) -> dict[str, str]:
    """Options of ``spark.readStream.format("kafka")``."""
    opts = {
        "kafka.bootstrap.servers": k.bootstrap_servers,
        "startingOffsets": starting_offsets,
        "failOnDataLoss": "true" if k.fail_on_data_loss else "false",
        "includeHeaders": "true",
        "kafka.isolation.level": k.isolation_level,
    }
    if k.topics:
        opts["subscribe"] = ",".join(k.topics)
    else:
        assert k.topic_pattern is not None
        opts["subscribePattern"] = k.topic_pattern
    if k.max_offsets_per_trigger:
        opts["maxOffsetsPerTrigger"] = str(k.max_offsets_per_trigger)
    if k.min_partitions:
        opts["minPartitions"] = str(k.min_partitions)
    opts.update({f"kafka.{name}": value for name, value in k.options.items()})
    return opts


# A quoted value as Java's JAAS parser reads it: a backslash escapes the next character.
_JAAS_FIELD = re.compile(r'(username|password)\s*=\s*"((?:[^"\\]|\\.)*)"')
_JAAS_ESCAPE = re.compile(r"\\(.)")


def client_kwargs(k: KafkaSourceConfig) -> dict[str, Any]:
    """kafka-python arguments for the same cluster: the Java client properties it understands.

    ``security.protocol``, ``sasl.mechanism`` and the username/password of ``sasl.jaas.config``
    (PLAIN and SCRAM), PEM trust and key stores. Anything else Java-specific (JKS stores,
    Kerberos) has no kafka-python equivalent: those clusters need the admin checks turned off
    by the operator or PEM files.
    """
    o = dict(k.options)
    kwargs: dict[str, Any] = {
        "bootstrap_servers": [s.strip() for s in k.bootstrap_servers.split(",") if s.strip()],
        "request_timeout_ms": int(k.connect_timeout_s * 1000),
    }
    if "security.protocol" in o:
        kwargs["security_protocol"] = o["security.protocol"].upper()
    if "sasl.mechanism" in o:
        kwargs["sasl_mechanism"] = o["sasl.mechanism"].upper()
    fields = {k: _JAAS_ESCAPE.sub(r"\1", v) for k, v in _JAAS_FIELD.findall(o.get("sasl.jaas.config", ""))}
    if fields:
        kwargs["sasl_plain_username"] = fields.get("username")
        kwargs["sasl_plain_password"] = fields.get("password")
    if o.get("ssl.truststore.type", "").upper() == "PEM" and "ssl.truststore.location" in o:
        kwargs["ssl_cafile"] = o["ssl.truststore.location"]
    if o.get("ssl.keystore.type", "").upper() == "PEM" and "ssl.keystore.location" in o:
        kwargs["ssl_certfile"] = o["ssl.keystore.location"]
        kwargs["ssl_keyfile"] = o.get("ssl.key.location", o["ssl.keystore.location"])
    if "ssl.endpoint.identification.algorithm" in o and not o["ssl.endpoint.identification.algorithm"]:
        kwargs["ssl_check_hostname"] = False
    return kwargs


def consumer(k: KafkaSourceConfig, *, report_waiting: bool = True) -> Any:
    """A kafka-python consumer (no group: it only reads metadata and offsets).

    Waits up to ``connect_timeout_s`` for a broker, logging a line while it waits (unless
    ``report_waiting`` is off: the lag monitor's background retries).

    Raises:
        KafkaLoginError: a broker refused the configured SASL/PLAIN login (at once, not after the wait).
        BrokerUnavailableError: no Kafka session could be set up within ``connect_timeout_s``.
    """
    from kafka import KafkaConsumer
    from kafka.errors import KafkaConfigurationError, KafkaError

    kwargs = client_kwargs(k)
    started = time.monotonic()
    deadline = started + k.connect_timeout_s
    next_report = started
    while True:
        server, problem = _probe(kwargs["bootstrap_servers"], k.connect_timeout_s)
        # Whether a server took a TCP connection on the last try: then the Kafka handshake is what fails.
        reachable = problem is None
        if reachable:
            assert server is not None
            refused = kafka_login.refusal(server, kwargs, min(k.connect_timeout_s, 10))
            if refused is not None:
                raise KafkaLoginError(_login_refused(k, server, kwargs, refused))
            try:
                return KafkaConsumer(**kwargs, enable_auto_commit=False, group_id=None)
            except KafkaConfigurationError as e:
                raise ConfigError("source.kafka.options", f"the Kafka client rejects them: {e}") from None
            except (KafkaError, OSError) as e:
                problem = str(e)
        now = time.monotonic()
        if now > deadline:
            raise BrokerUnavailableError(_unavailable(k, problem, reachable))
        if report_waiting and now >= next_report:
            log.warning("waiting for a Kafka broker at %s: %.0fs of %gs (source.kafka.connect_timeout_s); %s",
                        k.bootstrap_servers, now - started, k.connect_timeout_s, problem)  # fmt: skip
            next_report = now + PROGRESS_EVERY_S
        now = time.monotonic()
        time.sleep(max(0.05, min(1.0, deadline - now, next_report - now if report_waiting else 1.0)))


def _probe(servers: list[str], timeout_s: float) -> tuple[str | None, str | None]:
    """The first bootstrap server that accepts a TCP connection, or the last error if none does."""
    error = None
    for server in servers:
        host, _, port = server.rpartition(":")
        try:
            socket.create_connection((host.strip("[]"), int(port)), timeout=min(timeout_s, 5)).close()
            return server, None
        except (OSError, ValueError) as e:
            error = f"{server}: {e}"
    return None, error


def _login_refused(k: KafkaSourceConfig, server: str, kwargs: dict[str, Any], reason: str) -> str:
    return (f"the Kafka broker at {server} refused the SASL login of user '{kwargs['sasl_plain_username']}' "
            f"({kwargs['sasl_mechanism']} over {kwargs['security_protocol']}): {reason}; check the username and "
            "password in source.kafka.options sasl.jaas.config")  # fmt: skip


def _unavailable(k: KafkaSourceConfig, problem: str | None, reachable: bool) -> str:
    within = f"within {k.connect_timeout_s:g}s ({problem})"
    if not reachable:
        return (f"no Kafka broker answered at {k.bootstrap_servers} {within}; "
                "check source.kafka.bootstrap_servers and that the brokers are running")  # fmt: skip
    # A broker that refuses a SASL login just closes the connection: the client sees a disconnect.
    security = {n: v for n, v in k.options.items() if n in ("security.protocol", "sasl.mechanism")}
    if security:
        hint = (f"check the login and security settings in source.kafka.options "
                f"({', '.join(f'{n}={v}' for n, v in security.items())}); the broker may refuse them")  # fmt: skip
    else:
        hint = ("check that source.kafka.bootstrap_servers names a Kafka listener, and whether that listener "
                "needs security settings (security.protocol, sasl.*, ssl.*) in source.kafka.options")  # fmt: skip
    return (f"a server of {k.bootstrap_servers} accepts connections but no Kafka session could be set up "
            f"{within}; {hint}")  # fmt: skip


def partitions(k: KafkaSourceConfig, client: Any) -> list[tuple[str, int]]:
    """Every (topic, partition) the configured topics or pattern cover; raises if none exists."""
    names = client.topics()
    if k.topics:
        missing = sorted(set(k.topics) - names)
        if missing:
            raise TopicNotFoundError(
                f"topic(s) {', '.join(missing)} not found on {k.bootstrap_servers}; create them or fix "
                "source.kafka.topics"
            )
        topics = list(k.topics)
    else:
        assert k.topic_pattern is not None
        pattern = re.compile(k.topic_pattern)
        topics = sorted(t for t in names if pattern.fullmatch(t))
        if not topics:
            raise TopicNotFoundError(f"no topic on {k.bootstrap_servers} matches pattern {k.topic_pattern!r}")
    out: list[tuple[str, int]] = []
    for topic in topics:
        parts = client.partitions_for_topic(topic) or set()
        out.extend((topic, p) for p in sorted(parts))
    return out


def parse_offsets(text: str) -> Offsets:
    """Spark's Kafka offsets JSON (``{"topic": {"0": 42}}``) as ints."""
    raw = json.loads(text)
    return {topic: {int(p): int(o) for p, o in parts.items()} for topic, parts in raw.items()}


def starting_offsets_json(recorded: Offsets, tps: list[tuple[str, int]]) -> str:
    """startingOffsets naming every current partition: recorded ones where they exist, else earliest.

    Spark's source requires specific offsets for all partitions it subscribes to; a partition
    added since the table recorded its offsets starts at its beginning (-2), as Spark's own
    source does for partitions discovered while running.
    """
    out: dict[str, dict[str, int]] = {}
    for topic, partition in tps:
        out.setdefault(topic, {})[str(partition)] = recorded.get(topic, {}).get(partition, -2)
    return json.dumps(out, sort_keys=True)
