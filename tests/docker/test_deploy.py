"""The compose deployment, checked without a Docker engine: every file it names exists, names and
ports agree between the services, Prometheus's own promtool accepts the config and the rules and
runs the alerts' unit tests, the dashboard points at the provisioned datasource, and the init
script prepares a real S3 bucket and Kafka topic."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tomllib
import uuid
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
import yaml

from lakecluster.config import load_config
from tests.services.kafka import KafkaBroker
from tests.services.s3 import S3Server

DOCKER = Path(__file__).resolve().parents[2] / "docker"
PROMETHEUS = DOCKER / "prometheus"
GRAFANA = DOCKER / "grafana"
LAKECLUSTER_SERVICES = ("producer", "stream", "compactor")


def _yaml(path: Path) -> Any:
    return yaml.safe_load(path.read_text())


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    return _yaml(DOCKER / "compose.yaml")


def _host_mounts(service: dict[str, Any]) -> dict[str, str]:
    """Bind mounts of a service: {path in the container: path on the host, relative to docker/}."""
    out = {}
    for volume in service.get("volumes", []):
        source, target = volume.split(":")[:2]
        if source.startswith("."):
            out[target] = source
    return out


def _config_path(service: dict[str, Any]) -> str:
    command = service.get("command") or service.get("entrypoint")
    return command[command.index("--config") + 1] if "--config" in command else command[2]


def _promtool(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    binary = shutil.which("promtool")
    assert binary is not None, "promtool is missing: install Debian's prometheus (.ci/install does)"
    return subprocess.run([binary, *args], cwd=cwd, capture_output=True, text=True, timeout=120)


def test_promtool_accepts_the_prometheus_config_and_its_rules() -> None:
    result = _promtool("check", "config", "prometheus.yml", cwd=PROMETHEUS)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "alerts.yml" in result.stdout and "SUCCESS" in result.stdout


def test_every_alert_fires_in_its_unit_test_and_has_a_runbook_entry() -> None:
    result = _promtool("test", "rules", "alerts.test.yml", cwd=PROMETHEUS)
    assert result.returncode == 0, result.stdout + result.stderr
    alerts = {r["alert"] for g in _yaml(PROMETHEUS / "alerts.yml")["groups"] for r in g["rules"] if "alert" in r}
    assert len(alerts) >= 10
    tests = _yaml(PROMETHEUS / "alerts.test.yml")["tests"]
    fired = {t["alertname"] for case in tests for t in case.get("alert_rule_test", []) if t["exp_alerts"]}
    assert fired == alerts, f"alerts without a unit test in which they fire: {alerts - fired}"
    runbook = (DOCKER.parent / "docs" / "operations.md").read_text()
    headings = {line.lstrip("#").strip() for line in runbook.splitlines() if line.startswith("#")}
    assert alerts <= headings, f"alerts without a runbook section in docs/operations.md: {alerts - headings}"


def test_compose_services_files_and_names_agree(compose: dict[str, Any]) -> None:
    services = compose["services"]
    assert {"kafka", "s3", "init", *LAKECLUSTER_SERVICES, "prometheus", "grafana"} <= set(services)
    for name, service in services.items():
        assert "image" in service or "build" in service, name
        for source in _host_mounts(service).values():
            assert (DOCKER / source).exists(), f"{name} mounts {source}, which is not in docker/"
        depends = service.get("depends_on", {})
        assert set(depends) <= set(services), f"{name} depends on an unknown service"
    # The lakecluster services run the image built from the Dockerfile, with the mounted config.
    for name in ("init", *LAKECLUSTER_SERVICES):
        service = services[name]
        assert service["build"]["dockerfile"] == "docker/Dockerfile"
        assert _host_mounts(service)[_config_path(service)] == "./lakecluster.toml"
    # The image holds every package directory pyproject maps into lakecluster.
    dockerfile = (DOCKER / "Dockerfile").read_text()
    package_dirs = tomllib.loads((DOCKER.parent / "pyproject.toml").read_text())["tool"]["setuptools"]["package-dir"]
    for directory in set(package_dirs.values()):
        assert re.search(rf"^COPY {directory} \./{directory}$", dockerfile, re.M), f"Dockerfile misses {directory}/"


def test_the_services_config_points_at_the_compose_broker_store_and_scrape_targets(compose: dict[str, Any]) -> None:
    services = compose["services"]
    config = load_config(DOCKER / "lakecluster.toml")
    kafka_env = services["kafka"]["environment"]
    assert config.source.kind == "kafka"
    assert config.source.kafka.bootstrap_servers == kafka_env["KAFKA_ADVERTISED_LISTENERS"].removeprefix("PLAINTEXT://")
    endpoint = urlsplit(config.storage.s3_endpoint or "")
    assert endpoint.hostname == "s3" and f"-s3.port={endpoint.port}" in services["s3"]["command"]
    # The credentials the services use are an identity of the S3 store.
    env = services["stream"]["environment"]
    identities = json.loads((DOCKER / "seaweedfs" / "s3.json").read_text())["identities"]
    keys = {(c["accessKey"], c["secretKey"]) for i in identities for c in i["credentials"]}
    assert (env["AWS_ACCESS_KEY_ID"], env["AWS_SECRET_ACCESS_KEY"]) in keys
    assert config.table.path.startswith("s3://")
    # Prometheus scrapes the stream and the compactor where they serve, reachable from its container.
    assert config.metrics.host == "0.0.0.0"
    scrape = _yaml(PROMETHEUS / "prometheus.yml")["scrape_configs"]
    targets = {sc["static_configs"][0]["labels"]["role"]: sc["static_configs"][0]["targets"][0] for sc in scrape}
    assert targets == {"stream": f"stream:{config.metrics.port}", "compactor": f"compactor:{config.metrics.port}"}
    assert "alerts.yml" in _yaml(PROMETHEUS / "prometheus.yml")["rule_files"]
    assert _host_mounts(services["prometheus"])["/etc/prometheus/alerts.yml"] == "./prometheus/alerts.yml"


def test_grafana_provisions_the_datasource_and_the_dashboard_uses_it(compose: dict[str, Any]) -> None:
    services = compose["services"]
    (datasource,) = _yaml(GRAFANA / "provisioning" / "datasources" / "prometheus.yml")["datasources"]
    url = urlsplit(datasource["url"])
    assert url.hostname == "prometheus" and url.port == 9090 and "9090:9090" in services["prometheus"]["ports"]
    (provider,) = _yaml(GRAFANA / "provisioning" / "dashboards" / "lakecluster.yml")["providers"]
    mounts = _host_mounts(services["grafana"])
    assert mounts[provider["options"]["path"]] == "./grafana/dashboards"
    assert mounts["/etc/grafana/provisioning"] == "./grafana/provisioning"
    dashboard = json.loads((GRAFANA / "dashboards" / "lakecluster.json").read_text())
    panels = [p for p in dashboard["panels"] if p["type"] != "row"]
    assert len(panels) >= 20
    for p in panels:
        assert p["datasource"]["uid"] == datasource["uid"], p["title"]
        assert p["targets"] and all(t["expr"].strip() for t in p["targets"]), p["title"]
    rows = {p["title"] for p in dashboard["panels"] if p["type"] == "row"}
    assert rows == {"Ingest", "Table layout", "Compaction", "Index and vacuum", "Services"}


@pytest.mark.integration
def test_init_creates_the_bucket_and_the_topic_and_can_run_again(kafka: KafkaBroker, s3: S3Server,
                                                                 tmp_path: Path) -> None:  # fmt: skip
    bucket, topic = f"init-{uuid.uuid4().hex[:8]}", f"init_{uuid.uuid4().hex[:8]}"
    text = (DOCKER / "lakecluster.toml").read_text()
    text = text.replace('"kafka:9092"', f'"{kafka.bootstrap}"').replace('"http://s3:8333"', f'"{s3.endpoint}"')
    text = text.replace('"s3://lakecluster/', f'"s3://{bucket}/').replace('["lineorder"]', f'["{topic}"]')
    config = tmp_path / "lakecluster.toml"
    config.write_text(text)
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("LAKECLUSTER_")},
           "AWS_ACCESS_KEY_ID": s3.access_key, "AWS_SECRET_ACCESS_KEY": s3.secret_key}  # fmt: skip
    for _ in range(2):  # a restarted init finds both and changes nothing
        result = subprocess.run([sys.executable, str(DOCKER / "init.py"), str(config), "--partitions", "3"], env=env,
                                capture_output=True, text=True, timeout=180)  # fmt: skip
        assert result.returncode == 0, result.stderr
        assert f"bucket {bucket} ready" in result.stdout and f"topics {topic} ready" in result.stdout
    assert s3.filesystem().get_file_info(bucket).type.name == "Directory"
    with kafka.admin() as admin:
        (described,) = admin.describe_topics([topic])
    assert len(described["partitions"]) == 3
