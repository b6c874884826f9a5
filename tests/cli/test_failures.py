"""Predictable faults: one line saying what and what to do, exit 1; ``--debug`` adds the trace.

Every command here fails before Spark would start (the subprocesses cannot start it), so no JVM runs.
"""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from lakecluster.cli import main
from tests.cli.conftest import run_cli, tree, write_ssb_table
from tests.conftest import lakecluster_cmd, subprocess_env
from tests.services.ports import free_port

TRACE = "Traceback (most recent call last)"


@dataclass(frozen=True)
class Fault:
    args: list[str]
    message: str  # the whole of stderr without --debug; its last lines with --debug
    created: list[str] | None  # what tmp_path holds afterwards (None: not checked)


def fault(name: str, tmp_path: Path, busy_port: int) -> Fault:
    """The command line of one predictable fault and the message it must give."""
    table = tmp_path / "t"
    port_message = (f"lakecluster: LakeclusterError: cannot serve metrics on 127.0.0.1:{busy_port} (Address already "
                    "in use): set metrics.port to a free port, or 0 to turn metrics off\n")  # fmt: skip
    if name.startswith("port in use: "):
        command = name.removeprefix("port in use: ")
        if command == "compact":
            write_ssb_table(table)
        created = tree(tmp_path)
        return Fault(["--set", f"table.path={table}", "--set", f"metrics.port={busy_port}", command], port_message,
                     created)  # fmt: skip
    if name.startswith("unwritable location: "):
        blocker = tmp_path / "a_file"
        blocker.write_text("not a directory")
        under = blocker / "t"
        return Fault(
            ["--set", f"table.path={under}", "--set", "metrics.port=0", name.removeprefix("unwritable location: ")],
            f"lakecluster: TableNotWritableError: table location {under} is not writable: [Errno 20] Cannot create "
            f"directory '{under}'. Detail: [errno 20] Not a directory\n",
            ["a_file"],
        )
    if name == "missing table":
        return Fault(
            ["--set", f"table.path={table}", "explain", "--where", "d_year = 1995"],
            f"lakecluster: TableNotFoundError: no Delta table at {table} (check table.path; the stream creates it "
            "on its first run)\n",
            [],
        )
    assert name == "unreachable broker"
    port = free_port()
    return Fault(
        ["--set", "source.kind=kafka", "--set", f"source.kafka.bootstrap_servers=127.0.0.1:{port}",
         "--set", 'source.kafka.topics=["t"]', "--set", "source.kafka.connect_timeout_s=0.5",
         "--set", f"table.path={table}", "--set", "metrics.port=0", "stream"],
        f"lakecluster: BrokerUnavailableError: no Kafka broker answered at 127.0.0.1:{port} within 0.5s "
        f"(127.0.0.1:{port}: [Errno 111] Connection refused); check source.kafka.bootstrap_servers and that the "
        "brokers are running\n",
        [],
    )  # fmt: skip


FAULTS = [
    "port in use: stream",
    "port in use: run",
    "port in use: compact",
    "unwritable location: stream",
    "unwritable location: run",
    "missing table",
    "unreachable broker",
]


def without_waiting_lines(stderr: str) -> str:
    """stderr without the lines a wait for a Kafka broker logs while it lasts (tests/cli/test_kafka_failures.py)."""
    return "".join(line for line in stderr.splitlines(keepends=True) if "waiting for a Kafka broker" not in line)


@pytest.mark.parametrize("name", FAULTS)
def test_fault_is_one_message_without_a_trace(tmp_path: Path, busy_port: int, name: str) -> None:
    f = fault(name, tmp_path, busy_port)
    proc = run_cli(*f.args, cwd=tmp_path)
    assert proc.returncode == 1, proc.stderr
    assert without_waiting_lines(proc.stderr) == f.message
    if f.created is not None:
        assert tree(tmp_path) == f.created


@pytest.mark.parametrize("name", FAULTS)
def test_debug_adds_the_trace_before_the_message(tmp_path: Path, busy_port: int, name: str) -> None:
    f = fault(name, tmp_path, busy_port)
    proc = run_cli("--debug", *f.args, cwd=tmp_path)
    assert proc.returncode == 1, proc.stderr
    stderr = without_waiting_lines(proc.stderr)
    assert stderr.startswith(TRACE) and stderr.endswith(f.message)
    assert 'File "' in proc.stderr  # frames of the trace


def test_unquoted_string_value_gets_a_hint_to_quote_it(ssb_table: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--set", f"table.path={ssb_table}", "explain", "--where", "s_city = UNITED KI1"]) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert err == (
        "lakecluster: --where, character 10: expected a value after '=', found 'UNITED'; string values need quotes: "
        "'UNITED KI1'\n"
    )
    assert TRACE not in err
    # As the hint says, quoted it works: the table has 2,000 rows in 7 partition files.
    assert main(["--set", f"table.path={ssb_table}", "explain", "--where", "s_city = 'UNITED KI1'"]) == 0
    assert "files: 7 total" in capsys.readouterr().out


def test_broken_pipe_exits_141_without_a_word(tmp_path: Path) -> None:
    """`lakecluster config | head -c 10`: the output is larger than a pipe holds, so the write must fail."""
    config = tmp_path / "c.toml"
    config.write_text(f'[spark.conf]\n"lakecluster.filler" = "{"x" * (1 << 20)}"\n')
    command = " ".join(lakecluster_cmd("--config", str(config), "config"))
    proc = subprocess.run(
        ["bash", "-c", f'{command} | head -c 10; echo " status=${{PIPESTATUS[0]}}"'],
        capture_output=True,
        text=True,
        env=subprocess_env(),
        timeout=60,
        cwd=tmp_path,
    )
    assert proc.stderr == ""
    assert proc.stdout == '{\n  "sourc status=141\n'


def test_broken_pipe_on_a_closed_reader(tmp_path: Path) -> None:
    """A reader that is already gone: the first write fails; still nothing on stderr."""
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        proc = subprocess.run(
            [sys.executable, "-m", "lakecluster", "config"],
            stdout=write_end,
            stderr=subprocess.PIPE,
            text=True,
            env=subprocess_env(),
            timeout=60,
            cwd=tmp_path,
        )
    finally:
        os.close(write_end)
    assert (proc.returncode, proc.stderr) == (141, "")


def test_schema_disagreeing_with_the_existing_table_is_named(ssb_table: Path, tmp_path: Path) -> None:
    toml = tmp_path / "c.toml"
    toml.write_text(
        f'[table]\npath = "{ssb_table}"\npartition_by = []\nclustering_columns = ["s_city"]\n'
        'columns = [{ name = "s_city", type = "string" }, { name = "lo_quantity", type = "long" }]\n'
        "[metrics]\nport = 0\n"
        # The Kafka source takes any schema; the table is checked before any broker is asked.
        f'[source]\nkind = "kafka"\n[source.kafka]\ntopics = ["t"]\nbootstrap_servers = "127.0.0.1:{free_port()}"\n'
    )
    proc = run_cli("--config", str(toml), "stream", cwd=tmp_path)
    assert proc.returncode == 1, proc.stderr
    [line] = proc.stderr.splitlines()
    assert line.startswith(f"lakecluster: SchemaMismatchError: schema of existing table {ssb_table} disagrees")
    assert "column 'lo_quantity' is int32 in the table, int64 in the config" in line
    # A nullable column beside the declared ones is no difference: the stream writes null into it.
    assert "lo_orderkey" not in line and "c_city" not in line
    assert "table is partitioned by ['d_year'], config says []" in line
