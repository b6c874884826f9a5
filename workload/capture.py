"""The captured workload of a table: the query listener's records read back, and old ones deleted.

The listener (``workload/jvm/WorkloadListener.java``) writes one JSON object per line, one line
per scan of the table by a successful query, into immutable files of its own under
``<table>/_lakecluster/workload/day=<yyyy-mm-dd>/`` (the format: docs/workload.md). Here they
become :class:`CapturedScan` records whose predicates are the :class:`Predicate` model of a
workload file (``workload.queries``), so a layout can be scored on them as on ``tune
--queries``.

Reading never fails on what a writer left: a file over twice ``workload.max_file_bytes``, a line
that is not a JSON object of a known version, a value of the wrong type are skipped with a
warning (logged, and listed in :attr:`Capture.skipped`). Only the newest ``workload.max_bytes`` of
files within ``workload.retention_days`` are read. :func:`expire` deletes what is older or beyond
that size, inside the workload folder only; the compactor runs it on its vacuum schedule.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import os
import re
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import pyarrow.fs as pafs

from lakecluster import literals
from lakecluster import predicate as P
from lakecluster.config import WorkloadConfig
from lakecluster.table import LakeTable

from .queries import Predicate, predicates_of

log = logging.getLogger(__name__)

FORMAT_VERSION = 1
_DAY = re.compile(r"^day=(\d{4}-\d{2}-\d{2})$")
# <epoch ms, 13 digits>-<application id>-<sequence>-<token>.jsonl (WorkloadWriter.write)
_NAME = re.compile(r"^(\d{13})-[A-Za-z0-9_-]+\.jsonl$")
TEMP_GRACE_S = 3600.0  # a writer's hidden temporary file older than this was left by a crash
_NO_SPAN = (0, 0)  # a recorded term has no place in a text
_LIKE_SPECIAL = re.compile(r"[\\%_]")  # escaped in a LIKE pattern made of a recorded prefix


@dataclass(frozen=True)
class CapturedScan:
    """One scan of the table by one successful query, as the listener recorded it."""

    time_ms: int
    app_id: str
    execution_id: int
    query: str
    scan: int  # the scan's number among the query's scans of Delta tables
    table_version: int | None
    files_read: int | None
    bytes_read: int | None
    files_total: int | None
    filters: tuple[dict[str, Any], ...]  # as recorded: data filters, then partition filters
    predicates: tuple[Predicate, ...]  # what data skipping can use, one per column (of expression_of(filters))

    @property
    def query_key(self) -> tuple[str, int]:
        """The query the scan belongs to (several scans of a self-join share it)."""
        return (self.app_id, self.execution_id)

    @property
    def shape(self) -> str:
        """The columns and operators, without values: ``c_city = AND d_year BETWEEN``."""
        return shape_of(self.filters)


@dataclass
class Capture:
    """What was read: the scans, oldest first, and what was skipped and why."""

    folder: str
    scans: list[CapturedScan] = field(default_factory=list)
    files: int = 0
    bytes: int = 0
    skipped: list[dict[str, str]] = field(default_factory=list)  # {"file", "reason"}

    def skip(self, path: str, reason: str) -> None:
        log.warning("workload capture: skipped %s: %s", path, reason)
        self.skipped.append({"file": path, "reason": reason})


def read_capture(table: LakeTable, settings: WorkloadConfig, *, since_s: float | None = None,
                 now: float | None = None) -> Capture:  # fmt: skip
    """The table's captured scans since ``since_s`` seconds ago (default: ``workload.retention_days``).

    The newest files first, up to ``workload.max_bytes`` of them; returned oldest first.
    """
    now = time.time() if now is None else now
    window = settings.retention_s if since_s is None else min(since_s, settings.retention_s)
    cutoff_ms = int((now - window) * 1000)
    fs, folder = table.filesystem(table.paths.workload)
    out = Capture(table.paths.workload)
    budget = settings.max_bytes
    for info in sorted(_capture_files(fs, folder, cutoff_ms), key=lambda i: i.base_name, reverse=True):
        size = info.size or 0
        if size > 2 * settings.max_file_bytes:
            out.skip(info.path, f"{size} bytes, over twice workload.max_file_bytes ({settings.max_file_bytes})")
            continue
        if size > budget:
            log.info("workload capture: older files than %s left unread (workload.max_bytes)", info.path)
            break
        budget -= size
        try:
            with fs.open_input_stream(info.path) as stream:
                data = stream.read()
        except OSError as e:
            out.skip(info.path, f"cannot be read: {e}")
            continue
        out.files += 1
        out.bytes += size
        out.scans.extend(s for s in _parse_file(info.path, data, out) if s.time_ms >= cutoff_ms)
    out.scans.sort(key=lambda s: (s.time_ms, s.app_id, s.execution_id, s.scan))
    return out


def _capture_files(fs: pafs.FileSystem, folder: str, cutoff_ms: int) -> Iterator[pafs.FileInfo]:
    """The capture files of the days from the cutoff's on, named as the listener names them."""
    cutoff_day = dt.datetime.fromtimestamp(cutoff_ms / 1000, dt.UTC).date().isoformat()
    for day in fs.get_file_info(pafs.FileSelector(folder, allow_not_found=True)):
        m = _DAY.match(day.base_name)
        if day.type != pafs.FileType.Directory or m is None or m.group(1) < cutoff_day:
            continue
        for info in fs.get_file_info(pafs.FileSelector(day.path, allow_not_found=True)):
            if info.type == pafs.FileType.File and _NAME.match(info.base_name):
                yield info


def _parse_file(path: str, data: bytes, out: Capture) -> Iterator[CapturedScan]:
    bad: dict[str, int] = {}
    for number, raw in enumerate(data.split(b"\n"), start=1):
        if not raw.strip():
            continue
        try:
            record = json.loads(raw)
            if not isinstance(record, dict):
                raise ValueError("not a JSON object")
            if record.get("v") != FORMAT_VERSION:
                raise ValueError(f"format version {record.get('v')!r}, this reader knows {FORMAT_VERSION}")
            yield _scan(record)
        except (ValueError, TypeError, KeyError, AttributeError) as e:
            reason = str(e).split("\n", 1)[0][:200] or type(e).__name__
            if not bad:
                out.skip(f"{path} line {number}", reason)
            bad[reason] = bad.get(reason, 0) + 1
    if sum(bad.values()) > 1:
        log.warning("workload capture: %s: %d line(s) skipped in all", path, sum(bad.values()))


def _scan(r: dict[str, Any]) -> CapturedScan:
    filters = tuple(_filters(r.get("filters"))) + tuple(_filters(r.get("partition_filters")))
    return CapturedScan(
        time_ms=_int(r["time_ms"]), app_id=str(r["app_id"]), execution_id=_int(r["execution_id"]),
        query=str(r.get("query") or ""), scan=_int(r.get("scan", 0)), table_version=_opt_int(r.get("table_version")),
        files_read=_opt_int(r.get("files_read")), bytes_read=_opt_int(r.get("bytes_read")),
        files_total=_opt_int(r.get("files_total")), filters=filters,
        predicates=predicates_of(expression_of(filters)),
    )  # fmt: skip


def _filters(value: Any) -> Iterator[dict[str, Any]]:
    if value is None:
        return
    if not isinstance(value, list) or not all(isinstance(f, dict) and isinstance(f.get("op"), str) for f in value):
        raise ValueError("filters must be a list of objects with an op")
    yield from value


def _int(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"expected a whole number, got {value!r}")
    return value


def _opt_int(value: Any) -> int | None:
    return None if value is None else _int(value)


# -- predicates ----------------------------------------------------------------------------------


def expression_of(filters: Sequence[dict[str, Any]]) -> P.Expr | None:
    """The recorded filters as one expression of the where-clause language (``lakecluster.predicate``):
    the AND of the terms data skipping can use (:func:`term_of`); None when there is none."""
    terms = tuple(t for f in filters if (t := term_of(f)) is not None)
    if not terms:
        return None
    return terms[0] if len(terms) == 1 else P.And(terms, _NO_SPAN)


def predicate_of(f: dict[str, Any]) -> Predicate | None:
    """A recorded filter as the predicate data skipping can use (of :func:`term_of`); None for one
    that restricts no range of a column."""
    found = predicates_of(term_of(f))
    return found[0] if found else None


def term_of(f: dict[str, Any]) -> P.Expr | None:
    """A recorded filter as a term of the where-clause language, its constant typed as the
    language types it (``lakecluster.literals``); None for one that restricts no range of a column
    (``!=``, ``NOT IN``, ``IS [NOT] NULL``, a type skipping does not use, anything else). A long
    ``IN`` list, recorded as its count, smallest and largest value, becomes the range between those
    two: the files it reads are a subset of that range's (a conservative estimate).

    Raises:
        ValueError: a recorded constant is not a value of the filter's type.
    """
    op, name, kind = f.get("op"), f.get("column"), f.get("type")
    column = literals.column_of(name, kind) if isinstance(name, str) and isinstance(kind, str) else None
    if column is None:
        return None
    assert isinstance(kind, str)

    def value(key: str) -> Any:
        return literals.decode(kind, f[key])

    if op in ("=", "<=>"):
        return P.Compare(column, "=", value("value"), _NO_SPAN)
    if op in ("<", "<=", ">", ">="):
        return P.Compare(column, str(op), value("value"), _NO_SPAN)
    if op == "in":
        if "values" in f:
            return P.InList(column, tuple(literals.decode(kind, v) for v in f["values"]), False, _NO_SPAN)
        return P.Between(column, value("min"), value("max"), False, _NO_SPAN)
    if op == "starts_with" and kind == "string":
        return P.Like(column, _LIKE_SPECIAL.sub(r"\\\g<0>", value("value")) + "%", False, _NO_SPAN)
    return None


def shape_of(filters: Sequence[dict[str, Any]]) -> str:
    """Columns and operators, one term per column in column order: ``=`` (one value), ``IN``,
    ``<``, ``>``, ``BETWEEN`` (both ends), ``LIKE`` (a prefix), ``!=``, ``NOT IN``, ``IS NULL``;
    a filter of another form as ``other(columns)``. ``IS NOT NULL`` is left out: Spark infers
    it beside every comparison and join key."""
    ops: dict[str, set[str]] = {}
    others: set[str] = set()
    for f in filters:
        op, column = f.get("op"), f.get("column")
        if op == "is_not_null":
            continue
        if op == "other" or not isinstance(column, str):
            others.add(f"other({','.join(str(c) for c in f.get('columns') or [])})")
            continue
        if op in ("=", "<=>"):
            term = "="
        elif op == "in":
            term = "IN"
        elif op in ("<", "<="):
            term = "<"
        elif op in (">", ">="):
            term = ">"
        else:
            term = {"starts_with": "LIKE", "!=": "!=", "not_in": "NOT IN", "is_null": "IS NULL"}.get(str(op), str(op))
        ops.setdefault(column, set()).add(term)
    terms: list[str] = []
    for column in sorted(ops):
        found = ops[column]
        if {"<", ">"} <= found:
            found = (found - {"<", ">"}) | {"BETWEEN"}
        terms.extend(f"{column} {t}" for t in sorted(found))
    return " AND ".join([*terms, *sorted(others)])


# -- expiry --------------------------------------------------------------------------------------


@dataclass
class ExpiryReport:
    folder: str
    files: int = 0
    bytes: int = 0
    kept_files: int = 0
    kept_bytes: int = 0


def expire(table: LakeTable, settings: WorkloadConfig, *, now: float | None = None) -> ExpiryReport:
    """Delete the capture files older than ``workload.retention_days`` and, beyond
    ``workload.max_bytes``, the oldest others; and writers' temporary files left by a crash.

    Only files named as the listener names them, inside day folders of the table's workload
    folder, are ever deleted (and then the day folders left empty: on an object store, those
    before the retention only, see :func:`_remove_empty_day`).
    """
    now = time.time() if now is None else now
    fs, folder = table.filesystem(table.paths.workload)
    report = ExpiryReport(table.paths.workload)
    cutoff_ms = (now - settings.retention_s) * 1000
    keep: list[pafs.FileInfo] = []
    for day in fs.get_file_info(pafs.FileSelector(folder, allow_not_found=True)):
        if day.type != pafs.FileType.Directory or _DAY.match(day.base_name) is None:
            continue
        for info in fs.get_file_info(pafs.FileSelector(day.path, allow_not_found=True)):
            m = _NAME.match(info.base_name)
            if info.type != pafs.FileType.File:
                continue
            if m is None:
                old = info.mtime is not None and info.mtime.timestamp() < now - TEMP_GRACE_S
                if info.base_name.startswith(".") and info.base_name.endswith(".tmp") and old:
                    _delete(fs, folder, info, report)
            elif int(m.group(1)) < cutoff_ms:
                _delete(fs, folder, info, report)
            else:
                keep.append(info)
    keep.sort(key=lambda i: i.base_name, reverse=True)  # newest first
    total = 0
    for info in keep:
        total += info.size or 0
        if total > settings.max_bytes:
            _delete(fs, folder, info, report)
        else:
            report.kept_files += 1
            report.kept_bytes += info.size or 0
    cutoff_day = dt.datetime.fromtimestamp(cutoff_ms / 1000, dt.UTC).date().isoformat()
    for day in fs.get_file_info(pafs.FileSelector(folder, allow_not_found=True)):
        m = _DAY.match(day.base_name)
        if day.type == pafs.FileType.Directory and m is not None:
            if not fs.get_file_info(pafs.FileSelector(day.path, allow_not_found=True)):
                _remove_empty_day(fs, day.path, past_retention=m.group(1) < cutoff_day)
    if report.files:
        log.info("workload capture: deleted %d file(s), %d bytes from %s", report.files, report.bytes, folder)
    return report


def _remove_empty_day(fs: pafs.FileSystem, path: str, *, past_retention: bool) -> None:
    """Remove a day folder that was just listed empty, never a file a writer puts into it meanwhile.

    A local folder is removed only while it is empty (``rmdir``; pyarrow's ``delete_dir`` would
    delete what is in it). An object store has no such call: a folder there is a marker object
    (pyarrow leaves one when it deletes a folder's last file, so emptied days are listed) and
    deleting it deletes every key under it. So on a store only the days before the retention go,
    which no writer writes into any more (the listener writes today's, the importer nothing older
    than the retention); one emptied by the size bound goes once it is that old.
    """
    try:
        if isinstance(fs, pafs.LocalFileSystem):
            os.rmdir(path)
        elif past_retention:
            fs.delete_dir(path)
    except OSError:
        pass  # a writer created a file in it meanwhile, or another expiry removed it


def _delete(fs: pafs.FileSystem, folder: str, info: pafs.FileInfo, report: ExpiryReport) -> None:
    if not info.path.startswith(folder.rstrip("/") + "/"):  # never anything outside the folder
        raise AssertionError(f"{info.path} is outside {folder}")
    try:
        fs.delete_file(info.path)
    except FileNotFoundError:
        return  # another expiry (a second compactor) deleted it first
    report.files += 1
    report.bytes += info.size or 0
