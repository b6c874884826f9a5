"""``lakecluster workload --import-eventlog``: Spark event logs' scans of the table written into its
capture folder, beside the listener's (docs/workload.md, "Importing Spark event logs").

Records go to ``<table>/_lakecluster/workload/day=<date>/<ms>-<app id>-<seq>-ev<hash>.jsonl``, named
as the listener names its files (so every reader reads them unchanged) but with a token of their
own (``ev`` and six hex digits: the listener's are eight hex digits), dated by the newest record
they hold. Importing is idempotent: before writing, the import files already there for the
application are read, and executions they hold are skipped; an application the listener captured
is skipped whole (its queries are there already). A file's name is a hash of the executions it
holds, so two imports of one log at once write the same files, not twice the records. The
``[workload]`` bounds apply as to the listener: records older than ``workload.retention_days`` are
not imported, files hold at most ``workload.flush_records`` records and ``workload.max_file_bytes``,
one application writes at most ``workload.max_bytes_per_app_day`` per UTC day, and a record over
64 KiB is dropped.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import logging
import re
import time
import uuid
from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import pyarrow.fs as pafs

from lakecluster import storage, uris
from lakecluster.config import WorkloadConfig
from lakecluster.errors import InputError
from lakecluster.table import LakeTable

from .eventlog import AppLog, EventLog, find_logs, read_log, spark_types, table_key

log = logging.getLogger(__name__)

MAX_RECORD_BYTES = 64 << 10  # as the listener
_FILE = re.compile(r"^(\d{13})-([A-Za-z0-9_-]+)-(\d{6})-([A-Za-z0-9]{8})\.jsonl$")
_IMPORTED = re.compile(r"^ev[0-9a-f]{6}$")  # the listener's tokens are 8 hex digits: never a "v"
_DAY = re.compile(r"^day=(\d{4}-\d{2}-\d{2})$")


@dataclass
class AppImport:
    """One application's log: what it held and what was imported."""

    log: str
    app_id: str | None
    app_name: str | None
    executions: int  # successful SQL executions in the log
    executions_of_table: int  # of them, those that scanned the table
    scans: int  # their scans of the table
    imported_executions: int = 0
    imported_scans: int = 0
    malformed_lines: int = 0
    skipped: dict[str, int] = field(default_factory=dict)  # reason -> executions (or scans) left out


@dataclass
class ImportReport:
    """What an import did: per application, and the files it wrote."""

    table: str
    folder: str
    applications: list[AppImport] = field(default_factory=list)
    skipped_logs: list[dict[str, str]] = field(default_factory=list)  # {"log", "reason"}
    files: int = 0
    bytes: int = 0

    @property
    def imported_scans(self) -> int:
        return sum(a.imported_scans for a in self.applications)

    @property
    def imported_executions(self) -> int:
        return sum(a.imported_executions for a in self.applications)

    def as_dict(self) -> dict[str, Any]:
        return {"table": self.table, "folder": self.folder, "files": self.files, "bytes": self.bytes,
                "imported_executions": self.imported_executions, "imported_scans": self.imported_scans,
                "applications": [a.__dict__ for a in self.applications], "skipped_logs": self.skipped_logs}  # fmt: skip


def import_eventlogs(table: LakeTable, paths: Sequence[str], settings: WorkloadConfig, *,
                     now: float | None = None) -> ImportReport:  # fmt: skip
    """Import the scans of ``table`` from the Spark event logs at ``paths`` (files, rolling logs'
    folders, ``spark.eventLog.dir`` folders).

    Raises:
        InputError: a path is missing, or is not an event log (a folder: holds none).
    """
    now = time.time() if now is None else now
    fs, folder = table.filesystem(table.paths.workload)
    report = ImportReport(table.uri, table.paths.workload)
    found: list[tuple[pafs.FileSystem, EventLog, bool]] = []
    for given in paths:
        log_fs, path = storage.filesystem(given, table.storage)
        logs, skipped = find_logs(log_fs, path, given)
        report.skipped_logs.extend(skipped)
        listed = len(logs) > 1 or logs[0].path != given
        found.extend((log_fs, event_log, listed) for event_log in logs)
    schema = spark_types(table.delta.open().schema().to_json())
    existing = _Existing(fs, folder)
    target = uris.normalize(table.uri)
    for log_fs, event_log, listed in found:
        try:
            app = read_log(log_fs, event_log, schema=schema, max_in_values=settings.max_in_values)
        except InputError as e:
            if not listed:
                raise
            report.skipped_logs.append({"log": event_log.path, "reason": str(e).split(": ", 1)[-1]})
            continue
        except OSError as e:
            report.skipped_logs.append({"log": event_log.path, "reason": f"cannot be read: {e}"})
            continue
        report.applications.append(_import_app(app, target, existing, settings, now, fs, folder, report))
    return report


def _import_app(app: AppLog, target: str, existing: _Existing, settings: WorkloadConfig, now: float,
                fs: pafs.FileSystem, folder: str, report: ImportReport) -> AppImport:  # fmt: skip
    ours = [r for r in app.records if _same_table(r["table"], target)]
    by_execution: dict[int, list[dict[str, Any]]] = defaultdict(list)
    for r in ours:
        by_execution[r["execution_id"]].append(r)
    out = AppImport(app.path, app.app_id, app.app_name, app.executions, len(by_execution), len(ours),
                    malformed_lines=app.malformed)  # fmt: skip
    skipped: Counter[str] = Counter()
    if app.failed:
        skipped["failed executions (not imported)"] += app.failed
    if app.unfinished:
        skipped["executions not ended in the log"] += app.unfinished
    if app.app_id is None:
        skipped["no application start in the log"] += len(by_execution)
        out.skipped = dict(skipped)
        return out
    token = _safe(app.app_id)
    if existing.listener_captured(token):
        skipped["the listener captured this application already"] += len(by_execution)
        out.skipped = dict(skipped)
        return out
    done = existing.executions(token)
    cutoff_ms = (now - settings.retention_s) * 1000
    days: dict[str, list[str]] = defaultdict(list)  # UTC day -> record lines
    for execution, records in sorted(by_execution.items()):
        if execution in done:
            skipped["imported before"] += 1
            continue
        if records[0]["time_ms"] < cutoff_ms:
            skipped["older than workload.retention_days"] += 1
            continue
        lines = [json.dumps(r, ensure_ascii=False, separators=(",", ":")) for r in records]
        if any(len(line.encode()) > MAX_RECORD_BYTES for line in lines):
            skipped["a record over 64 KiB"] += 1
            continue
        days[_day(records[0]["time_ms"])].extend(lines)
        out.imported_executions += 1
        out.imported_scans += len(records)
    for day, lines in sorted(days.items()):
        budget = settings.max_bytes_per_app_day - existing.bytes_of(token, day)
        for chunk in _chunks(lines, settings):
            body = "".join(line + "\n" for line in chunk).encode()
            if len(body) > budget:
                dropped = {json.loads(line)["execution_id"] for line in chunk}
                skipped["over workload.max_bytes_per_app_day"] += len(dropped)
                out.imported_executions -= len(dropped)
                out.imported_scans -= len(chunk)
                continue
            budget -= len(body)
            _write(fs, folder, day, token, chunk, body)
            report.files += 1
            report.bytes += len(body)
    out.skipped = dict(skipped)
    return out


def _chunks(lines: list[str], settings: WorkloadConfig) -> list[list[str]]:
    """Lines cut into files of at most ``flush_records`` records and ``max_file_bytes`` bytes."""
    out: list[list[str]] = [[]]
    size = 0
    for line in lines:
        n = len(line.encode()) + 1
        if out[-1] and (len(out[-1]) >= settings.flush_records or size + n > settings.max_file_bytes):
            out.append([])
            size = 0
        out[-1].append(line)
        size += n
    return [c for c in out if c]


def _write(fs: pafs.FileSystem, folder: str, day: str, token: str, chunk: list[str], body: bytes) -> None:
    records = [json.loads(line) for line in chunk]
    newest = max(r["time_ms"] for r in records)
    executions = sorted({r["execution_id"] for r in records})
    digest = hashlib.sha256(f"{token} {executions}".encode()).hexdigest()[:6]
    name = f"{newest:013d}-{token}-{executions[0] % 1_000_000:06d}-ev{digest}.jsonl"
    day_folder = f"{folder}/day={day}"
    if isinstance(fs, pafs.LocalFileSystem):  # written whole under a hidden name, then renamed
        fs.create_dir(day_folder, recursive=True)
        hidden = f"{day_folder}/.{name}.{uuid.uuid4().hex[:8]}.tmp"
        with fs.open_output_stream(hidden) as out:
            out.write(body)
        fs.move(hidden, f"{day_folder}/{name}")
    else:  # an object store makes the object visible whole, and has no folders to make (pyarrow's
        # create_dir would PUT a marker object for every level, which the listener never writes)
        with fs.open_output_stream(f"{day_folder}/{name}") as out:
            out.write(body)
    log.debug("imported %d record(s) into %s/%s", len(records), day_folder, name)


class _Existing:
    """The capture files already in the table's folder, by application: the listener's, and the
    import files with the executions they hold (read when an application asks)."""

    def __init__(self, fs: pafs.FileSystem, folder: str) -> None:
        self.fs = fs
        # application -> [(path, day, imported, size)]
        self.files: dict[str, list[tuple[str, str, bool, int]]] = defaultdict(list)
        for day in fs.get_file_info(pafs.FileSelector(folder, allow_not_found=True)):
            m = _DAY.match(day.base_name)
            if day.type != pafs.FileType.Directory or m is None:
                continue
            for info in fs.get_file_info(pafs.FileSelector(day.path, allow_not_found=True)):
                f = _FILE.match(info.base_name)
                if f and info.type == pafs.FileType.File:
                    imported = _IMPORTED.match(f.group(4)) is not None
                    self.files[f.group(2)].append((info.path, m.group(1), imported, info.size or 0))

    def listener_captured(self, app: str) -> bool:
        return any(not imported for _, _, imported, _ in self.files.get(app, []))

    def executions(self, app: str) -> set[int]:
        out: set[int] = set()
        for path, _, imported, _ in self.files.get(app, []):
            if imported:
                with self.fs.open_input_stream(path) as stream:
                    for line in stream.read().splitlines():
                        try:
                            out.add(int(json.loads(line)["execution_id"]))
                        except (ValueError, KeyError, TypeError):
                            continue  # a damaged line: its execution is imported again
        return out

    def bytes_of(self, app: str, day: str) -> int:
        return sum(size for _, d, imported, size in self.files.get(app, []) if imported and d == day)


def _same_table(root: str, target: str) -> bool:
    try:
        return table_key(root) == target
    except ValueError:
        return False


def _safe(app_id: str) -> str:
    """The application id as the listener puts it in a file name (``WorkloadWriter.safe``)."""
    return re.sub(r"[^A-Za-z0-9_-]", "_", app_id)[:64]


def _day(ms: int) -> str:
    return dt.datetime.fromtimestamp(ms / 1000, dt.UTC).date().isoformat()
