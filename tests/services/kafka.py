"""Apache Kafka (KRaft, one combined broker+controller node) on 127.0.0.1, for tests and benchmarks.

The broker is the real thing: Kafka's own jars from Maven Central, resolved once per machine by
``lakecluster.jars.resolve`` into ``~/.cache/lakecluster/jars`` and run with ``java -cp``. Data lives in
a work directory the caller owns, so a test can stop the broker (or SIGSTOP it) and bring it back on
the same port with its log intact. Produced records go through kafka-python with ``acks=all``.

Start-up is mostly the JVM loading Kafka's classes, so the first broker that stops cleanly leaves a
class-data-sharing archive (AppCDS, ``kafka-*.jsa``) beside the jars and later brokers map it: on
this 2-core machine under load that took a start from ~25 s to ~9 s. A missing or stale archive
only costs that speed (the JVM then loads classes the usual way).
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import logging
import os
import signal
import subprocess
import time
import uuid
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lakecluster.jars import DEFAULT_CACHE, Coordinate, java_tool, resolve
from tests.services import process
from tests.services.ports import free_ports, is_listening

KAFKA_VERSION = "4.1.1"
LOG4J_VERSION = "2.24.3"  # the log4j-core kafka_2.13 4.1.1 depends on
# kafka_2.13 brings slf4j-api 1.7 and log4j-core but no binding between them: without
# log4j-slf4j-impl the broker logs nothing at all (slf4j's no-op logger).
COORDINATES = (
    Coordinate("org.apache.kafka", "kafka_2.13", KAFKA_VERSION),
    Coordinate("org.apache.logging.log4j", "log4j-slf4j-impl", LOG4J_VERSION),
)
JVM_OPTIONS = (
    "-Xmx512m", "-Xms128m", "-Djava.awt.headless=true",
    "-XX:-UsePerfData",  # no /tmp/hsperfdata_* file left behind by a killed broker
    *process.TEST_JVM.split(),
)  # fmt: skip
COMPRESSIONS = ("gzip", "snappy", "lz4", "zstd")

# Settings for one node under test: every replication factor 1, no rebalance delay, topics only
# when asked for, small internal topics (they are created on first use, and each partition costs
# start-up time), small segments.
BROKER_SETTINGS = {
    "num.partitions": "1",
    "default.replication.factor": "1",
    "min.insync.replicas": "1",
    "auto.create.topics.enable": "false",
    "delete.topic.enable": "true",
    "offsets.topic.replication.factor": "1",
    "offsets.topic.num.partitions": "4",
    "transaction.state.log.replication.factor": "1",
    "transaction.state.log.min.isr": "1",
    "transaction.state.log.num.partitions": "4",
    "share.coordinator.state.topic.replication.factor": "1",
    "share.coordinator.state.topic.min.isr": "1",
    "group.initial.rebalance.delay.ms": "0",
    "log.segment.bytes": str(16 * 1024 * 1024),
    "log.retention.hours": "-1",
    "log.retention.bytes": "-1",
    "num.network.threads": "2",
    "num.io.threads": "4",
    "num.recovery.threads.per.data.dir": "1",
    # An idle controller writes a no-op record to its metadata log this often (default 500 ms):
    # an idle test broker used 1.3 CPU-seconds a minute with the default, 0.9 with this.
    "metadata.max.idle.interval.ms": "5000",
}

LOG4J2_PROPERTIES = """\
status = warn
appender.file.type = File
appender.file.name = file
appender.file.fileName = {log}
appender.file.layout.type = PatternLayout
appender.file.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = INFO
rootLogger.appenderRef.file.ref = file
logger.request.name = kafka.request.logger
logger.request.level = WARN
logger.clients.name = org.apache.kafka.clients
logger.clients.level = WARN
"""


# Logins the SASL_PLAINTEXT listener accepts (PLAIN). The admin login is the broker's own.
SASL_ADMIN = ("admin", "admin-secret")
SASL_USERS = {"lakecluster": "lakecluster-secret"}


def plain_jaas_config(username: str, password: str, users: dict[str, str] | None = None) -> str:
    """A ``sasl.jaas.config`` value for PLAIN: a client's login, or (with ``users``) a broker's user list."""
    accepted = "".join(f' user_{u}="{p}"' for u, p in (users or {}).items())
    return (f'org.apache.kafka.common.security.plain.PlainLoginModule required username="{username}" '
            f'password="{password}"{accepted};')  # fmt: skip


class KafkaServiceError(RuntimeError):
    """The broker could not be started, formatted or reached."""


def kafka_classpath(cache_dir: Path = DEFAULT_CACHE) -> list[Path]:
    """Kafka's jars and a log4j binding, from Maven Central on first use, then from the cache."""
    return resolve(COORDINATES, cache_dir=cache_dir)


@dataclass(frozen=True)
class Message:
    """One record to produce: value, and optionally key, partition, headers and timestamp."""

    value: bytes | None
    key: bytes | None = None
    partition: int | None = None
    headers: Sequence[tuple[str, bytes]] = field(default_factory=tuple)
    timestamp_ms: int | None = None


# What ``produce`` takes: a Message, or the older (partition, value) pair.
Record = Message | tuple[int, bytes | None]


class KafkaBroker:
    """One KRaft node (broker and controller) whose data and log live under ``workdir``.

    ``start()`` formats the storage on first use; ``stop()``/``kill()`` then ``start()`` bring the same
    node back on the same ports with the same data; ``pause()``/``resume()`` freeze it (SIGSTOP)
    while its sockets stay open, the way a hung broker looks to clients.
    """

    def __init__(self, workdir: Path, *, cache_dir: Path = DEFAULT_CACHE,
                 settings: Mapping[str, str] | None = None) -> None:  # fmt: skip
        """A node whose files live under ``workdir``.

        Args:
            settings: a whole broker configuration to run instead of the tests' own (a deployment's,
                say): kept as given, except that its listeners, advertised listeners and quorum
                voters are moved to this node's loopback ports (their names and protocols kept),
                and its data is where its ``log.dirs`` says.
        """
        self.workdir = workdir
        self.port, self.controller_port, self.sasl_port = free_ports(3)
        self.bootstrap = f"127.0.0.1:{self.port}"
        # A second listener that takes only SASL/PLAIN logins (SASL_USERS), for clients whose
        # security settings must reach the wire.
        self.sasl_bootstrap = f"127.0.0.1:{self.sasl_port}"
        self.settings = dict(settings) if settings is not None else None
        self.data_dir = Path(self.settings["log.dirs"]) if self.settings and "log.dirs" in self.settings \
            else workdir / "data"  # fmt: skip
        self.log_file = workdir / "server.log"
        self.stdout_file = workdir / "stdout.log"
        self.config_file = workdir / "server.properties"
        self.cluster_id = _random_cluster_id()
        self.classpath = os.pathsep.join(map(str, kafka_classpath(cache_dir)))
        self.cds_archive = cds_archive(cache_dir, self.classpath)
        self._cds_dump: Path | None = None  # where this run writes a new archive at exit
        self._process: subprocess.Popen[bytes] | None = None
        self._write_config()

    # -- lifecycle ----------------------------------------------------------------------------

    @property
    def running(self) -> bool:
        return self._process is not None and self._process.poll() is None

    @property
    def pid(self) -> int | None:
        return self._process.pid if self.running and self._process is not None else None

    def start(self, timeout_s: float = 90) -> KafkaBroker:
        """Start the node (formatting its storage the first time) and wait until it serves clients."""
        if self.running:
            raise KafkaServiceError(f"broker on {self.bootstrap} is already running")
        self._publish_cds_archive(complete=False)  # a previous run that died on its own left no usable dump
        if not (self.data_dir / "meta.properties").is_file():
            self.format_storage()
        if any(is_listening(p, timeout_s=0.2) for p in (self.port, self.controller_port, self.sasl_port)):
            raise KafkaServiceError(
                f"port {self.port}, {self.sasl_port} or {self.controller_port} was taken while the broker was down"
            )
        command = [
            java_tool("java"), *JVM_OPTIONS, *self._cds_options(dump=True),
            f"-Dlog4j2.configurationFile={self.workdir / 'log4j2.properties'}",
            f"-Dkafka.logs.dir={self.workdir}",
            "-cp", self.classpath, "kafka.Kafka", str(self.config_file),
        ]  # fmt: skip
        self._process = process.spawn(command, log=self.stdout_file, cwd=self.workdir)
        try:
            self._wait_ready(timeout_s)
        except BaseException:
            self.kill()
            raise
        return self

    def format_storage(self) -> None:
        """``kafka-storage.sh format --standalone``: write meta.properties and the one-voter quorum."""
        command = [
            java_tool("java"), "-Xmx256m", *process.TEST_JVM.split(), "-XX:-UsePerfData",
            *self._cds_options(dump=False),
            f"-Dlog4j2.configurationFile={self.workdir / 'log4j2.properties'}",
            "-cp", self.classpath, "kafka.tools.StorageTool",
            "format", "--cluster-id", self.cluster_id, "--config", str(self.config_file),
        ]  # fmt: skip
        if "controller.quorum.voters" not in (self.settings or {}):  # a dynamic quorum: this node its one voter
            command.append("--standalone")
        try:
            done = subprocess.run(command, capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)
        except subprocess.TimeoutExpired:
            raise KafkaServiceError("formatting Kafka storage took over 120 s") from None
        if done.returncode != 0:
            raise KafkaServiceError(f"formatting Kafka storage failed:\n{done.stdout}\n{done.stderr}")

    def stop(self, timeout_s: float = 60) -> None:
        """Graceful shutdown (SIGTERM: the broker flushes and closes its logs cleanly)."""
        if self._process is not None:
            code = process.terminate(self._process, timeout_s)
            self._publish_cds_archive(complete=code is not None and code >= 0)

    def kill(self) -> None:
        """SIGKILL: the broker dies mid-flight, as in a crash; ``start()`` then recovers its logs.

        As with any Kafka node, the restarted broker can only register once the controller has let
        the killed incarnation's session expire (``broker.session.timeout.ms``, 9 s), so that start
        takes about 9 s longer than one after ``stop()``.
        """
        if self._process is not None:
            process.kill(self._process)
            self._publish_cds_archive(complete=False)

    def pause(self) -> None:
        """SIGSTOP: the broker stops answering but keeps its connections, like a hung machine.
        Returns once every thread of the broker is stopped (on a loaded machine a thread can go on
        for a moment after the signal is sent, and answer a request sent just after)."""
        if not self.running or self._process is None:
            raise KafkaServiceError("broker is not running")
        os.kill(self._process.pid, signal.SIGSTOP)
        deadline = time.monotonic() + 10
        while not _all_threads_stopped(self._process.pid) and time.monotonic() < deadline:
            time.sleep(0.01)

    def resume(self) -> None:
        """SIGCONT after ``pause()``."""
        if not self.running or self._process is None:
            raise KafkaServiceError("broker is not running")
        os.kill(self._process.pid, signal.SIGCONT)

    def log_tail(self, lines: int = 40) -> str:
        return process.log_tail(self.stdout_file, 10) + "\n" + process.log_tail(self.log_file, lines)

    # -- client helpers -----------------------------------------------------------------------

    @contextlib.contextmanager
    def admin(self) -> Iterator[Any]:
        """A kafka-python ``KafkaAdminClient`` on this broker, closed afterwards."""
        from kafka import KafkaAdminClient

        client = KafkaAdminClient(bootstrap_servers=self.bootstrap, request_timeout_ms=10_000)
        try:
            yield client
        finally:
            client.close()

    def create_topic(self, name: str, partitions: int, **configs: str) -> None:
        """Create ``name`` with ``partitions`` partitions (replication 1) and wait until its leaders are known."""
        from kafka.admin import NewTopic

        with self.admin() as admin:
            admin.create_topics([NewTopic(name, partitions, 1, topic_configs=configs)], wait_for_metadata=True)

    def produce(
        self,
        topic: str,
        records: Sequence[Record],
        *,
        compression: str | None = None,
        transactional: bool = False,
        abort: bool = False,
        **producer_config: Any,
    ) -> list[tuple[int, int]]:
        """Send ``records`` in order and wait until the broker has acknowledged them all (acks=all).

        A record is a ``Message`` or a ``(partition, value)`` pair; a pair gets the key ``str(i)`` (its
        index), as the tests have always sent. ``compression`` is gzip, snappy, lz4 or zstd.
        ``transactional`` sends everything in one transaction, committed, or aborted when ``abort``.
        Returns the (partition, offset) each record was written at.
        """
        from kafka import KafkaProducer

        if abort and not transactional:
            raise ValueError("abort=True needs transactional=True")
        if compression is not None and compression not in COMPRESSIONS:
            raise ValueError(f"compression must be one of {COMPRESSIONS}, not {compression!r}")
        config: dict[str, Any] = {"bootstrap_servers": self.bootstrap, "linger_ms": 20, "acks": "all",
                                  "compression_type": compression}  # fmt: skip
        if transactional:
            config["transactional_id"] = f"test-{uuid.uuid4().hex}"
        config.update(producer_config)
        producer = KafkaProducer(**config)
        try:
            if transactional:
                producer.init_transactions()
                producer.begin_transaction()
            futures = []
            for i, record in enumerate(records):
                m = record if isinstance(record, Message) else Message(record[1], str(i).encode(), record[0])
                futures.append(producer.send(topic, value=m.value, key=m.key, partition=m.partition,
                                             headers=list(m.headers), timestamp_ms=m.timestamp_ms))  # fmt: skip
            producer.flush(timeout=60)
            written = [(meta.partition, meta.offset) for meta in (f.get(timeout=60) for f in futures)]
            if transactional:
                if abort:
                    producer.abort_transaction()
                else:
                    producer.commit_transaction()
            return written
        finally:
            producer.close(timeout=10)

    def end_offsets(self, topic: str, *, isolation_level: str = "read_uncommitted") -> dict[int, int]:
        """{partition: end offset}: the high watermark, or the last stable offset with ``read_committed``."""
        from kafka import KafkaConsumer, TopicPartition

        consumer = KafkaConsumer(bootstrap_servers=self.bootstrap, isolation_level=isolation_level,
                                 enable_auto_commit=False, request_timeout_ms=30_000)  # fmt: skip
        try:
            partitions = consumer.partitions_for_topic(topic)
            if not partitions:
                raise KafkaServiceError(f"topic {topic!r} does not exist on {self.bootstrap}")
            ends = consumer.end_offsets([TopicPartition(topic, p) for p in sorted(partitions)])
            return {tp.partition: offset for tp, offset in ends.items()}
        finally:
            consumer.close()

    # -- internals ----------------------------------------------------------------------------

    def _write_config(self) -> None:
        self.workdir.mkdir(parents=True, exist_ok=True)
        settings = self._given_settings() if self.settings is not None else {
            "process.roles": "broker,controller",
            "node.id": "1",
            "controller.quorum.bootstrap.servers": f"127.0.0.1:{self.controller_port}",
            "listeners": f"PLAINTEXT://127.0.0.1:{self.port},SASL_PLAINTEXT://127.0.0.1:{self.sasl_port},"
            f"CONTROLLER://127.0.0.1:{self.controller_port}",
            "advertised.listeners": f"PLAINTEXT://127.0.0.1:{self.port},SASL_PLAINTEXT://127.0.0.1:{self.sasl_port}",
            "inter.broker.listener.name": "PLAINTEXT",
            "controller.listener.names": "CONTROLLER",
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,SASL_PLAINTEXT:SASL_PLAINTEXT,CONTROLLER:PLAINTEXT",
            "sasl.enabled.mechanisms": "PLAIN",
            "listener.name.sasl_plaintext.plain.sasl.jaas.config": plain_jaas_config(*SASL_ADMIN, users=SASL_USERS),
            "log.dirs": str(self.data_dir),
            **BROKER_SETTINGS,
        }
        self.config_file.write_text("".join(f"{k}={v}\n" for k, v in settings.items()))
        (self.workdir / "log4j2.properties").write_text(LOG4J2_PROPERTIES.format(log=self.log_file))

    def _given_settings(self) -> dict[str, str]:
        """``settings`` with every listener on this node's loopback ports: the controller listeners
        on ``controller_port``, the others on ``port``."""
        assert self.settings is not None
        given = dict(self.settings)
        controllers = set(given.get("controller.listener.names", "CONTROLLER").split(","))

        def moved(listeners: str) -> str:
            names = [item.split("://", 1)[0] for item in listeners.split(",") if item.strip()]
            return ",".join(f"{n}://127.0.0.1:{self.controller_port if n in controllers else self.port}"
                            for n in names)  # fmt: skip

        for key in ("listeners", "advertised.listeners"):
            if key in given:
                given[key] = moved(given[key])
        if "controller.quorum.voters" in given:
            voters = [v.split("@", 1)[0] for v in given["controller.quorum.voters"].split(",")]
            given["controller.quorum.voters"] = ",".join(f"{v}@127.0.0.1:{self.controller_port}" for v in voters)
        return given

    def _cds_options(self, *, dump: bool) -> list[str]:
        """Map the class-data archive if there is one; else (broker runs only) write one at exit."""
        if self.cds_archive.is_file():
            return [f"-XX:SharedArchiveFile={self.cds_archive}"]
        if not dump:
            return []
        self._cds_dump = self.cds_archive.with_name(f"{self.cds_archive.name}.{uuid.uuid4().hex}.partial")
        return [f"-XX:ArchiveClassesAtExit={self._cds_dump}"]

    def _publish_cds_archive(self, *, complete: bool) -> None:
        """Move a finished archive into place (atomically: brokers in other processes may race)."""
        dump, self._cds_dump = self._cds_dump, None
        if dump is None:
            return
        if complete and dump.is_file() and dump.stat().st_size > 0:
            dump.replace(self.cds_archive)
        else:
            dump.unlink(missing_ok=True)

    def _wait_ready(self, timeout_s: float) -> None:
        """Until an admin client sees this broker and a leader for every partition (after a restart
        partitions come back leaderless until the node is unfenced); fails with the log tail."""
        quiet = _Quiet("kafka")

        def probe() -> str | None:
            try:
                with quiet, self.admin() as admin:
                    if not [b for b in admin.describe_cluster()["brokers"] if not b.get("is_fenced")]:
                        return "no unfenced broker yet"
                    leaderless = [(t["name"], p["partition_index"]) for t in admin.describe_topics()
                                  for p in t["partitions"] if p["leader_id"] < 0 or p["error_code"]]  # fmt: skip
                    return f"partitions without a leader: {leaderless[:5]}" if leaderless else None
            except Exception as e:  # kafka-python raises many kinds while a broker comes up
                return f"{type(e).__name__}: {e}"

        process.wait_ready(self._process, self.port, probe, name=f"Kafka on {self.bootstrap}", timeout_s=timeout_s,
                           error=KafkaServiceError, logs=self.log_tail)  # fmt: skip


def start_kafka(workdir: Path, timeout_s: float = 90) -> KafkaBroker:
    """A started broker whose files live under ``workdir`` (the tests' and benchmarks' entry point)."""
    return KafkaBroker(workdir).start(timeout_s)


def cds_archive(cache_dir: Path, classpath: str) -> Path:
    """The class-data archive for this classpath and this JVM (a JVM refuses another's archive)."""
    java = os.path.realpath(java_tool("java"))
    key = hashlib.sha256(f"{classpath}\0{java}\0{os.stat(java).st_mtime_ns}".encode()).hexdigest()[:16]
    return cache_dir / f"kafka-{KAFKA_VERSION}-{key}.jsa"


def _random_cluster_id() -> str:
    """A Kafka cluster id: 16 random bytes, URL-safe base64 without padding, not starting with '-'."""
    while True:
        text = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not text.startswith("-"):
            return text


class _Quiet:
    """Silence a logger while polling a server that is still coming up (kafka-python logs every refusal)."""

    def __init__(self, name: str) -> None:
        self.logger = logging.getLogger(name)
        self.level = self.logger.level

    def __enter__(self) -> None:
        self.level = self.logger.level
        self.logger.setLevel(logging.CRITICAL)

    def __exit__(self, *exc: object) -> None:
        self.logger.setLevel(self.level)


def _all_threads_stopped(pid: int) -> bool:
    """Whether every thread of ``pid`` is in the stopped state (``T`` in ``/proc/<pid>/task/*/stat``)."""
    try:
        tasks = list(Path(f"/proc/{pid}/task").iterdir())
        return all((t / "stat").read_text().rsplit(")", 1)[1].split()[0] in ("T", "t") for t in tasks)
    except (OSError, IndexError):
        return True  # no /proc (or the process is gone): nothing more to wait for
