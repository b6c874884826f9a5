"""Deleting files no table version within the retention period references: Delta's own VACUUM.

A data file is deleted only when no version of the table within ``vacuum.retention_hours``
references it and it is older than that: files removed by a compaction (they stay readable by
time travel to the versions before it), files of abandoned rewrites and of writers that died
before committing (never referenced). Delta's VACUUM does exactly this for the table and for the
quarantine table; it never enters directories whose names start with ``_`` (``_delta_log``,
``_lakecluster``), whose contents keep themselves bounded (sketch versions, index GC with a grace
period, Spark's checkpoint retention). Delta refuses a retention below the table's
``delta.deletedFileRetentionDuration`` (7 days) unless ``vacuum.force`` is set: files a running
rewrite or a slow reader still needs could go.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import pyarrow.fs as pafs
from pyspark.sql import SparkSession

from lakecluster import metrics, progress, storage
from lakecluster.config import VacuumConfig
from lakecluster.errors import RetentionError, TableNotFoundError
from lakecluster.faults import pause_point
from lakecluster.sizes import human_bytes
from lakecluster.table import DeltaLocation, LakeTable

log = logging.getLogger(__name__)

# A vacuum that would delete nothing is still run when the table's log shows no finished vacuum
# this recent: the alert on vacuums fires after two days without one.
RECORD_EVERY_S = 86_400.0


@dataclass
class VacuumReport:
    table: str
    retention_hours: float
    dry_run: bool
    files: int = 0
    bytes: int = 0
    seconds: float = 0.0
    paths: list[str] = field(default_factory=list)  # with dry_run: what would be deleted
    skipped: str = ""  # why Delta's VACUUM was not run (it would have deleted nothing)


def vacuum(spark: SparkSession | Callable[[], SparkSession], location: DeltaLocation, *, retention_hours: float,
           force: bool = False, dry_run: bool = False, may_skip: bool = False) -> VacuumReport:  # fmt: skip
    """VACUUM one table.

    Args:
        spark: a session of its own (settings are changed on it), or what makes one: a vacuum
            skipped by ``may_skip`` starts no Spark.
        may_skip: do not run Delta's VACUUM when no file of the table is older than the
            retention's cutoff (it would delete nothing).

    Raises:
        RetentionError: the retention is not a whole number of hours.
        TableNotFoundError: there is no table at ``location``.
    """
    uri = location.uri
    check_whole_hours(retention_hours)
    if not location.exists():
        raise TableNotFoundError(uri)
    started = time.monotonic()
    report = VacuumReport(uri, retention_hours, dry_run)
    if may_skip and not _any_file_before(location, time.time() - retention_hours * 3600):
        report.skipped = f"no file older than the retention of {retention_hours:g} h"
        report.seconds = time.monotonic() - started
        if not dry_run:
            metrics.VACUUM_RUNS.inc()
            metrics.VACUUM_LAST_SUCCESS.set(time.time())
        log.info("vacuum %s: nothing to delete (%s) in %.1fs", uri, report.skipped, report.seconds)
        return report
    session = spark if isinstance(spark, SparkSession) else spark()
    with progress.phase(f"vacuum {uri}{' dry run' if dry_run else ''}", announce=False):
        _run_vacuum(session, location, report, force=force)
    report.seconds = time.monotonic() - started
    log.info("vacuum %s (retain %gh)%s: %d file(s), %s in %.1fs", uri, retention_hours,
             " dry run" if dry_run else "", report.files, human_bytes(report.bytes), report.seconds)  # fmt: skip
    return report


def _any_file_before(location: DeltaLocation, cutoff: float) -> bool:
    with progress.phase(f"vacuum {location.uri}: looking for files older than the retention", announce=False):
        return any_file_before(location, cutoff)


def _run_vacuum(spark: SparkSession, location: DeltaLocation, report: VacuumReport, *, force: bool) -> None:
    """Delta's VACUUM of ``location`` as ``report`` asks (retention, dry run); fills in the report."""
    uri, retention_hours, dry_run = location.uri, report.retention_hours, report.dry_run
    spark.conf.set("spark.databricks.delta.retentionDurationCheck.enabled", "false" if force else "true")
    spark.conf.set("spark.databricks.delta.vacuum.logging.enabled", "true")
    # Delta 4 ignores ``RETAIN n HOURS`` unless n is 0 (the table's delta.deletedFileRetentionDuration
    # applies instead); lakecluster's retention is the configured one.
    spark.conf.set("spark.databricks.delta.vacuum.retentionWindowIgnore.enabled", "false")
    statement = f"VACUUM delta.`{uri}` RETAIN {retention_hours:g} HOURS" + (" DRY RUN" if dry_run else "")
    if dry_run:
        report.paths = sorted(r[0] for r in spark.sql(statement).collect())
        report.files = len(report.paths)
        infos = location.fs.get_file_info([storage.filesystem(p, location.storage)[1] for p in report.paths])
        report.bytes = sum(i.size or 0 for i in infos)
    else:
        before = location.open().version()
        spark.sql(statement).collect()
        report.files, report.bytes = _deleted(location, before)
        metrics.VACUUM_RUNS.inc()
        metrics.VACUUM_FILES.inc(report.files)
        metrics.VACUUM_BYTES.inc(report.bytes)
        metrics.VACUUM_LAST_SUCCESS.set(time.time())


def any_file_before(location: DeltaLocation, cutoff: float) -> bool:
    """Whether a file Delta's VACUUM would consider was last modified before ``cutoff`` (seconds
    since the epoch). Walks the table's directories as VACUUM lists them (skipping the hidden ones:
    the log, lakecluster's own) and stops at the first such file."""
    pending = [location.root]
    while pending:
        infos = location.fs.get_file_info(pafs.FileSelector(pending.pop(), allow_not_found=True))
        for info in infos:
            if _hidden(info.base_name):
                continue
            if info.type == pafs.FileType.Directory:
                pending.append(info.path)
            elif info.mtime is None or info.mtime.timestamp() < cutoff:
                return True
    return False


def _hidden(name: str) -> bool:
    """Delta's rule for names VACUUM never lists (``DeltaTableUtils.isHiddenDirectory``), but
    leaving partition directories (``_c=1``) and change data in: a name kept in by mistake can only
    make a vacuum run, never skip one it needed."""
    if "=" in name or name.startswith(("_change_data", "_delta_index")):
        return False
    return name.startswith(("_", "."))


def check_whole_hours(retention_hours: float) -> None:
    """Delta's VACUUM rounds its retention to whole hours (``math.round``): 0.4 h would become 0 and
    delete files that a concurrent writer committed after the vacuum read the table. A fractional
    retention is refused rather than silently shortened or lengthened."""
    if retention_hours < 0 or retention_hours != int(retention_hours):
        raise RetentionError(f"the vacuum retention must be a whole number of hours >= 0, got {retention_hours:g} "
                             "(Delta's VACUUM rounds it to whole hours: 0.4 h would become 0)")


def _deleted(location: DeltaLocation, before: int) -> tuple[int, int]:
    """Files deleted (VACUUM END) and their bytes (VACUUM START) as Delta logged them after ``before``."""
    table = location.open()
    files = size = 0
    for entry in table.history(max(1, table.version() - before)):
        m = entry.get("operationMetrics") or {}
        if entry.get("operation") == "VACUUM END":
            files = int(m.get("numDeletedFiles", 0) or 0)
        elif entry.get("operation") == "VACUUM START":
            size = int(m.get("sizeOfDataToDelete", 0) or 0)
    return files, size


def vacuum_all(spark: SparkSession | Callable[[], SparkSession], table: LakeTable, settings: VacuumConfig, *,
               retention_hours: float | None = None, force: bool | None = None,
               dry_run: bool = False) -> list[VacuumReport]:  # fmt: skip
    """The table and, when it exists, its quarantine table (``settings``: retention and force,
    unless given). Spark starts (``spark`` may be what makes a session) only for a table with a
    file old enough to be deleted."""
    pause_point("vacuum")
    hours = settings.retention_hours if retention_hours is None else retention_hours
    forced = settings.force if force is None else force
    session = _once(spark)
    reports = [vacuum(session, table.delta, retention_hours=hours, force=forced, dry_run=dry_run,
                      may_skip=recently_recorded(table))]  # fmt: skip
    if table.quarantine.exists():
        # The alert watches the table's log, not the quarantine table's.
        reports.append(vacuum(session, table.quarantine, retention_hours=hours, force=forced, dry_run=dry_run,
                              may_skip=True))  # fmt: skip
    return reports


def recently_recorded(table: LakeTable, within_s: float = RECORD_EVERY_S) -> bool:
    """Whether the table's log shows a finished vacuum, or else the table's creation, within
    ``within_s`` (a history read back only part of the way, with no vacuum in it: no)."""
    history = table.history()
    if history.last_vacuum is not None:
        stamp = history.last_vacuum.timestamp_ms
    elif history.oldest_version == 0:  # the history read reached the table's creation
        stamp = history.oldest_commit_ms
    else:  # no vacuum among the commits read, and older ones unread: run it
        return False
    return stamp is not None and time.time() - stamp / 1000 < within_s


def _once(spark: SparkSession | Callable[[], SparkSession]) -> Callable[[], SparkSession]:
    """``spark``, or the session it makes, made at most once."""
    made: list[SparkSession] = []

    def session() -> SparkSession:
        if isinstance(spark, SparkSession):
            return spark
        if not made:
            made.append(spark())
        return made[0]

    return session
