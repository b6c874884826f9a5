"""The dashboard and the alert rules against live services: a real Prometheus, configured from
docker/prometheus/, scrapes a real `lakecluster stream` (Kafka source) and `lakecluster compact`.
The dashboard's template variables resolve to the live table and instances; every panel's query,
with the variables substituted as Grafana does, returns data; both services serve their JVM's
heap; every alert rule evaluates over series the services serve, and the stalled-stream alert
fires once the stream is stopped."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from deltalake import DeltaTable

from lakecluster.metrics import REGISTRY
from tests.conftest import lakecluster_cmd, subprocess_env
from tests.generated_tables import SMALL
from tests.prometheus import Prometheus, rules_held_for, start_prometheus
from tests.services.kafka import KafkaBroker
from tests.services.ports import free_port

pytestmark = pytest.mark.integration

DOCKER = Path(__file__).resolve().parents[2] / "docker"
RECORDS, MALFORMED_EVERY = 3000, 100
VALID = RECORDS - RECORDS // MALFORMED_EVERY
# Series names in an expression: metric names and recording rules, not functions or label names.
SERIES = re.compile(r"\b(lakecluster_[a-z_]+|process_[a-z_]+|up)\b(?!\s*\()")
# Series a service serves only in some configurations, which the live services here do not use: the
# alert rules over them are checked against the metrics lakecluster defines instead.
CONFIGURATION_ONLY = {"lakecluster_schema_registry_up"}  # a stream of Avro records
HOLD = "3s"  # the alerts' `for`, shortened so that "fires" is seen in seconds; alerts.test.yml tests the real ones


def _prometheus_config(workdir: Path, ports: dict[str, int]) -> str:
    """docker/prometheus/prometheus.yml with local targets, 1 s intervals and the shortened rules."""
    config = yaml.safe_load((DOCKER / "prometheus" / "prometheus.yml").read_text())
    config["global"] = {"scrape_interval": "1s", "scrape_timeout": "900ms", "evaluation_interval": "1s"}
    for job in config["scrape_configs"]:
        for static in job["static_configs"]:
            static["targets"] = [f"127.0.0.1:{ports[static['labels']['role']]}"]
    config["rule_files"] = [str(rules_held_for(DOCKER / "prometheus" / "alerts.yml", workdir, HOLD))]
    return yaml.safe_dump(config)


LABEL_VALUES = re.compile(r"^label_values\((?P<selector>.+),\s*(?P<label>\w+)\)$")


def _variable_values(prom: Prometheus, dashboard: dict) -> dict[str, list[str]]:
    """Each template variable's values as Grafana lists them (``label_values(selector, label)`` through
    Prometheus's label values API, the earlier variables substituted into the selector with all their values)."""
    values: dict[str, list[str]] = {}
    for variable in dashboard["templating"]["list"]:
        match = LABEL_VALUES.match(variable["query"]["query"])
        assert match, variable["query"]
        selector = _substituted(match["selector"], {name: _regex(v) for name, v in values.items()})
        url = f"{prom.url}/api/v1/label/{match['label']}/values?" + urllib.parse.urlencode({"match[]": selector})
        with urllib.request.urlopen(url, timeout=10) as r:
            values[variable["name"]] = sorted(json.load(r)["data"])
    return values


def _regex(values: list[str]) -> str:
    """Chosen values as Grafana writes them into a Prometheus regex matcher: escaped, the
    backslashes doubled inside PromQL's double-quoted string, alternatives in parentheses."""
    return "(" + "|".join(re.escape(v).replace("\\", "\\\\") for v in values) + ")"


def _substituted(expr: str, regexes: dict[str, str]) -> str:
    for name, regex in sorted(regexes.items(), key=lambda kv: -len(kv[0])):  # $instance before a $inst
        expr = expr.replace(f"${name}", regex)
    return expr


def _get(url: str) -> int:
    try:
        with urllib.request.urlopen(url, timeout=10) as r:
            return int(r.status)
    except urllib.error.HTTPError as e:
        return int(e.code)


def _wait(what: str, check, timeout_s: float = 600, every_s: float = 1.0) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(every_s)
    raise AssertionError(f"timed out after {timeout_s:.0f}s waiting for {what}")


def _start(args: list[str], log: Path) -> subprocess.Popen[bytes]:
    return subprocess.Popen(lakecluster_cmd(*args), env=subprocess_env(), stdout=log.open("wb"),
                            stderr=subprocess.STDOUT, start_new_session=True)  # fmt: skip


def _stop(proc: subprocess.Popen[bytes], log: Path) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=180)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, log.read_text()[-3000:]


@pytest.fixture
def deployment(kafka: KafkaBroker, tmp_path: Path) -> Iterator[dict]:
    topic = f"mon_{uuid.uuid4().hex[:8]}"
    kafka.create_topic(topic, 4)
    table = tmp_path / "lineorder"
    ports = {"stream": free_port(), "compactor": free_port()}
    base = [f"--set={k}={v}" for k, v in {
        **SMALL, "source.kind": "kafka", "source.kafka.bootstrap_servers": kafka.bootstrap,
        "source.kafka.topics": f'["{topic}"]', "source.kafka.max_offsets_per_trigger": "1500",
        "table.path": str(table), "metrics.table_interval_s": "1", "stream.lag_interval_s": "1",
        "compaction.interval_s": "1", "vacuum.interval_s": "5",
    }.items()]  # fmt: skip
    produced = subprocess.run(lakecluster_cmd(*base, "produce", "--records", str(RECORDS), "--rate", "5000",
                                              "--malformed-every", str(MALFORMED_EVERY)),
                              env=subprocess_env(), capture_output=True, text=True, timeout=300)  # fmt: skip
    assert produced.returncode == 0 and f"{RECORDS:,} records sent" in produced.stdout, produced.stderr
    (tmp_path / "prom").mkdir()
    prometheus = start_prometheus(tmp_path / "prom", config_text=_prometheus_config(tmp_path, ports))
    logs = {name: tmp_path / f"{name}.log" for name in ports}
    procs: dict[str, subprocess.Popen[bytes]] = {}
    try:
        procs["stream"] = _start([*base, f"--set=metrics.port={ports['stream']}", "stream"], logs["stream"])
        _wait("the stream's table", lambda: (table / "_delta_log").is_dir() and any((table / "_delta_log").iterdir()))
        procs["compactor"] = _start([*base, f"--set=metrics.port={ports['compactor']}", "compact"], logs["compactor"])
        yield {"prometheus": prometheus, "table": table, "ports": ports, "procs": procs, "logs": logs}
    finally:
        for proc in procs.values():
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        prometheus.stop()


def _settled(prom: Prometheus, table: Path) -> bool:
    try:
        version = DeltaTable(str(table)).version()
    except Exception:
        return False
    checks = [
        prom.value("sum(lakecluster_stream_rows_total)") == VALID,
        (prom.value('sum(lakecluster_compaction_groups_total{result="committed"})') or 0) > 0,
        prom.value("max(lakecluster_table_version)") == version,
        (prom.value("sum(lakecluster_vacuum_runs_total)") or 0) > 0,
        (prom.value("sum(lakecluster_index_sync_seconds_count)") or 0) > 0,
        prom.value("sum(lakecluster_stream_lag_records)") == 0,
        bool(prom.query("lakecluster:compaction_write_amplification:ratio_rate1h")),
    ]
    return all(checks)


def test_dashboard_panels_and_alert_rules_work_on_live_services(deployment: dict) -> None:
    prom: Prometheus = deployment["prometheus"]
    table: Path = deployment["table"]
    _wait("the stream and the compactor to settle", lambda: _settled(prom, table), timeout_s=900, every_s=2)
    time.sleep(3)  # a few more scrapes and rule evaluations on the settled state

    dashboard = json.loads((DOCKER / "grafana" / "dashboards" / "lakecluster.json").read_text())
    # The variables list the live table (named after table.path's last segment) and both services.
    variables = _variable_values(prom, dashboard)
    ports = deployment["ports"]
    assert variables == {"table": ["lineorder"], "instance": sorted(f"127.0.0.1:{p}" for p in ports.values())}
    exprs = [(p["title"], t["expr"]) for p in dashboard["panels"] if p["type"] != "row" for t in p["targets"]]
    unfiltered = [f"{title}: {e}" for title, e in exprs if "$table" not in e]
    assert not unfiltered, "dashboard queries not filtered by the table:\n" + "\n".join(unfiltered)
    # Every panel has data for the live values and for "All" (each variable's allValue).
    chosen = {name: _regex(v) for name, v in variables.items()}
    every = {v["name"]: v["allValue"] for v in dashboard["templating"]["list"]}
    for regexes in (chosen, every):
        empty = [f"{title}: {e}" for title, e in exprs if not prom.query(_substituted(e, regexes))]
        assert not empty, f"dashboard queries without data for {regexes}:\n" + "\n".join(empty)
    # Each service alone: valid queries (Prometheus.query asserts success); the other role's panels may be empty.
    for instance in variables["instance"]:
        for _, e in exprs:
            prom.query(_substituted(e, {**chosen, "instance": _regex([instance])}))
    # The driver memory panel shows each service's JVM heap, not only its Python process. (Over the
    # last minute: on a loaded machine a read can miss its 0.5 s bound and leave out one scrape.)
    heap = prom.query('max_over_time(lakecluster_jvm_memory_bytes{area="heap", kind="used", table="lineorder"}[1m])')
    assert {dict(k)["role"] for k, v in heap.items() if v > 0} == {"stream", "compactor"}
    assert prom.query('count by (role) (lakecluster_jvm_gc_collection_seconds_total{table="lineorder"})')
    # Every lakecluster series of both services carries the table.
    assert not prom.query('count({__name__=~"lakecluster_.+", job=~"lakecluster-.+", table!="lineorder"})')
    # A few panels carry values the test can know.
    assert prom.value('sum(rate(lakecluster_stream_quarantined_total{reason="not_json"}[5m])) > 0') is not None
    assert prom.value("sum(lakecluster_stream_quarantined_total)") == RECORDS // MALFORMED_EVERY
    assert prom.value("sum(lakecluster_stream_delay_seconds_count)") == VALID + RECORDS // MALFORMED_EVERY

    rules = [r for g in yaml.safe_load((DOCKER / "prometheus" / "alerts.yml").read_text())["groups"]
             for r in g["rules"]]  # fmt: skip
    missing = []
    for rule in rules:
        prom.query(rule["expr"])  # evaluates without error (Prometheus.query asserts success)
        for name in set(SERIES.findall(rule["expr"])) - CONFIGURATION_ONLY:
            if not prom.query(f'count({{__name__="{name}"}})'):
                missing.append(f"{rule.get('alert') or rule.get('record')}: {name}")
    assert not missing, "alert rules over series no service serves:\n" + "\n".join(missing)
    defined = {metric.name for metric in REGISTRY.collect()}
    assert CONFIGURATION_ONLY <= defined, CONFIGURATION_ONLY - defined

    firing = {a["labels"]["alertname"] for a in prom.alerts() if a["state"] == "firing"}
    assert not firing, f"alerts firing on healthy services: {firing}"
    for port in deployment["ports"].values():
        assert _get(f"http://127.0.0.1:{port}/healthz") == 200
        assert _get(f"http://127.0.0.1:{port}/readyz") == 200

    _stop(deployment["procs"]["stream"], deployment["logs"]["stream"])

    def stalled() -> bool:
        return any(a["labels"]["alertname"] == "LakeclusterStreamStalled" and a["state"] == "firing"
                   and a["labels"].get("role") == "stream" for a in prom.alerts())  # fmt: skip

    _wait("LakeclusterStreamStalled to fire", stalled, timeout_s=60)
    _stop(deployment["procs"]["compactor"], deployment["logs"]["compactor"])
