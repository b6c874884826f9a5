"""``lakecluster`` without a command, and configuration errors: usage, exit status 2."""

from __future__ import annotations

import logging
import re
from pathlib import Path

import pytest

from lakecluster.cli import main
from lakecluster.cli.main import COMMANDS
from tests.cli.conftest import run_cli, tree


def test_bare_command_prints_help_to_stderr_and_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([]) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert err.startswith("usage: lakecluster")
    listed = set(re.findall(r"^ {4}(\w+) ", err, re.M))  # the subcommand list of the help
    assert listed == set(COMMANDS), listed


def test_bare_command_as_a_process_prints_help_and_exits_2(tmp_path: Path) -> None:
    proc = run_cli(cwd=tmp_path)
    assert proc.returncode == 2, proc.stderr
    assert proc.stdout == ""
    assert proc.stderr.startswith("usage: lakecluster")
    assert set(re.findall(r"^ {4}(\w+) ", proc.stderr, re.M)) == set(COMMANDS)
    assert tree(tmp_path) == []


def test_config_error_exits_2_and_names_the_key(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--set", "sketches.k=1", "config"]) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert err == ("lakecluster: configuration error in --set sketches.k: config key 'sketches.k': must be 8..65535, "
                   "got 1\n")


def test_set_without_equals_sign_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--set", "table.path", "config"]) == 2
    assert capsys.readouterr().err == (
        "lakecluster: configuration error in --set table.path: takes key=value, e.g. --set table.path=/data/t\n")


def test_json_log_format_writes_one_parseable_object_per_line() -> None:
    import json
    import logging
    import sys

    from lakecluster.cli.main import JsonFormatter

    try:
        raise ValueError("disk on fire")
    except ValueError:
        record = logging.LogRecord("lakecluster.x", logging.WARNING, __file__, 1, "round failed: %s", ("boom",),
                                   sys.exc_info())  # fmt: skip
    line = JsonFormatter().format(record)
    assert "\n" not in line
    data = json.loads(line)
    assert data["level"] == "WARNING" and data["logger"] == "lakecluster.x" and data["message"] == "round failed: boom"
    assert "ValueError: disk on fire" in data["exception"] and data["time"].endswith("+00:00")


@pytest.mark.parametrize(("flags", "shown"), [([], False), (["--debug"], True), (["--log-level", "DEBUG"], True)])
def test_kafka_pythons_own_warnings_reach_the_user_only_when_debugging(
    flags: list[str], shown: bool, caplog: pytest.LogCaptureFixture, capsys: pytest.CaptureFixture[str]
) -> None:
    # kafka-python (start-up checks, lag) warns about its event loop on a busy machine; a user's
    # stderr is for lakecluster's own lines.
    kafka_logger = logging.getLogger("kafka")
    level = kafka_logger.level
    try:
        assert main([*flags, "config"]) == 0
        with caplog.at_level(logging.DEBUG):
            logging.getLogger("kafka.net.selector").warning("Task ran for 0.131s (>0.100s threshold)")
        assert any("threshold" in r.getMessage() for r in caplog.records) is shown
    finally:
        kafka_logger.setLevel(level)
    capsys.readouterr()
