"""The compose deployment, checked without a Docker engine: every file it names exists, names and
ports agree between the services, published ports stay on loopback unless asked, secrets come only
from variables that docker/.env.example documents, Prometheus's own promtool accepts the config and
the rules and runs the alerts' unit tests, Alertmanager's amtool accepts its configuration, the
dashboard points at the provisioned datasource, the init script prepares a real S3 bucket and Kafka
topic, and a real broker run with the compose file's Kafka settings keeps its topics and offsets on
the volume."""

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
from tests.docker import compose as compose_file
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
    """The compose file as `docker compose` reads it with a docker/.env filled in from the example."""
    return compose_file.load(compose_file.example_environment())


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


def _anchor(heading: str) -> str:
    """The anchor a Markdown renderer (GitHub's, GitLab's) gives a heading."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def test_every_alert_links_its_runbook_section_under_the_documented_base() -> None:
    """runbook_url = the runbook_base external label (RUNBOOK_BASE_URL) + an anchor of docs/operations.md."""
    operations = (DOCKER.parent / "docs" / "operations.md").read_text()
    anchors = {_anchor(line.lstrip("#")) for line in operations.splitlines() if line.startswith("#")}
    rules = [r for g in _yaml(PROMETHEUS / "alerts.yml")["groups"] for r in g["rules"] if "alert" in r]
    for rule in rules:
        annotations = rule["annotations"]
        assert "runbook" not in annotations, f"{rule['alert']}: a repository path instead of runbook_url"
        base, _, anchor = annotations["runbook_url"].partition("#")
        assert base == "{{ $externalLabels.runbook_base }}", rule["alert"]
        assert anchor == rule["alert"].lower() and anchor in anchors, f"{rule['alert']}: no section #{anchor}"
    # The base is the deployment's variable, expanded by Prometheus from its environment.
    prometheus = _yaml(PROMETHEUS / "prometheus.yml")
    assert prometheus["global"]["external_labels"]["runbook_base"] == "${RUNBOOK_BASE_URL}"
    service = compose_file.raw()["services"]["prometheus"]
    assert "--enable-feature=expand-external-labels" in service["command"]
    assert compose_file.variables(service["environment"]["RUNBOOK_BASE_URL"]) == {"RUNBOOK_BASE_URL": ":?"}
    assert "RUNBOOK_BASE_URL" in (DOCKER.parent / "docs" / "operations.md").read_text()


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
    # The credentials the services use are the S3 store's identity, both from docker/.env.
    identities = json.loads(compose["configs"]["seaweedfs-s3"]["content"])["identities"]
    keys = {(c["accessKey"], c["secretKey"]) for i in identities for c in i["credentials"]}
    example = compose_file.example_environment()
    for name in ("init", *LAKECLUSTER_SERVICES):
        env = services[name]["environment"]
        assert env["AWS_ACCESS_KEY_ID"] == example["S3_ACCESS_KEY_ID"], name
        assert env["AWS_SECRET_ACCESS_KEY"] == example["S3_SECRET_ACCESS_KEY"], name
    assert keys == {(example["S3_ACCESS_KEY_ID"], example["S3_SECRET_ACCESS_KEY"])}
    assert {"source": "seaweedfs-s3", "target": "/etc/seaweedfs/s3.json"} in services["s3"]["configs"]
    assert "-s3.config=/etc/seaweedfs/s3.json" in services["s3"]["command"]
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
    assert url.hostname == "prometheus" and url.port == 9090
    assert "127.0.0.1:9090:9090" in services["prometheus"]["ports"]
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


def test_published_ports_listen_on_loopback_unless_bind_address_says_otherwise() -> None:
    example = compose_file.example_environment()
    for environ, address in ((example, "127.0.0.1"), ({**example, "BIND_ADDRESS": "0.0.0.0"}, "0.0.0.0")):
        services = compose_file.load(environ)["services"]
        published = {name: s["ports"] for name, s in services.items() if s.get("ports")}
        assert set(published) == {"prometheus", "alertmanager", "grafana"}
        for name, ports in published.items():
            for port in ports:
                host, host_port, container_port = str(port).split(":")
                assert host == address and host_port == container_port, f"{name} publishes {port}"
    # docker/.env.example leaves it at the default.
    assert "BIND_ADDRESS" not in example


def test_secrets_are_required_variables_documented_in_env_example() -> None:
    text = compose_file.COMPOSE.read_text()
    used = compose_file.variables(compose_file.raw())
    example_text = (DOCKER / ".env.example").read_text()
    documented = set(re.findall(r"^#?([A-Z][A-Z0-9_]*)=", example_text, re.M))
    assert set(used) == documented, f"variables not in docker/.env.example: {set(used) - documented}"
    # lakecluster reads LAKECLUSTER_* variables as configuration keys: a deployment's must not look like one.
    assert not [name for name in used if name.startswith("LAKECLUSTER_")]
    secrets = {"GRAFANA_ADMIN_PASSWORD", "S3_ACCESS_KEY_ID", "S3_SECRET_ACCESS_KEY", "ALERT_WEBHOOK_URL",
               "RUNBOOK_BASE_URL"}  # fmt: skip
    assert {name for name, op in used.items() if op == ":?"} == secrets
    # Each one missing stops compose with its name, as `${VAR:?message}` does.
    example = compose_file.example_environment()
    for name in secrets:
        with pytest.raises(compose_file.MissingVariable) as missing:
            compose_file.load({k: v for k, v in example.items() if k != name})
        assert missing.value.name == name
        with pytest.raises(compose_file.MissingVariable):
            compose_file.load({**example, name: ""})
    # No credential is written into the file: the demo keys and admin/admin are gone.
    assert not re.search(r"lakecluster-secret|admin/admin|GF_SECURITY_ADMIN_PASSWORD: *[\"']?\w", text)
    raw = compose_file.raw()
    for name, service in raw["services"].items():
        for key, value in (service.get("environment") or {}).items():
            if re.search(r"KEY|SECRET|PASSWORD|TOKEN", key):
                assert compose_file.variables(str(value)), f"{name}: {key} is written into compose.yaml"
    grafana = compose_file.load(example)["services"]["grafana"]["environment"]
    assert grafana["GF_AUTH_ANONYMOUS_ENABLED"] == "false" and "GF_AUTH_ANONYMOUS_ORG_ROLE" not in grafana
    assert grafana["GF_SECURITY_ADMIN_PASSWORD"] == example["GRAFANA_ADMIN_PASSWORD"]
    # The real .env stays out of git.
    ignored = subprocess.run(["git", "check-ignore", "-q", "docker/.env"], cwd=DOCKER.parent, check=False)
    assert ignored.returncode == 0, "docker/.env is not git-ignored"


def test_alertmanager_takes_prometheus_alerts_and_posts_them_to_the_webhook(compose: dict[str, Any],
                                                                           tmp_path: Path) -> None:  # fmt: skip
    services = compose["services"]
    alerting = _yaml(PROMETHEUS / "prometheus.yml")["alerting"]["alertmanagers"]
    (target,) = [t for a in alerting for s in a["static_configs"] for t in s["targets"]]
    host, port = target.split(":")
    assert host == "alertmanager" and f"{port}:{port}" in " ".join(services["alertmanager"]["ports"])
    assert "alertmanager" in services["prometheus"]["depends_on"]
    example = compose_file.example_environment()
    config = compose_file.alertmanager_config(example["ALERT_WEBHOOK_URL"])
    (receiver,) = [r for r in config["receivers"] if r["name"] == config["route"]["receiver"]]
    assert [w["url"] for w in receiver["webhook_configs"]] == [example["ALERT_WEBHOOK_URL"]]
    mounted = {"source": "alertmanager", "target": "/etc/alertmanager/alertmanager.yml"}
    assert mounted in services["alertmanager"]["configs"]
    assert "--config.file=/etc/alertmanager/alertmanager.yml" in services["alertmanager"]["command"]
    amtool = shutil.which("amtool")
    assert amtool is not None, "amtool is missing: install Debian's prometheus-alertmanager (.ci/install does)"
    (tmp_path / "alertmanager.yml").write_text(yaml.safe_dump(config))
    checked = subprocess.run([amtool, "check-config", str(tmp_path / "alertmanager.yml")], capture_output=True,
                             text=True, timeout=60)  # fmt: skip
    assert checked.returncode == 0, checked.stdout + checked.stderr


def test_the_stream_and_the_compactor_are_probed_for_readiness(compose: dict[str, Any]) -> None:
    config = load_config(DOCKER / "lakecluster.toml")
    for name in ("stream", "compactor"):
        test = compose["services"][name]["healthcheck"]["test"]
        assert f"http://localhost:{config.metrics.port}/readyz" in " ".join(test), name


@pytest.mark.integration
def test_kafka_keeps_topics_and_offsets_on_its_volume_across_a_new_container(tmp_path: Path) -> None:
    """The compose file's broker settings, run by a real broker: paths on the service's volume live in
    one directory, every other container path in another that a new container starts without."""
    from kafka import KafkaConsumer, TopicPartition
    from kafka.structs import OffsetAndMetadata

    kafka = compose_file.raw()["services"]["kafka"]
    settings = compose_file.kafka_settings(kafka["environment"])
    volumes = compose_file.named_volumes(kafka)
    volume, container = tmp_path / "volume", tmp_path / "container"

    def on_host(path: str) -> Path:
        for target, name in volumes.items():
            if path == target or path.startswith(target.rstrip("/") + "/"):
                return volume / name / path[len(target) :].lstrip("/")
        return container / path.lstrip("/")

    settings["log.dirs"] = ",".join(str(on_host(p)) for p in settings["log.dirs"].split(","))
    broker = KafkaBroker(tmp_path / "broker", settings=settings)
    topic, group = "persisted", "lakecluster-test"
    broker.start()
    try:
        broker.create_topic(topic, 1)
        broker.produce(topic, [(0, b"a"), (0, b"b"), (0, b"c")])
        consumer = KafkaConsumer(bootstrap_servers=broker.bootstrap, group_id=group, enable_auto_commit=False)
        try:
            consumer.commit({TopicPartition(topic, 0): OffsetAndMetadata(2, "", -1)})
        finally:
            consumer.close()
    finally:
        broker.stop()
    shutil.rmtree(container, ignore_errors=True)  # `docker compose up` after `down`: a new container
    broker.start()
    try:
        assert broker.end_offsets(topic) == {0: 3}
        consumer = KafkaConsumer(bootstrap_servers=broker.bootstrap, group_id=group, enable_auto_commit=False)
        try:
            assert consumer.committed(TopicPartition(topic, 0)) == 2
        finally:
            consumer.close()
    finally:
        broker.stop()
