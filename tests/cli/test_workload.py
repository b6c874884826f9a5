"""``lakecluster workload``: the captured queries of a table as text and JSON, the settings that
turn the listener on, and expiry; no Spark starts (``run_cli``)."""

from __future__ import annotations

import json
import time
from pathlib import Path

from tests.cli.conftest import run_cli, tree, write_ssb_table
from tests.workload_records import event_log, record, write

NOW = time.time()
CITY = {"column": "s_city", "type": "string", "op": "=", "value": "UNITED KI1"}
YEAR = {"column": "d_year", "type": "int", "op": "in", "values": [1993, 1994]}
QTY = [{"column": "lo_quantity", "type": "int", "op": ">=", "value": 5},
       {"column": "lo_quantity", "type": "int", "op": "<", "value": 9}]  # fmt: skip


def _captured(tmp_path: Path) -> Path:
    """A table with two days of capture: yesterday 3 city queries, today 1 city query, 2 quantity
    ranges and a self-join (two scans of one query), and one corrupt file."""
    table = write_ssb_table(tmp_path / "lineorder")
    today = (NOW - 60) * 1000
    yesterday = today - 86_400_000 - 10  # exactly a day earlier: always another date
    write(table, yesterday, [record(yesterday + i, i, filters=[CITY], partition_filters=[YEAR], files_read=f)
                             for i, f in enumerate((4, 6, 8))])  # fmt: skip
    other = {"app_id": "local-2"}
    write(table, today, [
        record(today, 10, filters=[CITY], partition_filters=[YEAR], files_read=2, **other),
        record(today, 11, filters=QTY, files_read=30, **other), record(today, 12, filters=QTY, files_read=40, **other),
        record(today, 13, filters=[CITY], files_read=7, scan=0, **other),
        record(today, 13, filters=QTY, files_read=9, scan=1, **other),
    ], app="local-2")  # fmt: skip
    write(table, today, ["{corrupt"], app="local-3")
    return table


def test_workload_shows_top_shapes_files_read_per_query_and_per_day(tmp_path: Path) -> None:
    table = _captured(tmp_path)
    before = tree(table)
    proc = run_cli("--set", f"table.path={table}", "workload", "--json", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert (data["queries"], data["scans"], data["applications"], data["capture_files"]) == (7, 8, 2, 3)
    assert [(s["shape"], s["scans"]) for s in data["shapes"]] == [
        ("d_year IN AND s_city =", 4), ("lo_quantity BETWEEN", 3), ("s_city =", 1)]  # fmt: skip
    assert data["shapes"][0]["files_read_per_scan"] == {"mean": 5.0, "p50": 5.0, "max": 8}
    # Per query: the self-join's two scans count as one query of 16 files.
    assert data["files_read_per_query"] == {"mean": 15.1, "p50": 8, "max": 40}
    assert [(d["queries"], d["files_read_per_query"]["max"]) for d in data["days"]] == [(3, 8), (4, 40)]
    assert data["files_in_table"] == 20
    assert len(data["skipped"]) == 1 and data["skipped"][0]["file"].endswith("line 1")
    assert tree(table) == before, "workload wrote to the table"

    text = run_cli("--set", f"table.path={table}", "workload", "--top", "2", cwd=tmp_path)
    assert text.returncode == 0, text.stderr
    lines = text.stdout.splitlines()
    assert lines[0].startswith(f"workload of {table}: 7 quer(ies), 8 scan(s) of the table by 2 application(s)")
    assert "skipped" in lines[1] and "Expecting property name" in lines[1]
    assert "files read per query: mean 15.1, p50 8, max 40 (the table had 20 files)" in lines
    assert any(line.split()[:4] == ["d_year", "IN", "AND", "s_city"] and "50.0%" in line for line in lines)
    assert "  ... and 1 more shape(s) (--top, --json)" in lines
    assert len([line for line in lines if line.startswith("  20")]) == 2  # two days, oldest first
    assert "WARNING" in proc.stderr and "local-3-000001" in proc.stderr  # the warning names the file it skipped


def test_since_expire_and_a_table_without_capture(tmp_path: Path) -> None:
    table = _captured(tmp_path)
    recent = run_cli("--set", f"table.path={table}", "workload", "--since", "2h", "--json", cwd=tmp_path)
    assert recent.returncode == 0, recent.stderr
    assert json.loads(recent.stdout)["queries"] == 4
    old = (NOW - 40 * 86_400) * 1000
    stale = write(table, old, [record(old, 99)])
    expired = run_cli("--set", f"table.path={table}", "workload", "--expire", cwd=tmp_path)
    assert expired.returncode == 0, expired.stderr
    assert expired.stdout.startswith("expired 1 capture file(s)") and not stale.exists()
    empty = write_ssb_table(tmp_path / "other")
    nothing = run_cli("--set", f"table.path={empty}", "workload", cwd=tmp_path)
    assert nothing.returncode == 0 and "nothing captured" in nothing.stdout
    bad = run_cli("--set", f"table.path={empty}", "workload", "--since", "7 days", cwd=tmp_path)
    assert bad.returncode == 2 and "expected an age such as 7d" in bad.stderr


def test_listener_conf_prints_the_lines_an_application_adds(tmp_path: Path) -> None:
    proc = run_cli("workload", "--listener-conf", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert len(lines) == 2 and lines[0].startswith("spark.jars=/") and lines[0].endswith(".jar")
    assert Path(lines[0].split("=", 1)[1]).is_file()
    assert lines[1] == "spark.sql.queryExecutionListeners=lakecluster.workload.WorkloadListener"
    tuned = run_cli("--set", "workload.max_in_values=64", "--set", "workload.flush_interval_s=30", "--json",
                    "workload", "--listener-conf", cwd=tmp_path)  # fmt: skip
    assert tuned.returncode == 0, tuned.stderr
    conf = json.loads(tuned.stdout)
    assert conf["spark.lakecluster.workload.maxInValues"] == "64"
    assert conf["spark.lakecluster.workload.flushSeconds"] == "30"
    assert len(conf) == 4


def _event_log(path: Path, table: Path) -> Path:
    """A small event log: one SQL execution scanning the table with ``d_year = 1994``."""
    path.write_bytes(event_log(f"file:{table}", data_filters="[]", files_read=2, start_ms=int(NOW * 1000) - 5000,
                               partition_filters="[isnotnull(d_year#3), (d_year#3 = 1994)]"))  # fmt: skip
    return path


def test_import_eventlog_writes_records_the_workload_command_reads(tmp_path: Path) -> None:
    table = write_ssb_table(tmp_path / "lineorder")
    log = _event_log(tmp_path / "local-17", table)
    proc = run_cli("--set", f"table.path={table}", "workload", "--import-eventlog", str(log), "--json", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    assert (report["imported_scans"], report["files"]) == (1, 1)
    assert report["applications"][0]["app_id"] == "local-17"
    (record,) = [json.loads(f.read_text()) for f in (table / "_lakecluster" / "workload").rglob("*.jsonl")]
    assert record["partition_filters"] == [{"column": "d_year", "type": "int", "op": "=", "value": 1994}]
    assert [record[k] for k in ("query", "duration_ms", "files_read", "bytes_read")] == ["count", 700, 2, 900]
    shown = json.loads(run_cli("--set", f"table.path={table}", "workload", "--json", cwd=tmp_path).stdout)
    assert [(s["shape"], s["scans"]) for s in shown["shapes"]] == [("d_year =", 1)]
    again = run_cli("--set", f"table.path={table}", "workload", "--import-eventlog", str(log), cwd=tmp_path)
    assert again.returncode == 0, again.stderr
    assert again.stdout.startswith("imported 0 scan(s)") and "imported before: 1" in again.stdout


def test_import_eventlog_of_a_missing_path_or_another_file_is_one_line(tmp_path: Path) -> None:
    table = write_ssb_table(tmp_path / "lineorder")
    missing = run_cli("--set", f"table.path={table}", "workload", "--import-eventlog", str(tmp_path / "no"),
                      cwd=tmp_path)  # fmt: skip
    assert missing.returncode == 2 and missing.stderr.count("\n") == 1, missing.stderr
    assert "no such file or folder (give a Spark event log" in missing.stderr
    other = tmp_path / "notes.txt"
    other.write_text("hello\n")
    wrong = run_cli("--set", f"table.path={table}", "workload", "--import-eventlog", str(other), cwd=tmp_path)
    assert wrong.returncode == 2 and wrong.stderr == f"lakecluster: {other}: not a Spark event log (its first line " \
        "is not a Spark listener event)\n"
