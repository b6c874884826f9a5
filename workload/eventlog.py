"""Spark event logs (``spark.eventLog.dir``) read into capture records of format v1 (docs/workload.md).

For applications that cannot add the query listener, the event log Spark writes anyway holds what
it records: each SQL execution's plan (``SparkListenerSQLExecutionStart``, replaced by
``SparkListenerSQLAdaptiveExecutionUpdate`` when adaptive execution re-plans), the scans' metrics
(``SparkListenerDriverAccumUpdates``, task ends), and whether the execution succeeded
(``SparkListenerSQLExecutionEnd`` without an ``errorMessage``). Every scan of a Delta table
(a ``FileSourceScanExec`` whose ``Location`` is one of Delta's file indexes) of a successful
execution becomes one record; its filters are read from the plan's text
(:mod:`lakecluster.workload.plan_filters`).

A log is a single file (``<app id>[.lz4|.snappy|.zstd][.inprogress]``) or a rolling log's folder
(``eventlog_v2_<app id>/events_<n>_<app id>[.codec]``, Spark 4's default); a line that is not an
event is skipped with a warning and counted, and a compressed log cut short (an application still
running) is read up to where it ends.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, BinaryIO

import pyarrow as pa
import pyarrow.fs as pafs

from lakecluster import uris
from lakecluster.errors import InputError

from .plan_filters import Columns, parse_filters

log = logging.getLogger(__name__)

CODECS = ("lz4", "lzf", "snappy", "zstd")  # spark.eventLog.compression.codec: the file's suffix
READABLE_CODECS = ("lz4", "snappy", "zstd")
# Delta's file indexes (org.apache.spark.sql.delta.files.TahoeFileIndex and its subclasses, by the
# simple class name FileSourceScanExec prints); DeltaLogFileIndex reads the log, not the table.
DELTA_INDEXES = ("PreparedDeltaFileIndex", "CdcAddFileIndex")
_SQL = "org.apache.spark.sql.execution.ui."
_LOCATION = re.compile(r"^(\w+)\(1 paths\)\[(.*)\]$", re.DOTALL)
_STATE = re.compile(r"Delta Table State(?: with Stats)? #(\d+) - (\S+?)/?_delta_log\b")
_ACTION = re.compile(r"^([A-Za-z_$][\w$]*) at \S+:\d+$")
_ROLLING_PART = re.compile(r"^events_(\d+)_")
_EVENT = re.compile(rb'^\{\s*"Event"\s*:\s*"([^"]*)"')  # Spark writes each event's name first
_DELTA_TYPES = {"integer": "int", "long": "bigint", "short": "smallint", "byte": "tinyint"}
_READ_CHUNK = 1 << 20


@dataclass(frozen=True)
class EventLog:
    """One application's log: its files in order (one, or a rolling log's parts)."""

    path: str  # as given, or the rolling log's folder
    parts: tuple[str, ...]
    in_progress: bool = False


@dataclass
class AppLog:
    """What one application's log holds: its Delta scan records and what was left out, and why."""

    path: str
    app_id: str | None = None
    app_name: str | None = None
    records: list[dict[str, Any]] = field(default_factory=list)  # every Delta scan, of any table
    executions: int = 0  # successful SQL executions
    failed: int = 0
    unfinished: int = 0  # started, never ended in the log (an application still running, or killed)
    malformed: int = 0  # lines that are not events
    truncated: bool = False  # a compressed part ended mid-block


# -- finding logs ----------------------------------------------------------------------------------


def find_logs(fs: pafs.FileSystem, path: str, given: str) -> tuple[list[EventLog], list[dict[str, str]]]:
    """The event logs at ``path``: a log file, a rolling log's folder, or a folder of them
    (``spark.eventLog.dir``); and what was passed over in a folder, with the reason.

    Raises:
        InputError: nothing is at ``path``, or a folder holds no event log.
    """
    info = fs.get_file_info(path)
    if info.type == pafs.FileType.NotFound:
        raise InputError(f"{given}: no such file or folder (give a Spark event log, an eventlog_v2_ folder or "
                         "the application's spark.eventLog.dir)")  # fmt: skip
    if info.type == pafs.FileType.File:
        return [EventLog(given, (path,), path.endswith(".inprogress"))], []
    if info.base_name.startswith("eventlog_v2_"):
        return [_rolling(fs, path, given)], []
    logs: list[EventLog] = []
    skipped: list[dict[str, str]] = []
    for child in sorted(fs.get_file_info(pafs.FileSelector(path)), key=lambda i: i.base_name):
        name = child.base_name
        if name.startswith(".") or name.endswith(".crc"):
            continue  # Hadoop's checksums and hidden files
        if child.type == pafs.FileType.Directory and name.startswith("eventlog_v2_"):
            logs.append(_rolling(fs, child.path, uris.join(given, name)))
        elif child.type == pafs.FileType.File:
            logs.append(EventLog(uris.join(given, name), (child.path,), name.endswith(".inprogress")))
        else:
            skipped.append({"log": uris.join(given, name), "reason": "a folder that is not a rolling event log"})
    if not logs:
        raise InputError(f"{given}: no Spark event log in this folder (give a log file, an eventlog_v2_ folder or "
                         "the folder spark.eventLog.dir names)")  # fmt: skip
    return logs, skipped


def _rolling(fs: pafs.FileSystem, path: str, given: str) -> EventLog:
    parts: list[tuple[int, str]] = []
    in_progress = False
    for child in fs.get_file_info(pafs.FileSelector(path)):
        m = _ROLLING_PART.match(child.base_name)
        if m and child.type == pafs.FileType.File:
            parts.append((int(m.group(1)), child.path))
        elif child.base_name.startswith("appstatus_") and child.base_name.endswith(".inprogress"):
            in_progress = True
    return EventLog(given, tuple(p for _, p in sorted(parts)), in_progress)


def codec_of(path: str) -> str | None:
    """The compression codec a log file's name says (``.zstd``, ``.lz4``...; None: plain)."""
    name = path.rsplit("/", 1)[-1].removesuffix(".inprogress").removesuffix(".compact")
    suffix = name.rsplit(".", 1)[-1] if "." in name else ""
    return suffix if suffix in CODECS else None


# -- reading lines ---------------------------------------------------------------------------------


def lines(stream: BinaryIO, codec: str | None, app: AppLog) -> Iterator[bytes]:
    """The lines of one log file; a compressed file that ends mid-block (still being written)
    gives the lines before, and sets ``app.truncated``."""
    rest = b""
    for chunk in _chunks(stream, codec, app):
        rest += chunk
        *whole, rest = rest.split(b"\n")
        yield from whole
    if rest.strip():
        yield rest


def _chunks(stream: BinaryIO, codec: str | None, app: AppLog) -> Iterator[bytes]:
    if codec is None:
        while chunk := stream.read(_READ_CHUNK):
            yield chunk
        return
    if codec not in READABLE_CODECS:
        raise ValueError(f"logs compressed with {codec} cannot be read (lz4, snappy and zstd can)")
    try:
        if codec == "zstd":
            with pa.CompressedInputStream(stream, "zstd") as z:
                while chunk := z.read(_READ_CHUNK):
                    yield chunk
        elif codec == "lz4":
            yield from _lz4_blocks(stream)
        else:
            yield from _snappy_blocks(stream)
    except (OSError, pa.ArrowException, EOFError) as e:
        app.truncated = True  # an application's log still being written ends mid-block
        log.info("event log %s: %s part ends early (%s): read up to there", app.path, codec, e)


def _read(stream: BinaryIO, n: int) -> bytes:
    data = stream.read(n)
    if len(data) != n:
        raise EOFError(f"{n} bytes expected, {len(data)} left")
    return data


def _lz4_blocks(stream: BinaryIO) -> Iterator[bytes]:
    """lz4-java's block stream (Spark's LZ4CompressionCodec): "LZ4Block", a token (raw or
    compressed), the compressed and the plain length, a checksum, the data; a block of length 0
    ends the stream."""
    codec = pa.Codec("lz4_raw")
    while header := stream.read(8):
        if header != b"LZ4Block":
            raise EOFError("not an LZ4 block")
        head = _read(stream, 13)
        method, packed, plain = head[0] & 0xF0, int.from_bytes(head[1:5], "little"), int.from_bytes(head[5:9], "little")
        if plain == 0:
            continue  # the end marker (a stream may hold several, one per flush)
        data = _read(stream, packed)
        yield data if method == 0x10 else codec.decompress(data, decompressed_size=plain).to_pybytes()


def _snappy_blocks(stream: BinaryIO) -> Iterator[bytes]:
    """snappy-java's stream (Spark's SnappyCompressionCodec): a 16-byte header, then blocks of a
    4-byte big-endian length and raw snappy data, whose plain length is its leading varint."""
    codec = pa.Codec("snappy")
    header = stream.read(16)
    if header[:8] != b"\x82SNAPPY\x00":
        raise EOFError("not a snappy-java stream")
    while size := stream.read(4):
        data = _read(stream, int.from_bytes(_read_more(stream, size, 4), "big"))
        yield codec.decompress(data, decompressed_size=_varint(data)).to_pybytes()


def _read_more(stream: BinaryIO, got: bytes, n: int) -> bytes:
    return got if len(got) == n else got + _read(stream, n - len(got))


def _varint(data: bytes) -> int:
    value = shift = 0
    for byte in data[:5]:
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value
        shift += 7
    raise EOFError("bad snappy length")


# -- events ----------------------------------------------------------------------------------------


def read_log(fs: pafs.FileSystem, event_log: EventLog, *, schema: Mapping[str, str], max_in_values: int) -> AppLog:
    """Every Delta scan of the log's successful SQL executions, as capture records.

    ``schema`` types the columns a scan's read schema leaves out (partition columns): the table's
    columns and their Spark types.

    Raises:
        InputError: the first part is not a Spark event log.
    """
    app = AppLog(event_log.path)
    reader = _Events(app, schema, max_in_values)
    for number, part in enumerate(event_log.parts):
        codec = codec_of(part)
        with fs.open_input_stream(part, compression=None) as stream:
            try:
                for line_number, line in enumerate(lines(stream, codec, app), start=1):
                    if number == 0 and line_number == 1 and not _EVENT.match(line):
                        raise InputError(f"{event_log.path}: not a Spark event log (its first line is not a "
                                         "Spark listener event)")  # fmt: skip
                    reader.line(line, part, line_number)
            except ValueError as e:
                if isinstance(e, InputError):
                    raise
                raise InputError(f"{event_log.path}: {e}") from None
    if app.app_id is None and not app.records and not app.executions:
        raise InputError(f"{event_log.path}: not a Spark event log, or one cut before the application started")
    app.unfinished = len(reader.running)
    return app


class _Events:
    """The state of one application's log as its lines are read: executions running, their plans
    and their scans' metrics."""

    def __init__(self, app: AppLog, schema: Mapping[str, str], max_in_values: int) -> None:
        self.app = app
        self.schema = schema
        self.max_in_values = max_in_values
        self.time_zone: str | None = None
        self.running: dict[int, dict[str, Any]] = {}  # execution id -> start event, latest plan
        self.wanted: set[int] = set()  # metric ids of the running executions' Delta scans
        self.driver: dict[int, int] = {}  # metric id -> value the driver posted
        self.tasks: dict[int, int] = {}  # metric id -> accumulated value from task ends
        self.versions: dict[int, dict[str, set[int]]] = {}  # root execution -> table log -> versions
        handlers: dict[str, Callable[[dict[str, Any]], None]] = {
            "SparkListenerApplicationStart": self.application,
            "SparkListenerEnvironmentUpdate": self.environment,
            _SQL + "SparkListenerSQLExecutionStart": self.start,
            _SQL + "SparkListenerSQLAdaptiveExecutionUpdate": self.replanned,
            _SQL + "SparkListenerDriverAccumUpdates": self.driver_metrics,
            _SQL + "SparkListenerSQLExecutionEnd": self.end,
            "SparkListenerTaskEnd": self.task_end,
        }
        self.handlers = {name.encode(): handler for name, handler in handlers.items()}

    def line(self, line: bytes, part: str, number: int) -> None:
        if not line.strip():
            return
        m = _EVENT.match(line)
        if m is None:
            return self.malformed(part, number, "not a Spark listener event")
        handler = self.handlers.get(m.group(1))
        if handler is None or (handler == self.task_end and not self.wanted - self.driver.keys()):
            return  # most lines (tasks, stages, jobs): nothing here needs them
        try:
            event = json.loads(line)
            if not isinstance(event, dict):
                raise ValueError("not a JSON object")
            handler(event)
        except (ValueError, TypeError, KeyError, AttributeError) as e:
            self.malformed(part, number, str(e).split("\n", 1)[0][:200] or type(e).__name__)

    def malformed(self, part: str, number: int, reason: str) -> None:
        if not self.app.malformed:
            log.warning("event log %s line %d skipped: %s", part, number, reason)
        else:
            log.debug("event log %s line %d skipped: %s", part, number, reason)
        self.app.malformed += 1

    def application(self, e: dict[str, Any]) -> None:
        self.app.app_id = str(e["App ID"])
        self.app.app_name = str(e.get("App Name") or "")

    def environment(self, e: dict[str, Any]) -> None:
        spark, system = e.get("Spark Properties") or {}, e.get("System Properties") or {}
        self.time_zone = spark.get("spark.sql.session.timeZone") or system.get("user.timezone") or self.time_zone

    def start(self, e: dict[str, Any]) -> None:
        execution = int(e["executionId"])
        root = int(e.get("rootExecutionId", execution))
        if root != execution:  # Delta's own queries under this one: they name the version it read
            for node in _nodes(e["sparkPlanInfo"]):
                for m in _STATE.finditer(str(node.get("simpleString", ""))):
                    tables = self.versions.setdefault(root, {})
                    tables.setdefault(table_key(m.group(2)), set()).add(int(m.group(1)))
        self.running[execution] = {"start": e, "plan": e["sparkPlanInfo"]}
        self.want(e["sparkPlanInfo"])

    def replanned(self, e: dict[str, Any]) -> None:
        running = self.running.get(int(e["executionId"]))
        if running is not None:
            running["plan"] = e["sparkPlanInfo"]
            self.want(e["sparkPlanInfo"])

    def want(self, plan: dict[str, Any]) -> None:
        for scan in _delta_scans(plan):
            self.wanted.update(i for i in (_metric(scan, "number of files read"), _metric(scan, "size of files read"))
                               if i is not None)  # fmt: skip

    def driver_metrics(self, e: dict[str, Any]) -> None:
        for metric, value in e["accumUpdates"]:
            if int(metric) in self.wanted:
                self.driver[int(metric)] = int(value)  # the metric's value, posted whole

    def task_end(self, e: dict[str, Any]) -> None:
        for acc in (e.get("Task Info") or {}).get("Accumulables") or []:
            metric = int(acc["ID"])
            if metric in self.wanted and metric not in self.driver and acc.get("Value") is not None:
                self.tasks[metric] = max(self.tasks.get(metric, 0), int(acc["Value"]))  # the running total

    def end(self, e: dict[str, Any]) -> None:
        execution = int(e["executionId"])
        running = self.running.pop(execution, None)
        versions = self.versions.pop(execution, {})
        if running is None:
            return
        scans = list(_delta_scans(running["plan"]))
        ids = [i for s in scans for i in (_metric(s, "number of files read"), _metric(s, "size of files read"))]
        if e.get("errorMessage"):
            self.app.failed += 1
        else:
            self.app.executions += 1
            self.records(execution, running["start"], int(e["time"]), scans, versions)
        for i in ids:
            self.wanted.discard(i)  # type: ignore[arg-type]
            self.driver.pop(i, None)  # type: ignore[arg-type]
            self.tasks.pop(i, None)  # type: ignore[arg-type]

    def records(self, execution: int, start: dict[str, Any], end_ms: int, scans: list[dict[str, Any]],
                versions: dict[str, set[int]]) -> None:  # fmt: skip
        zone = (start.get("modifiedConfigs") or {}).get("spark.sql.session.timeZone") or self.time_zone
        action = _ACTION.match(str(start.get("description") or ""))
        for number, scan in enumerate(scans):
            meta = scan["metadata"]
            root = _LOCATION.match(meta["Location"]).group(2)  # type: ignore[union-attr]
            columns = Columns({**self.schema, **_read_schema(meta.get("ReadSchema"))}, zone, self.max_in_values)
            seen = versions.get(table_key(root), set())
            self.app.records.append({
                "v": 1, "time_ms": end_ms, "app_id": self.app.app_id, "app_name": self.app.app_name,
                "execution_id": execution, "query": action.group(1) if action else None,
                "duration_ms": max(0, end_ms - int(start["time"])), "table": root,
                "table_version": next(iter(seen)) if len(seen) == 1 else None, "scan": number, "scans": len(scans),
                "filters": parse_filters(meta.get("DataFilters"), columns),
                "partition_filters": parse_filters(meta.get("PartitionFilters"), columns),
                "files_read": self.value(_metric(scan, "number of files read")),
                "bytes_read": self.value(_metric(scan, "size of files read")), "files_total": None,
            })  # fmt: skip

    def value(self, metric: int | None) -> int | None:
        if metric is None:
            return None
        return self.driver.get(metric, self.tasks.get(metric))


def table_key(root: str) -> str:
    """A table root as Spark prints it (Hadoop's ``file:/data/t``, ``s3a://b/t``) in lakecluster's
    canonical form (``/data/t``, ``s3://b/t``), to compare with the table's."""
    m = re.match(r"^([A-Za-z][\w+.-]*):/(?!/)", root)
    return uris.normalize(f"{m.group(1)}:///{root[m.end():]}" if m else root)


def _nodes(plan: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """The plan's nodes depth first, children before subqueries as Spark lists them; nothing
    under a cached relation (the listener does not look into one either)."""
    yield plan
    if str(plan.get("nodeName", "")).startswith("InMemoryTableScan"):
        return
    for child in plan.get("children") or []:
        yield from _nodes(child)


def _delta_scans(plan: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """The plan's scans of Delta tables, each once (a reused exchange lists its scan again)."""
    seen: set[Any] = set()
    for node in _nodes(plan):
        meta = node.get("metadata") or {}
        m = _LOCATION.match(str(meta.get("Location", "")))
        if m is None or not (m.group(1).startswith("Tahoe") or m.group(1) in DELTA_INDEXES):
            continue
        key = _metric(node, "number of files read") or id(node)
        if key not in seen:
            seen.add(key)
            yield node


def _metric(node: dict[str, Any], name: str) -> int | None:
    for m in node.get("metrics") or []:
        if m.get("name") == name:
            return int(m["accumulatorId"])
    return None


def _read_schema(text: str | None) -> dict[str, str]:
    """``struct<id:bigint,city:string,...>`` as {column: Spark type}; nested types as they are
    written (no filter of a column of one is read)."""
    if not text or not text.startswith("struct<") or not text.endswith(">"):
        return {}
    out: dict[str, str] = {}
    depth, start, body = 0, 0, text[7:-1]
    fields = []
    for i, ch in enumerate(body):
        if ch in "<(":
            depth += 1
        elif ch in ">)":
            depth -= 1
        elif ch == "," and depth == 0:
            fields.append(body[start:i])
            start = i + 1
    fields.append(body[start:])
    for f in fields:
        if f.startswith("`"):
            end = f.find("`:", 1)
            while end != -1 and f[1:end].count("`") % 2:
                end = f.find("`:", end + 1)
            if end == -1:
                continue
            out[f[1:end].replace("``", "`")] = f[end + 2 :]
        elif ":" in f:
            name, kind = f.split(":", 1)
            out[name] = kind
    return out


def spark_types(delta_schema_json: str) -> dict[str, str]:
    """A Delta table's top-level columns and their Spark type names, from its schema's JSON."""
    out = {}
    for f in json.loads(delta_schema_json).get("fields", []):
        kind = f.get("type")
        if isinstance(kind, str):
            out[f["name"]] = _DELTA_TYPES.get(kind, kind)
    return out
