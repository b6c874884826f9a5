"""``lakecluster config`` and the configuration as the command line takes it: redaction, strict
types, unknown keys, and the metrics endpoint's address."""

from __future__ import annotations

import dataclasses
import json
import signal
import socket
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest

from lakecluster.cli import main
from lakecluster.config import Config, KafkaSourceConfig, TableConfig
from tests.cli.conftest import NO_JAVA_HOME
from tests.conftest import lakecluster_cmd, subprocess_env
from tests.services.ports import free_port

JAAS = 'org.apache.kafka.common.security.plain.PlainLoginModule required username="ingest" password="JAAS-PW-1";'
SECRET_FILE = f"""
[source.kafka.options]
"sasl.jaas.config" = '{JAAS}'
"ssl.key.password" = "KEY-PW-2"
"ssl.truststore.password" = "TRUST-PW-3"
"sasl.mechanism" = "PLAIN"
"security.protocol" = "SASL_SSL"
[storage]
s3_endpoint = "http://127.0.0.1:9000"
s3_access_key_id = "ACCESS-KEY-ID-4"
s3_secret_access_key = "SECRET-ACCESS-KEY-5"
s3_session_token = "FILE-TOKEN-6"
[spark.conf]
"spark.hadoop.fs.s3a.secret.key" = "S3A-SECRET-7"
"spark.hadoop.fs.azure.account.key.acct.dfs.core.windows.net" = "AZURE-KEY-8"
"spark.sql.shuffle.partitions" = 4
"""
# Secrets from the environment and from --set (a dotted option name below source.kafka.options).
ENV_SECRET = ("LAKECLUSTER_STORAGE__S3_SESSION_TOKEN", "ENV-TOKEN-9")
SET_SECRET = "source.kafka.options.ssl.keystore.password=SET-PW-10"
SECRETS = ["JAAS-PW-1", "KEY-PW-2", "TRUST-PW-3", "ACCESS-KEY-ID-4", "SECRET-ACCESS-KEY-5", "FILE-TOKEN-6",
           "S3A-SECRET-7", "AZURE-KEY-8", "ENV-TOKEN-9", "SET-PW-10", "ingest"]  # fmt: skip


@pytest.mark.parametrize("fmt", ["text", "json"])
def test_config_redacts_every_secret(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], fmt: str
) -> None:
    config = tmp_path / "c.toml"
    config.write_text(SECRET_FILE)
    monkeypatch.setenv(*ENV_SECRET)
    assert main(["--config", str(config), "--set", SET_SECRET, "--output", fmt, "config"]) == 0
    out, err = capsys.readouterr()
    assert [s for s in SECRETS if s in out + err] == []
    data = json.loads(out)
    kafka = data["source"]["kafka"]["options"]
    assert kafka == {"sasl.jaas.config": "***", "ssl.key.password": "***", "ssl.truststore.password": "***",
                     "sasl.mechanism": "PLAIN", "security.protocol": "SASL_SSL",
                     "ssl.keystore.password": "***"}  # fmt: skip
    storage = data["storage"]
    assert storage["s3_endpoint"] == "http://127.0.0.1:9000"
    assert [storage[k] for k in ("s3_access_key_id", "s3_secret_access_key", "s3_session_token")] == ["***"] * 3
    assert data["spark"]["conf"] == {"spark.hadoop.fs.s3a.secret.key": "***", "spark.sql.shuffle.partitions": "4",
                                     "spark.hadoop.fs.azure.account.key.acct.dfs.core.windows.net": "***"}  # fmt: skip


@pytest.mark.parametrize(
    "setting",
    [
        "storage.s3_secret_access_key=123456789",  # a number where a string is expected
        "source.kafka.options.sasl.jaas.config=[123456789]",  # a list where an option value is expected
    ],
)
def test_a_bad_secret_value_is_not_shown_in_the_error(capsys: pytest.CaptureFixture[str], setting: str) -> None:
    assert main(["--set", setting, "config"]) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert setting.partition("=")[0] in err and "***" in err
    assert "123456789" not in err


# (how, key, value, message): the same mistakes from a file, the environment and --set.
QUOTE = "write it in quotes; on the command line: --set"
STRICT = [
    ("file", "source.kafka.topics", '"ssb"', """expected a list, got 'ssb' (write ["ssb"])"""),
    ("env", "source.kafka.topics", "ssb", """expected a list, got 'ssb' (write ["ssb"])"""),
    ("set", "source.kafka.topics", "ssb", """expected a list, got 'ssb' (write ["ssb"])"""),
    ("file", "stream.trigger_interval_s", '"5"', "expected a number, got '5' (write 5 without quotes)"),
    ("env", "stream.trigger_interval_s", '"5"', "expected a number, got '5' (write 5 without quotes)"),
    ("set", "stream.trigger_interval_s", '"5"', "expected a number, got '5' (write 5 without quotes)"),
    ("file", "table.path", "5", f"""expected a string, got 5 ({QUOTE} 'table.path="5"')"""),
    ("env", "stream.id", "42", f"""expected a string, got 42 ({QUOTE} 'stream.id="42"')"""),
    ("set", "stream.id", "42", f"""expected a string, got 42 ({QUOTE} 'stream.id="42"')"""),
    ("file", "metrics.port", "9464.0", "expected an integer, got 9464.0"),
    ("set", "stream.progress", "yes", "expected true or false, got 'yes'"),
    ("set", "stream.progress", '"true"', "expected true or false, got 'true' (write true without quotes)"),
]  # fmt: skip


def _configure(how: str, key: str, value: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Arguments (and environment) that give ``key`` the raw ``value`` the way ``how`` says."""
    if how == "file":
        section, _, name = key.rpartition(".")
        config = tmp_path / "c.toml"
        config.write_text(f"[{section}]\n{name} = {value}\n")
        return ["--config", str(config)]
    if how == "env":
        monkeypatch.setenv("LAKECLUSTER_" + key.upper().replace(".", "__"), value)
        return []
    return ["--set", f"{key}={value}"]


def _source(how: str, key: str, tmp_path: Path) -> str:
    """Where the one-line message says ``key`` was set, as ``_configure`` set it."""
    if how == "file":
        return f"{tmp_path / 'c.toml'} line 2"
    if how == "env":
        return "LAKECLUSTER_" + key.upper().replace(".", "__")
    return f"--set {key}"


@pytest.mark.parametrize(("how", "key", "value", "message"), STRICT)
def test_values_are_typed_strictly_never_coerced(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    how: str,
    key: str,
    value: str,
    message: str,
) -> None:
    args = _configure(how, key, value, tmp_path, monkeypatch)
    assert main([*args, "config"]) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert err == f"lakecluster: configuration error in {_source(how, key, tmp_path)}: config key '{key}': {message}\n"


@pytest.mark.parametrize(
    ("how", "key", "value", "expected"),
    [
        ("file", "source.kafka.topics", '["ssb"]', ["ssb"]),
        ("env", "source.kafka.topics", '["ssb"]', ["ssb"]),
        ("set", "source.kafka.topics", '["ssb"]', ["ssb"]),
        ("env", "stream.trigger_interval_s", "5", 5.0),
        ("set", "stream.id", '"42"', "42"),
        ("set", "table.path", "/data/t", "/data/t"),
    ],
)
def test_values_of_the_right_type_are_taken(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    how: str,
    key: str,
    value: str,
    expected: object,
) -> None:
    args = _configure(how, key, value, tmp_path, monkeypatch)
    assert main([*args, "--output", "json", "config"]) == 0
    data = json.loads(capsys.readouterr().out)
    section, _, name = key.rpartition(".")
    for part in section.split("."):
        data = data[part]
    assert data[name] == expected


def _known(cls: type) -> str:
    return ", ".join(sorted(f.name for f in dataclasses.fields(cls)))


@pytest.mark.parametrize(
    ("how", "key", "value", "named", "cls", "meant"),
    [
        ("set", "table.clustring_columns", '["s_city"]', "table.clustring_columns", TableConfig,
         "'table.clustering_columns'"),
        ("file", "source.kafka.connect_retries", "5", "source.kafka.connect_retries", KafkaSourceConfig,
         "'source.kafka.connect_timeout_s'"),
        ("env", "tabel.path", "/data/t", "tabel", Config, "'table' (LAKECLUSTER_TABLE)"),
    ],
)  # fmt: skip
def test_unknown_key_is_named_with_the_known_ones(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    how: str,
    key: str,
    value: str,
    named: str,
    cls: type,
    meant: str,
) -> None:
    args = _configure(how, key, value, tmp_path, monkeypatch)
    assert main([*args, "config"]) == 2
    err = capsys.readouterr().err
    assert err == (f"lakecluster: configuration error in {_source(how, key, tmp_path)}: config key '{named}': "
                   f"unknown key; did you mean {meant}? known keys here: {_known(cls)}\n")  # fmt: skip


def _accepts(host: str, port: int) -> bool:
    try:
        socket.create_connection((host, port), timeout=2).close()
    except OSError:
        return False
    return True


@pytest.mark.parametrize(
    ("settings", "bound", "not_bound"),
    [([], "127.0.0.1", "127.0.0.2"), (["--set", "metrics.host=127.0.0.2"], "127.0.0.2", "127.0.0.1")],
    ids=["default", "metrics.host"],
)
def test_metrics_endpoint_binds_loopback_unless_told_otherwise(
    ssb_table: Path, tmp_path: Path, settings: list[str], bound: str, not_bound: str
) -> None:
    """``lakecluster compact`` on a table with nothing to compact serves metrics without Spark."""
    port = free_port()
    proc = subprocess.Popen(
        lakecluster_cmd("--set", f"table.path={ssb_table}", "--set", f"metrics.port={port}",
                        "--set", "vacuum.interval_s=0", "--set", "compaction.interval_s=3600", *settings, "compact"),
        cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env=subprocess_env(JAVA_HOME=NO_JAVA_HOME),
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        while not _accepts(bound, port) and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.2)
        assert proc.poll() is None, proc.communicate()
        with urllib.request.urlopen(f"http://{bound}:{port}/metrics", timeout=5) as response:
            assert b"lakecluster_compaction_runs_total" in response.read()
        # A wildcard (0.0.0.0) bind would accept on every local address; this one accepts on one.
        assert not _accepts(not_bound, port)
    finally:
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
