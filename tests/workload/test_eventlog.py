"""The event-log importer (``workload.eventlog``, ``workload.eventlog_import``) on logs written
by a real pyspark + delta-spark application (tests/eventlog_app.py, run once for the module in a
JVM of its own, since an event log is set before a session starts): its records against the query
listener's for the same queries in the same application, every codec and layout of a log Spark
writes, importing twice, a log still being written, malformed lines."""

from __future__ import annotations

import json
import logging
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from lakecluster.config import WorkloadConfig
from lakecluster.errors import InputError
from lakecluster.table import LakeTable
from lakecluster.workload.capture import read_capture
from lakecluster.workload.eventlog_import import import_eventlogs
from tests.conftest import subprocess_env
from tests.eventlog_app import QUERIES

pytestmark = pytest.mark.integration
APP = Path(__file__).parents[1] / "eventlog_app.py"


class Logs:
    """The logs the application wrote, its table and what its listener recorded."""

    def __init__(self, root: Path, table: Path, apps: dict[str, str], listener: list[dict[str, Any]]) -> None:
        self.root, self.table, self.apps, self.listener = root, table, apps, listener

    def of(self, name: str) -> Path:
        """The log (file or rolling folder) of application ``name``."""
        app = self.apps[name]
        return next(p for p in self.root.iterdir() if p.name.removeprefix("eventlog_v2_").split(".")[0] == app)

    def imported(self) -> list[dict[str, Any]]:
        files = sorted((self.table / "_lakecluster" / "workload").rglob("*.jsonl"))
        return sorted((json.loads(line) for f in files for line in f.read_text().splitlines()),
                      key=lambda r: (r["app_id"], r["execution_id"], r["scan"]))  # fmt: skip


@pytest.fixture(scope="module")
def logs(tmp_path_factory: pytest.TempPathFactory) -> Logs:
    root = tmp_path_factory.mktemp("eventlogs")
    (root / "logs").mkdir()
    table = root / "flat"
    proc = subprocess.run([sys.executable, str(APP), str(root / "logs"), str(table)], capture_output=True,
                          text=True, env=subprocess_env(), timeout=600)  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    apps = dict(line.split()[:2] for line in proc.stdout.splitlines() if line.strip())
    captured = table / "_lakecluster"
    listener = [json.loads(line) for f in sorted(captured.rglob("*.jsonl")) for line in f.read_text().splitlines()]
    shutil.rmtree(captured)  # the table's capture folder starts empty for each test
    # The listener stays registered in the JVM for the applications after the first: only the first's count.
    listener = sorted((r for r in listener if r["app_id"] == apps["queries"]),
                      key=lambda r: (r["execution_id"], r["scan"]))  # fmt: skip
    return Logs(root / "logs", table, apps, listener)


@pytest.fixture
def table(logs: Logs) -> Any:
    yield LakeTable.at(str(logs.table))
    shutil.rmtree(logs.table / "_lakecluster", ignore_errors=True)


def test_imported_scans_are_the_listeners_of_the_same_queries(logs: Logs, table: LakeTable) -> None:
    report = import_eventlogs(table, [str(logs.of("queries"))], WorkloadConfig())
    got, want = logs.imported(), logs.listener
    # Every scan of the table by a successful query, in the order the listener saw them; the scan of
    # plain parquet and the failed query are left out (the listener leaves them out too).
    assert len(got) == len(want) == len(QUERIES) + 3  # the join's two scans, the query after the append
    (app,) = report.applications
    assert app.skipped == {"failed executions (not imported)": 1}
    assert (app.imported_scans, app.malformed_lines, report.files) == (len(want), 0, 1)
    for where, g, w in zip([*QUERIES, "join", "join", "after the append"], got, want, strict=True):
        same = ("v", "app_id", "app_name", "table", "table_version", "scan", "scans", "files_read", "bytes_read")
        assert {k: g[k] for k in same} == {k: w[k] for k in same}, where
        assert g["files_total"] is None and abs(w["time_ms"] - g["time_ms"]) < 60_000
        for mine, theirs in zip(g["filters"] + g["partition_filters"], w["filters"] + w["partition_filters"],
                                strict=True):  # fmt: skip
            assert mine == theirs or _reads_less(mine, theirs), (where, mine, theirs)
    assert [g["table_version"] for g in got][-1] == 1  # after the append
    by_query = {QUERIES[i]: got[i] for i in range(len(QUERIES))}
    # Paris is UTC+1 in January: the plan printed 00:30 Paris time, the listener and the importer 23:30 UTC.
    assert by_query["ts >= TIMESTAMP'2026-01-01 00:30:00'"]["filters"] == [
        {"column": "ts", "type": "timestamp", "op": ">=", "value": "2025-12-31T23:30:00Z"}]
    assert by_query["city = 'A, B (x) ''q'' ü'"]["filters"] == [
        {"column": "city", "type": "string", "op": "=", "value": "A, B (x) 'q' ü"}]
    assert by_query["day > DATE'1995-06-01' AND revenue <= 12.5 AND part IN (0, 3)"]["partition_filters"] == [
        {"column": "part", "type": "int", "op": "in", "values": [0, 3]}]
    # The reader and `lakecluster workload` read them as the listener's.
    capture = read_capture(table, WorkloadConfig())
    assert capture.skipped == [] and len(capture.scans) == len(want)


def _reads_less(mine: dict[str, Any], theirs: dict[str, Any]) -> bool:
    """Where the plan's text says less than the listener saw: an IN list of strings as the range
    every reading lies in, an expression's text without Spark's SQL quoting."""
    if mine.get("op") == "in" and mine.get("count", 0) is None:
        return all(mine["min"] <= v <= mine["max"] for v in theirs["values"])
    return mine["op"] == theirs["op"] == "other" and mine["columns"] == theirs["columns"]


def test_importing_again_adds_nothing_and_a_log_in_progress_then_whole_imports_each_scan_once(
        logs: Logs, table: LakeTable, tmp_path: Path) -> None:  # fmt: skip
    plain = logs.of("plain")
    text = plain.read_text()
    # The application still running: its log so far, cut in the middle of a line.
    running = tmp_path / f"{plain.name}.inprogress"
    running.write_text(text[: len(text) // 2])
    first = import_eventlogs(table, [str(running)], WorkloadConfig())
    done = import_eventlogs(table, [str(plain)], WorkloadConfig())
    assert first.imported_scans + done.imported_scans == 1
    before = sorted(p.name for p in (logs.table / "_lakecluster").rglob("*.jsonl"))
    again = import_eventlogs(table, [str(plain), str(plain)], WorkloadConfig())
    assert again.imported_scans == 0 and again.files == 0
    assert [a.skipped for a in again.applications] == [{"imported before": 1}] * 2
    assert sorted(p.name for p in (logs.table / "_lakecluster").rglob("*.jsonl")) == before
    assert len(logs.imported()) == 1
    # The whole folder (spark.eventLog.dir): every application once; the listener's own is passed over
    # once the listener's files are there.
    shutil.rmtree(logs.table / "_lakecluster")
    listener_file = logs.table / "_lakecluster" / "workload" / "day=2026-11-27"
    listener_file.mkdir(parents=True)
    (listener_file / f"1795771881086-{logs.apps['queries']}-000001-f5839660.jsonl").write_text("")
    folder = import_eventlogs(table, [str(logs.root)], WorkloadConfig())
    by_name = {a.app_name: a for a in folder.applications}
    assert set(by_name) == {"queries", "plain", "lz4", "snappy"}
    assert by_name["queries"].imported_scans == 0
    assert by_name["queries"].skipped["the listener captured this application already"] == len(QUERIES) + 2


def test_every_codec_and_a_rolling_log_in_parts_give_the_same_records(logs: Logs, table: LakeTable,
                                                                       tmp_path: Path) -> None:  # fmt: skip
    assert logs.of("plain").is_file() and logs.of("lz4").suffix == ".lz4" and logs.of("snappy").suffix == ".snappy"
    assert logs.of("queries").is_dir() and next(logs.of("queries").glob("events_1_*")).suffix == ".zstd"
    records = {}
    for name in ("plain", "lz4", "snappy"):
        report = import_eventlogs(table, [str(logs.of(name))], WorkloadConfig())
        assert report.imported_scans == 1, name
        (records[name],) = [r for r in logs.imported() if r["app_name"] == name]
    shape = {name: (r["filters"], r["files_read"], r["bytes_read"], r["table_version"]) for name, r in records.items()}
    assert shape["plain"] == shape["lz4"] == shape["snappy"]
    assert shape["plain"][0] == [{"column": "qty", "type": "int", "op": "=", "value": 7}]
    assert shape["plain"][3] == 1 and shape["plain"][1] == logs.listener[-1]["files_read"]
    # A rolling log rolls between lines: an execution's start in one part, its end in the next.
    lines = logs.of("plain").read_text().splitlines(keepends=True)
    app = logs.apps["plain"]
    rolled = tmp_path / f"eventlog_v2_{app}"
    rolled.mkdir()
    middle = next(i for i, line in enumerate(lines) if "SQLExecutionStart" in line and '"Delta: ' not in line) + 1
    for n, part in ((1, lines[:middle]), (2, lines[middle:])):
        (rolled / f"events_{n}_{app}").write_text("".join(part))
    (rolled / f"appstatus_{app}").write_text("")
    shutil.rmtree(logs.table / "_lakecluster")
    assert import_eventlogs(table, [str(rolled)], WorkloadConfig()).imported_scans == 1
    (again,) = logs.imported()
    assert again == records["plain"]


def test_malformed_lines_are_skipped_with_a_warning_and_counted(logs: Logs, table: LakeTable, tmp_path: Path,
                                                                caplog: pytest.LogCaptureFixture) -> None:  # fmt: skip
    lines = logs.of("plain").read_text().splitlines(keepends=True)
    end = next(i for i, line in enumerate(lines) if "SQLExecutionEnd" in line)
    damaged = tmp_path / logs.apps["plain"]
    cut = '{"Event":"org.apache.spark.sql.execution.ui.SparkListenerSQLExecutionEnd","executionId":\n'
    damaged.write_text("".join([*lines[:3], "garbage\n", cut, *lines[3:end], "\x00\x01\n", *lines[end:]]))
    with caplog.at_level(logging.WARNING):
        report = import_eventlogs(table, [str(damaged)], WorkloadConfig())
    assert report.applications[0].malformed_lines == 3
    assert report.imported_scans == 1
    assert any(f"{damaged} line 4 skipped" in r.getMessage() for r in caplog.records)


def test_a_path_that_is_no_event_log_is_an_input_error(logs: Logs, table: LakeTable, tmp_path: Path) -> None:
    with pytest.raises(InputError, match="no such file or folder"):
        import_eventlogs(table, [str(tmp_path / "missing")], WorkloadConfig())
    text = tmp_path / "notes.txt"
    text.write_text("not a log\n")
    with pytest.raises(InputError, match="not a Spark event log"):
        import_eventlogs(table, [str(text)], WorkloadConfig())
    # In a folder, the same file is passed over and the logs beside it read.
    shutil.copy(logs.of("plain"), tmp_path / logs.of("plain").name)
    report = import_eventlogs(table, [str(tmp_path)], WorkloadConfig())
    assert report.imported_scans == 1 and [s["log"] for s in report.skipped_logs] == [str(text)]
