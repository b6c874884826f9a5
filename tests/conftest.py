"""Shared fixtures: one SparkSession, real Apache Kafka and S3 servers, independent Delta readers."""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.prometheus import Prometheus, start_prometheus
from tests.services import shared
from tests.services.alertmanager import Alertmanager, WebhookReceiver
from tests.services.kafka import KafkaBroker
from tests.services.process import TEST_JVM
from tests.services.s3 import S3Server, unique_prefix
from tests.services.schema_registry import SchemaRegistry

REPO = Path(__file__).resolve().parent.parent

# Every Spark driver the tests start (the session below and each `lakecluster` subprocess, which
# inherit the environment) gets the tests' JVM options: Spark's launcher adds SPARK_SUBMIT_OPTS to
# the driver's command line.
if TEST_JVM not in os.environ.get("SPARK_SUBMIT_OPTS", ""):
    os.environ["SPARK_SUBMIT_OPTS"] = f"{os.environ.get('SPARK_SUBMIT_OPTS', '')} {TEST_JVM}".strip()

# The driver's class archive, written by a short JVM before the workers start theirs: a JVM that
# starts without one records its classes for a dump at exit and runs without class sharing until
# then, and each worker's Spark session lives the whole run (a file of in-process tests: 35 s
# without the archive, 16 s with it; a fresh clone's suite: 17:12 against 14:04).
_WRITE_CLASS_ARCHIVE = """
import tempfile
from lakecluster.config import SparkConfig
from lakecluster.spark import get_session
spark = get_session(SparkConfig(master="local[1]"))
with tempfile.TemporaryDirectory() as d:  # Delta's classes too: most tests write and read tables
    spark.range(10).write.format("delta").save(d + "/t")
    spark.read.format("delta").load(d + "/t").count()
"""


def pytest_sessionstart(session: pytest.Session) -> None:
    if hasattr(session.config, "workerinput"):
        return  # an xdist worker: the controller has seen to it
    from lakecluster.class_archive import ClassArchive

    if ClassArchive.in_jars_cache(None).path is None:
        subprocess.run([sys.executable, "-c", _WRITE_CLASS_ARCHIVE], env=subprocess_env(), timeout=900,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)  # fmt: skip


# Seconds each test file took in a full run (``tests/durations.json``, written by
# ``tests/write_durations.py``): the workers take a file at a time (``--dist=loadfile``, in this
# order with ``--no-loadscope-reorder``), so the longest files go first and the short ones fill in
# at the end (longest-processing-time-first); otherwise a long file started late leaves one worker
# running it while the others have nothing left. A file not listed yet counts as a short one.
DURATIONS = Path(__file__).with_name("durations.json")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Files in the order of their measured durations, longest first; each keeps its own order."""
    import json

    seconds = json.loads(DURATIONS.read_text()) if DURATIONS.exists() else {}
    items.sort(key=lambda item: -seconds.get(item.path.relative_to(REPO).as_posix(), 0.0))  # stable


@pytest.fixture(autouse=True)
def _isolate_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """No LAKECLUSTER_* variable from the host leaks into a test's configuration."""
    for name in list(os.environ):
        if name.startswith("LAKECLUSTER_"):
            monkeypatch.delenv(name)


@pytest.fixture(scope="session")
def kafka(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaBroker]:
    """A real Apache Kafka broker (KRaft, one node) on 127.0.0.1; its data and logs in a pytest tmp dir."""
    server = KafkaBroker(tmp_path_factory.mktemp("kafka"))
    try:
        yield server.start()
    finally:
        server.stop()


@pytest.fixture(scope="session")
def schema_registry(tmp_path_factory: pytest.TempPathFactory, worker_id: str) -> Iterator[SchemaRegistry]:
    """A real schema registry (Apicurio Registry, the Confluent-compatible API) on 127.0.0.1, one
    for the whole run: xdist's workers share it (tests/services/shared.py). Tests keep apart by
    subject (each names its own, most after a topic of their own)."""
    if worker_id == "master":
        server = SchemaRegistry(tmp_path_factory.mktemp("schema-registry"))
        try:
            yield server.start()
        finally:
            server.stop()
        return

    def start(workdir: Path, owner: int) -> dict[str, Any]:
        return {"port": SchemaRegistry(workdir).start(owner=owner).port, "workdir": str(workdir)}

    yield shared.run_wide("schema-registry", tmp_path_factory, start,
                          lambda state: SchemaRegistry.attached(Path(state["workdir"]), state["port"]))  # fmt: skip


@pytest.fixture(scope="session")
def broker(kafka: KafkaBroker) -> KafkaBroker:
    """The session's Kafka broker under the name the stream tests use."""
    return kafka


@pytest.fixture(scope="session")
def s3(tmp_path_factory: pytest.TempPathFactory) -> Iterator[S3Server]:
    """A real S3 server (SeaweedFS) on 127.0.0.1 with credentials; data and log in a pytest tmp dir."""
    server = S3Server(tmp_path_factory.mktemp("s3"))
    try:
        yield server.start()
    finally:
        server.stop()


@pytest.fixture(scope="session")
def s3_bucket(s3: S3Server) -> str:
    """One bucket for the session; tests keep apart by prefix (``s3_prefix``)."""
    s3.create_bucket("lakecluster-test")
    return "lakecluster-test"


@pytest.fixture
def s3_prefix(s3_bucket: str) -> str:
    """``s3://lakecluster-test/<uuid>/``: a fresh, empty prefix for each test."""
    return unique_prefix(s3_bucket)


@pytest.fixture(scope="session")
def prometheus(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Prometheus]:
    """A real Prometheus server scraping 127.0.0.1:<prometheus.target_port> every second."""
    server = start_prometheus(tmp_path_factory.mktemp("prometheus"))
    yield server
    server.stop()


@pytest.fixture(scope="session")
def webhook() -> Iterator[WebhookReceiver]:
    """An HTTP receiver in this process keeping every notification Alertmanager posts to it."""
    receiver = WebhookReceiver()
    yield receiver
    receiver.stop()


@pytest.fixture(scope="session")
def alertmanager(webhook: WebhookReceiver, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Alertmanager]:
    """A real Alertmanager on 127.0.0.1 with the compose deployment's configuration (docker/compose.yaml),
    posting to ``webhook``; its waits shortened from seconds-to-minutes to 1 s so a test sees a
    notification within seconds of the alert firing."""
    from tests.docker.compose import alertmanager_config

    config = alertmanager_config(webhook.url, group_wait="1s", group_interval="1s", repeat_interval="1h")
    server = Alertmanager(tmp_path_factory.mktemp("alertmanager"), config)
    try:
        yield server.start()
    finally:
        server.stop()


@pytest.fixture(scope="session")
def spark():  # type: ignore[no-untyped-def]
    from lakecluster.config import SparkConfig
    from lakecluster.spark import get_session
    from lakecluster.workload.listener import listener_jar

    # Delta rebuilds a snapshot in snapshotPartitions tasks (lakecluster's default 4, for logs of
    # production size): on the tests' small logs one task does it, a sixth less of the JVM's CPU
    # (tests/compaction/test_other_writers.py in one process: 221 CPU-seconds with 4, 185 with 1).
    # Expressions are evaluated interpreted, no Java generated per query: on tables of a few
    # thousand rows generating the code costs more than running it (Spark's CodeFormatter alone was
    # a sixth of this JVM's samples; test_other_writers.py: 160 CPU-seconds against 178). Both modes
    # give the same results; the `lakecluster` subprocesses, which stream more rows, keep Spark's
    # generated code (interpreted, a full run took more CPU, not less). Adaptive execution re-plans
    # every query stage, which on tables this small saves nothing (test_file_sizes.py with
    # test_tune.py: 61 CPU-seconds with it, 59 without, twice each).
    session = get_session(SparkConfig(master="local[2]", conf={
        "spark.sql.shuffle.partitions": "2", "spark.databricks.delta.snapshotPartitions": "1",
        "spark.sql.codegen.wholeStage": "false", "spark.sql.codegen.factoryMode": "NO_CODEGEN",
        "spark.sql.adaptive.enabled": "false"}),
        extra_jars=[listener_jar(SparkConfig())])  # tests/workload/ register the listener in this session  # fmt: skip
    yield session
    session.stop()


def read_delta(path: str | Path):  # type: ignore[no-untyped-def]
    """The table's rows through delta-rs, an independent reader of the log we wrote."""
    from deltalake import DeltaTable

    return DeltaTable(str(path)).to_pyarrow_table()


def duckdb_connection(*extra: str):  # type: ignore[no-untyped-def]
    """DuckDB with its delta extension (and the ``extra`` ones, such as ``httpfs`` for S3) loaded
    from their duckdb-ext-* wheels (no download)."""
    import duckdb
    import duckdb_ext

    base = next(iter(duckdb_ext.__path__))
    con = duckdb.connect(config={"allow_unsigned_extensions": "true"})
    for name in ("delta", *extra):
        ext = glob.glob(os.path.join(base, "extensions", f"v{duckdb.__version__}", "*", f"{name}.duckdb_extension"))
        assert ext, f"{name} extension for duckdb {duckdb.__version__} not found under {base}"
        con.execute(f"LOAD '{ext[0]}'")
    return con


def lakecluster_cmd(*args: str) -> list[str]:
    return [sys.executable, "-m", "lakecluster", *args]


def subprocess_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("LAKECLUSTER_")}
    env.update(extra)
    return env


def copy_tree(src: Path, dst: Path) -> None:
    shutil.copytree(src, dst)


@pytest.fixture(scope="session")
def filled(spark, tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    """``fill`` once per configuration in this process, copied to each test's table after that."""
    from tests.generated_tables import FilledTables

    return FilledTables(spark, tmp_path_factory.mktemp("filled"))
