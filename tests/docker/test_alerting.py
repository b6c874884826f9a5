"""Alerts that reach someone: real faults of a live `lakecluster stream` and `lakecluster compact`,
scraped by a real Prometheus configured from docker/prometheus/ (the rules with their `for`
shortened, 1 s intervals), delivered by a real Alertmanager with the compose deployment's
configuration to a webhook receiver in this process, each with its runbook link.

- The stream's Kafka is unreachable: its bootstrap server is a port where nothing listens. The
  stream waits `source.kafka.connect_timeout_s` for a broker, then stops; its target goes down.
- The compactor has failed since its start: its S3 key may read the table but not write it, so
  every rewrite is refused (a transient storage fault it keeps retrying); no round ever completes.

Neither process starts a JVM: the stream stops before Spark, the compactor's rewrite fails in its
own process (pyarrow) before any commit would need Spark.
"""

from __future__ import annotations

import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
import yaml
from deltalake import DeltaTable, write_deltalake

from lakecluster.config import load_config
from lakecluster.sketches import BoundarySketches
from lakecluster.stream.generator import GeneratorSettings, generate
from lakecluster.table import LakeTable
from tests.conftest import lakecluster_cmd, subprocess_env
from tests.docker.compose import DOCKER
from tests.generated_tables import SMALL
from tests.prometheus import Prometheus, rules_held_for, start_prometheus
from tests.services.alertmanager import Alertmanager, WebhookReceiver
from tests.services.ports import free_ports, is_listening
from tests.services.s3 import READER_KEY, READER_SECRET, S3Server

pytestmark = pytest.mark.integration

HOLD = "2s"  # the alerts' `for`, shortened; alerts.test.yml tests the real ones
RUNBOOK_BASE = "https://git.example/lakecluster/docs/operations.md"
ROLE_COMMANDS = {"stream": "stream", "compactor": "compact"}  # prometheus.yml's role label: the command


def _prometheus_config(workdir: Path, ports: dict[str, int], alertmanager: str) -> str:
    """docker/prometheus/prometheus.yml with local targets and Alertmanager, 1 s intervals and the
    rules' `for` shortened; its external labels (the runbook base) kept."""
    config = yaml.safe_load((DOCKER / "prometheus" / "prometheus.yml").read_text())
    config["global"].update({"scrape_interval": "1s", "scrape_timeout": "900ms", "evaluation_interval": "1s"})
    for job in config["scrape_configs"]:
        for static in job["static_configs"]:
            static["targets"] = [f"127.0.0.1:{ports[ROLE_COMMANDS[static['labels']['role']]]}"]
    for manager in config["alerting"]["alertmanagers"]:
        for static in manager["static_configs"]:
            static["targets"] = [alertmanager]
    config["rule_files"] = [str(rules_held_for(DOCKER / "prometheus" / "alerts.yml", workdir, HOLD))]
    return yaml.safe_dump(config)


def _table_with_work(s3: S3Server, uri: str) -> dict[str, str]:
    """A small table on S3 whose files the compactor would rewrite (three small appends by another
    writer, and boundary sketches as a stream leaves them); returns the settings that name it."""
    settings = {**SMALL, "table.path": uri, "table.partition_by": "[]", **s3.lakecluster_settings()}
    config = load_config(overrides=settings, environ={})
    data = pa.Table.from_batches([generate(0, 1_500, GeneratorSettings(), config.table.columns)])
    for start in range(0, data.num_rows, 500):
        write_deltalake(uri, data.slice(start, 500), mode="append", storage_options=s3.storage_options())
    sketches = BoundarySketches.empty([config.table.column(c) for c in config.table.clustering_columns])
    for c in config.table.clustering_columns:
        sketches.sketches[c].update(data[c])
    sketches.delta_version = DeltaTable(uri, storage_options=s3.storage_options()).version()
    LakeTable(config).sketches().write(sketches)
    return settings


def _start(args: list[str], log: Path) -> subprocess.Popen[bytes]:
    return subprocess.Popen(lakecluster_cmd(*args), env=subprocess_env(), stdout=log.open("wb"),
                            stderr=subprocess.STDOUT, start_new_session=True)  # fmt: skip


@pytest.fixture
def faulty(s3: S3Server, s3_prefix: str, alertmanager: Alertmanager, tmp_path: Path) -> Iterator[dict[str, Any]]:
    """Prometheus, a stream whose broker is unreachable and a compactor that may not write its table."""
    stream_port, compact_port, nowhere_port = free_ports(3)  # distinct: free_port() twice may give one port twice
    ports = {"stream": stream_port, "compact": compact_port}
    settings = _table_with_work(s3, f"{s3_prefix}t")
    nowhere = f"127.0.0.1:{nowhere_port}"
    # The stream serves its metrics this long before it gives up on the broker: Prometheus, started
    # once both services serve, sees it up first.
    stream = {**SMALL, "source.kind": "kafka", "source.kafka.bootstrap_servers": nowhere,
              "source.kafka.topics": '["lineorder"]', "source.kafka.connect_timeout_s": "15",
              "table.path": str(tmp_path / "stream-table"), "metrics.port": str(ports["stream"])}  # fmt: skip
    compactor = {**settings, "storage.s3_access_key_id": READER_KEY, "storage.s3_secret_access_key": READER_SECRET,
                 "metrics.port": str(ports["compact"]), "retry.initial_backoff_s": "0.5",
                 "retry.max_backoff_s": "1"}  # fmt: skip
    logs = {"stream": tmp_path / "stream.log", "compact": tmp_path / "compactor.log"}
    procs: dict[str, subprocess.Popen[bytes]] = {}
    prometheus: Prometheus | None = None
    try:
        for name, overrides in (("stream", stream), ("compact", compactor)):
            procs[name] = _start([f"--set={k}={v}" for k, v in overrides.items()] + [name], logs[name])
        # Prometheus only once both serve: with the rules' `for` cut to seconds, a target still
        # starting would fire its "down" alert, and the stream's would not be the broker's doing.
        for name, port in ports.items():
            _wait_serving(procs[name], port, logs[name])
        (tmp_path / "prom").mkdir()
        prometheus = start_prometheus(tmp_path / "prom",
                                      config_text=_prometheus_config(tmp_path, ports, alertmanager.address),
                                      args=["--enable-feature=expand-external-labels"],
                                      env={"RUNBOOK_BASE_URL": RUNBOOK_BASE})  # fmt: skip
        yield {"prometheus": prometheus, "procs": procs, "logs": logs, "ports": ports, "nowhere": nowhere}
    finally:
        for proc in procs.values():
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        if prometheus is not None:
            prometheus.stop()


def _wait_serving(proc: subprocess.Popen[bytes], port: int, log: Path, timeout_s: float = 60) -> None:
    deadline = time.monotonic() + timeout_s
    while not is_listening(port, timeout_s=0.5):
        tail = log.read_text()[-3000:]
        assert proc.poll() is None, f"exited with {proc.returncode} before serving metrics:\n{tail}"
        assert time.monotonic() < deadline, f"no metrics on port {port} after {timeout_s:.0f}s:\n{tail}"
        time.sleep(0.1)


def _firing(alertname: str, port: int):  # type: ignore[no-untyped-def]
    def match(alert: dict[str, Any]) -> bool:
        labels = alert["labels"]
        return (alert["status"] == "firing" and labels.get("alertname") == alertname
                and labels.get("instance") == f"127.0.0.1:{port}")  # fmt: skip

    return match


def test_an_unreachable_broker_and_a_compactor_failing_since_its_start_reach_the_webhook(
    faulty: dict[str, Any], webhook: WebhookReceiver
) -> None:
    ports, logs, procs = faulty["ports"], faulty["logs"], faulty["procs"]
    started = time.monotonic()

    stalled = webhook.wait_for(_firing("LakeclusterStreamStalled", ports["stream"]), timeout_s=45)
    assert stalled["labels"]["role"] == "stream" and stalled["labels"]["severity"] == "critical"
    assert stalled["annotations"]["runbook_url"] == f"{RUNBOOK_BASE}#lakeclusterstreamstalled"
    # It stopped because no broker answered, after Prometheus had seen it up: not a stream that never ran.
    assert procs["stream"].wait(timeout=10) == 1
    assert f"no Kafka broker answered at {faulty['nowhere']}" in logs["stream"].read_text()
    prom: Prometheus = faulty["prometheus"]
    assert prom.value(f'max_over_time(up{{instance="127.0.0.1:{ports["stream"]}"}}[5m])') == 1

    failing = webhook.wait_for(_firing("LakeclusterCompactionFailing", ports["compact"]),
                               timeout_s=45 - (time.monotonic() - started))  # fmt: skip
    assert failing["labels"]["severity"] == "warning"
    assert failing["annotations"]["runbook_url"] == f"{RUNBOOK_BASE}#lakeclustercompactionfailing"
    # Failing since its start: no round ever completed, the faults are the refused writes, and it keeps retrying.
    instance = f'instance="127.0.0.1:{ports["compact"]}"'
    assert prom.value(f"lakecluster_compaction_last_success_timestamp_seconds{{{instance}}}") == 0
    compactor_log = logs["compact"].read_text()
    assert "compaction round failed (transient fault)" in compactor_log and "ACCESS_DENIED" in compactor_log
    assert procs["compact"].poll() is None
    procs["compact"].send_signal(signal.SIGTERM)
    assert procs["compact"].wait(timeout=60) == 0, compactor_log[-3000:]
