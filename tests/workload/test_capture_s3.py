"""Workload capture on a real S3 server (SeaweedFS): the query listener writing into an ``s3://``
table's capture folder from a Spark application that names the table ``s3a://`` and ``s3://``;
``read_capture`` and ``lakecluster workload`` reading it back; ``expire`` on a store without
directories; the event-log importer writing into the folder, twice.

The suite's session (``spark`` in tests/conftest.py) has no S3 jars, so the capturing application
is a subprocess of its own (as another team's application would be), started with lakecluster's
settings for S3 and the listener; everything else runs in this process or in ``lakecluster``
subprocesses that start no Spark."""

from __future__ import annotations

import datetime as dt
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.fs as pafs
import pytest
from deltalake import write_deltalake

from lakecluster.config import StorageConfig, WorkloadConfig
from lakecluster.table import LakeTable
from lakecluster.workload.capture import expire, read_capture
from lakecluster.workload.eventlog_import import import_eventlogs
from lakecluster.workload.queries import Predicate
from tests.cli.conftest import run_cli
from tests.conftest import subprocess_env
from tests.services.s3 import S3Server, unique_prefix
from tests.workload_records import event_log

pytestmark = pytest.mark.integration

# (the form the application names the table in, its filter): every form reaches the same table.
QUERIES = [("s3a", "city = 'CITY7'"), ("s3", "qty >= 10 AND qty < 20 AND part = 1"), ("s3a", "qty IN (30, 31, 80)")]

APPLICATION = """
import json, sys
from lakecluster.config import SparkConfig, StorageConfig
from lakecluster.spark import get_session
from lakecluster.workload.listener import LISTENER_CLASS, LISTENERS_KEY, listener_jar
from tests.spark_scans import files_scanned

table, storage, queries = sys.argv[1], json.loads(sys.argv[2]), json.loads(sys.argv[3])
config = SparkConfig(master="local[1]", conf={"spark.sql.shuffle.partitions": "1"})
spark = get_session(config, StorageConfig(**storage), s3=True, app_name="dashboards",
                    extra={LISTENERS_KEY: LISTENER_CLASS}, extra_jars=[listener_jar(config)])
files = []
for scheme, where in queries:
    frame = spark.read.format("delta").load(table.replace("s3://", scheme + "://", 1)).where(where)
    frame.collect()
    files.append(files_scanned(frame))
print(json.dumps({"app_id": spark.sparkContext.applicationId, "files": files}), flush=True)
spark.stop()  # the listener writes what it holds when the application ends
"""


def _storage(s3: S3Server) -> StorageConfig:
    return StorageConfig(**s3.storage_settings())  # type: ignore[arg-type]


def _write_table(s3: S3Server, uri: str) -> None:
    """8 files: 2 partitions (``part``) x 4 appends, each append a range of ``qty`` (25 values)."""
    for block in range(4):
        ids = list(range(block * 100, block * 100 + 100))
        rows = pa.table({"id": pa.array(ids, pa.int64()), "part": pa.array([i % 2 for i in ids], pa.int32()),
                         "city": [f"CITY{i % 10}" for i in ids],
                         "qty": pa.array([block * 25 + i % 25 for i in ids], pa.int32())})  # fmt: skip
        write_deltalake(uri, rows, partition_by=["part"], mode="append", storage_options=s3.storage_options())


def _objects(s3: S3Server, uri: str, under: str = "_lakecluster/") -> list[str]:
    """The object keys under ``uri``/``under`` as the server lists them (directory markers end in
    ``/``), relative to ``uri``."""
    bucket, key = uri.removeprefix("s3://").rstrip("/").split("/", 1)
    return [k.removeprefix(key + "/") for k in s3.keys(bucket, f"{key}/{under}")]


def _cli(s3: S3Server, uri: str, *args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    sets = [f"--set={k}={v}" for k, v in s3.lakecluster_settings().items()]
    return run_cli("--set", f"table.path={uri}", *sets, "workload", *args, cwd=cwd)


@pytest.fixture(scope="module")
def captured(s3: S3Server, s3_bucket: str, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """An ``s3://`` table and a Spark application that ran ``QUERIES`` on it with the listener on."""
    uri = unique_prefix(s3_bucket) + "flat"
    _write_table(s3, uri)
    command = [sys.executable, "-c", APPLICATION, uri, json.dumps(s3.storage_settings()), json.dumps(QUERIES)]
    env = subprocess_env(PYTHONPATH=str(Path(__file__).resolve().parents[2]))
    started = dt.datetime.now(dt.UTC).date()
    proc = subprocess.run(command, capture_output=True, text=True, cwd=tmp_path_factory.mktemp("app"), env=env,
                          timeout=300)  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
    return {"uri": uri, "started": started, **json.loads(proc.stdout.strip().splitlines()[-1])}


def test_the_listener_captures_into_an_s3_table_and_readers_read_it(s3: S3Server, captured: dict[str, Any],
                                                                     tmp_path: Path) -> None:  # fmt: skip
    uri, files = captured["uri"], captured["files"]
    # One capture file for the table, however the application named it, PUT whole: no hidden
    # temporary name, no directory marker, nothing else.
    written = _objects(s3, uri)
    ran = (captured["started"], dt.datetime.now(dt.UTC).date())
    days = {f"_lakecluster/workload/day={d.isoformat()}/" for d in ran}
    assert len(written) == 1 and any(written[0].startswith(day) for day in days), written  # the UTC day it ran
    assert written[0].endswith(".jsonl") and "/." not in written[0]

    for form in (uri, uri.replace("s3://", "s3a://", 1) + "/"):  # the table as s3a:// reads the same capture
        capture = read_capture(LakeTable.at(form, storage=_storage(s3)), WorkloadConfig())
        assert capture.skipped == [] and capture.files == 1
        assert [s.files_read for s in capture.scans] == files
    scans = capture.scans
    assert {s.app_id for s in scans} == {captured["app_id"]} and all(s.files_total == 8 for s in scans)
    assert [sorted(s.predicates, key=lambda p: p.column) for s in scans] == [
        [Predicate("city", "eq", ("CITY7",))],
        [Predicate("part", "eq", (1,)), Predicate("qty", "range", low=10, high=20)],
        [Predicate("qty", "eq", (30, 31, 80))],
    ]
    assert {"column": "part", "type": "int", "op": "=", "value": 1} in scans[1].filters
    assert files[0] == 8 and files[1] == 1 < files[2] < 8  # partition pruning and data skipping on S3
    with s3.filesystem().open_input_stream(uri.removeprefix("s3://") + "/" + written[0]) as stream:
        tables = [json.loads(line)["table"] for line in stream.read().splitlines()]
    assert tables == [uri.replace("s3://", f"{scheme}://", 1) for scheme, _ in QUERIES]  # as the application named it

    shown = _cli(s3, uri, "--json", cwd=tmp_path)
    assert shown.returncode == 0, shown.stderr
    data = json.loads(shown.stdout)
    assert (data["queries"], data["scans"], data["applications"], data["capture_files"]) == (3, 3, 1, 1)
    assert data["files_in_table"] == 8 and data["skipped"] == []
    assert sorted(s["shape"] for s in data["shapes"]) == ["city =", "part = AND qty BETWEEN", "qty IN"]
    text = _cli(s3, uri.replace("s3://", "s3a://", 1), cwd=tmp_path)
    assert text.returncode == 0, text.stderr
    assert text.stdout.startswith(f"workload of {uri}: 3 quer(ies), 3 scan(s) of the table by 1 application(s)")


def _put(fs: pafs.FileSystem, path: str, body: bytes = b"{}\n") -> str:
    with fs.open_output_stream(path) as out:
        out.write(body)
    return path


def test_expire_on_s3_deletes_only_what_it_should(s3: S3Server, s3_prefix: str) -> None:
    uri = s3_prefix + "t"
    table = LakeTable.at(uri, storage=_storage(s3))
    fs = s3.filesystem()
    folder = uri.removeprefix("s3://") + "/_lakecluster/workload"
    now = time.time()
    # Nothing captured yet: no folder to list is no error, for the reader and for expiry.
    assert read_capture(table, WorkloadConfig()).scans == []
    nothing = expire(table, WorkloadConfig())
    assert (nothing.files, nothing.kept_files) == (0, 0)

    def name(seconds_ago: float, token: str = "abcdef12") -> tuple[str, str]:
        ms = int((now - seconds_ago) * 1000)
        day = dt.datetime.fromtimestamp(ms / 1000, dt.UTC).date().isoformat()
        return f"{folder}/day={day}", f"{ms:013d}-local-1-000001-{token}.jsonl"

    old_day, old = name(40 * 86_400)
    marked_day, marked = name(45 * 86_400)
    fs.create_dir(marked_day)  # a directory marker object, as some writers leave
    stale = [_put(fs, f"{old_day}/{old}"), _put(fs, f"{marked_day}/{marked}")]
    recent_day, _ = name(3 * 3600)
    recent = [_put(fs, "/".join(name(hours * 3600, f"0000000{hours}")), b"x" * 100) for hours in (3, 2, 1)]
    temp = _put(fs, f"{recent_day}/.{recent[0].rsplit('/', 1)[1]}.tmp")
    foreign = [_put(fs, f"{recent_day}/notes.txt"), _put(fs, f"{folder}/other/{old}"),
               _put(fs, f"{folder}/day=junk/{old}"), _put(fs, f"{folder.rsplit('/', 1)[0]}/{old}")]  # fmt: skip

    def exists(path: str) -> bool:
        return fs.get_file_info(path).type == pafs.FileType.File

    # Now: past the retention, and beyond 250 bytes the oldest; a temporary file an hour young stays.
    report = expire(table, WorkloadConfig(max_bytes=250), now=now)
    assert (report.files, report.bytes, report.kept_files, report.kept_bytes) == (3, 106, 2, 200)
    assert [exists(p) for p in stale + recent] == [False, False, False, True, True]
    assert exists(temp) and all(exists(p) for p in foreign)
    days = {i.base_name for i in fs.get_file_info(pafs.FileSelector(folder)) if i.type == pafs.FileType.Directory}
    # the recent files' days (two when the test runs before 03:00 UTC) stay: the temporary and the
    # foreign file keep the oldest one's, the two kept files theirs
    live_days = {name(hours * 3600)[0].rsplit("/", 1)[1] for hours in (3, 2, 1)}
    assert days == {*live_days, "other", "day=junk"}, "the emptied day folders are gone"
    # Two hours on: the temporary file is a crashed writer's and goes; a second expiry finds the
    # rest already done (no error for what another expiry deleted).
    again = expire(table, WorkloadConfig(max_bytes=250), now=now + 7200)
    assert (again.files, again.kept_files) == (1, 2) and not exists(temp)
    assert all(exists(p) for p in recent[1:] + foreign)

    # A writer's file landing in a day folder that expiry has emptied, just after it listed the
    # folder empty, is kept: on S3 deleting a "folder" deletes every key under it.
    late_day, lone = name(2 * 86_400)
    lone = _put(fs, f"{late_day}/{lone}")
    late = f"{late_day}/{name(2 * 86_400, 'abcdef99')[1]}"
    table.filesystem = lambda uri: (_WriterMeanwhile(fs, late_day, late), folder)  # type: ignore[method-assign]
    assert expire(table, WorkloadConfig(max_bytes=0), now=now).files == 3
    assert exists(late) and not any(exists(p) for p in [lone, *recent])
    assert all(exists(p) for p in foreign)


class _WriterMeanwhile:
    """A filesystem that puts the file ``late`` into the folder ``day`` as soon as a listing of
    ``day`` has come back empty (a writer racing an expiry)."""

    def __init__(self, fs: pafs.FileSystem, day: str, late: str) -> None:
        self.fs, self.day, self.late = fs, day, late

    def __getattr__(self, name: str) -> Any:
        return getattr(self.fs, name)

    def get_file_info(self, what: Any) -> Any:
        found = self.fs.get_file_info(what)
        if isinstance(what, pafs.FileSelector) and what.base_dir.rstrip("/") == self.day and not found:
            _put(self.fs, self.late)
        return found


def _event_log(table: str, now_ms: int) -> bytes:
    """One application, one SQL execution scanning ``table`` with ``part = 1``."""
    return event_log(table, data_filters="[isnotnull(qty#3), (qty#3 > 90)]", files_read=1, start_ms=now_ms,
                     partition_filters="[isnotnull(part#1), (part#1 = 1)]")  # fmt: skip


def test_importing_an_event_log_into_an_s3_table_twice_adds_it_once(s3: S3Server, s3_prefix: str,
                                                                    tmp_path: Path) -> None:  # fmt: skip
    uri = s3_prefix + "t"
    _write_table(s3, uri)
    fs = s3.filesystem()
    # The log on S3 too (spark.eventLog.dir on a bucket), naming the table as Spark prints it.
    log_uri = s3_prefix + "eventlogs/local-17"
    _put(fs, log_uri.removeprefix("s3://"), _event_log(uri.replace("s3://", "s3a://", 1), int(time.time() * 1000)))
    first = _cli(s3, uri, "--import-eventlog", log_uri, "--json", cwd=tmp_path)
    assert first.returncode == 0, first.stderr
    report = json.loads(first.stdout)
    assert (report["imported_scans"], report["files"], report["skipped_logs"]) == (1, 1, [])
    files = _objects(s3, uri)  # one object, PUT whole; no directory markers (S3 has no folders to make)
    assert len(files) == 1 and "-local-17-000003-ev" in files[0] and "/." not in files[0], files

    table = LakeTable.at(uri, storage=_storage(s3))
    again = import_eventlogs(table, [log_uri, s3_prefix + "eventlogs"], WorkloadConfig())  # the file, and its folder
    assert (again.imported_scans, again.files) == (0, 0)
    assert [a.skipped for a in again.applications] == [{"imported before": 1}] * 2
    assert _objects(s3, uri) == files
    (scan,) = read_capture(table, WorkloadConfig()).scans
    assert (scan.app_id, scan.files_read, scan.bytes_read) == ("local-17", 1, 900)
    assert sorted(scan.predicates, key=lambda p: p.column) == [
        Predicate("part", "eq", (1,)),
        Predicate("qty", "range", low=90),
    ]
