"""``lakecluster stream`` as a user runs it: the embedded default, clean stops, clear errors."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from lakecluster.cli import main
from tests.broker import Broker, free_port
from tests.conftest import lakecluster_cmd, read_delta, subprocess_env


def group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return True


# How the stop arrives in production: docker/k8s signal the main process; systemd
# (KillMode=control-group) and `timeout` signal every process of the group, the JVM and the
# Python workers included; Ctrl-C in a terminal sends SIGINT to the foreground group.
STOPS = {
    "sigterm-to-driver": lambda proc: proc.send_signal(signal.SIGTERM),
    "sigterm-to-group": lambda proc: os.killpg(proc.pid, signal.SIGTERM),
    "ctrl-c-to-group": lambda proc: os.killpg(proc.pid, signal.SIGINT),
}


@pytest.mark.integration
@pytest.mark.parametrize("stop", list(STOPS))
def test_no_arguments_runs_the_generator_and_a_stop_signal_stops_cleanly(tmp_path: Path, stop: str) -> None:
    proc = subprocess.Popen(
        lakecluster_cmd(
            "--set", "source.generator.rows_per_second=20000", "--set", "stream.trigger_interval_s=1", "stream"
        ),
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=subprocess_env(),
        start_new_session=True,
    )
    assert proc.stdout is not None
    lines: list[str] = []
    deadline = time.monotonic() + 240
    while sum(line.startswith("batch") for line in lines) < 2 and time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            break
        lines.append(line)
    STOPS[stop](proc)
    rest, _ = proc.communicate(timeout=120)
    output = "".join(lines) + rest
    assert proc.returncode == 0, output[-3000:]
    batch_lines = [ln for ln in output.splitlines() if ln.startswith("batch")]
    assert len(batch_lines) >= 2, output[-3000:]
    assert all(w in batch_lines[0] for w in ("rows", "rows/s", "files", "quarantined"))
    assert "stopped after" in output
    deadline = time.monotonic() + 30
    while group_alive(proc.pid) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert not group_alive(proc.pid), "the JVM or a Python worker outlived the driver"

    table = read_delta(tmp_path / "lakecluster-data" / "lineorder")
    keys = sorted(table.column("lo_orderkey").to_pylist())
    # The generator's offsets are its order keys: a clean stop leaves exactly a prefix, once.
    assert keys == list(range(len(keys))) and len(keys) > 0
    assert (tmp_path / "lakecluster-data" / "lineorder" / "_lakecluster" / "sketches").is_dir()


def test_config_error_exits_2_and_names_the_key(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--set", "sketches.k=1", "config"]) == 2
    assert "sketches.k" in capsys.readouterr().err


@pytest.mark.integration
def test_unreachable_broker_fails_after_retries(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rc = main(
        [
            "--set",
            "source.kind=kafka",
            "--set",
            f"source.kafka.bootstrap_servers=127.0.0.1:{free_port()}",
            "--set",
            'source.kafka.topics=["t"]',
            "--set",
            "source.kafka.connect_retries=2",
            "--set",
            "source.kafka.connect_backoff_s=0.05",
            "--set",
            f"table.path={tmp_path / 't'}",
            "stream",
        ]
    )
    err = capsys.readouterr().err
    assert rc == 1 and "BrokerUnavailableError" in err and "after 3 attempts" in err


@pytest.mark.integration
def test_missing_topic_is_named(broker: Broker, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rc = main(
        [
            "--set",
            "source.kind=kafka",
            "--set",
            f"source.kafka.bootstrap_servers={broker.bootstrap}",
            "--set",
            'source.kafka.topics=["no_such_topic"]',
            "--set",
            f"table.path={tmp_path / 't'}",
            "stream",
        ]
    )
    err = capsys.readouterr().err
    assert rc == 1 and "TopicNotFoundError" in err and "no_such_topic" in err


def test_unwritable_table_path(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    blocker = tmp_path / "a_file"
    blocker.write_text("not a directory")
    assert main(["--set", f"table.path={blocker / 'table'}", "stream"]) == 1
    err = capsys.readouterr().err
    assert "TableNotWritableError" in err and str(blocker / "table") in err


def test_config_schema_disagreeing_with_existing_table(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from lakecluster.config import load_config
    from lakecluster.stream.job import preflight

    path = tmp_path / "t"
    preflight(load_config(overrides={"table.path": str(path)}, environ={}))  # creates the table
    toml = tmp_path / "c.toml"
    toml.write_text(
        f'[table]\npath = "{path}"\npartition_by = []\nclustering_columns = ["s_city"]\n'
        'columns = [{ name = "s_city", type = "string" }, { name = "lo_quantity", type = "int" }]\n'
    )
    assert main(["--config", str(toml), "stream"]) == 1
    err = capsys.readouterr().err
    assert "SchemaMismatchError" in err and "lo_orderkey" in err and "partitioned by ['d_year']" in err
