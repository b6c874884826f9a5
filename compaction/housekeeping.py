"""The compactor's housekeeping between rounds: Delta's ``VACUUM`` every ``vacuum.interval_s``
(the quarantine's expired records first, ``erasure.expire_quarantine``), and with each vacuum the
workload capture files past their retention or size bound (``lakecluster.workload.expire``,
inside ``_lakecluster/workload/`` only). Nothing else the compactor does deletes files.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Callable

from pyspark.sql import SparkSession

from lakecluster.compaction.erasure import expire_quarantine
from lakecluster.compaction.stopping import StopControl
from lakecluster.compaction.vacuum import vacuum_all
from lakecluster.config import Config
from lakecluster.table import LakeTable
from lakecluster.workload import expire

log = logging.getLogger(__name__)


class VacuumStopped(Exception):
    """A stop request came before the vacuum's Spark work started."""


class Housekeeping:
    """Vacuum on a schedule, and the capture's expiry with it.

    Args:
        table: the table's handle.
        spark: the compactor's session (started only when a file is old enough to go).
        stop: the compactor's stop request (it cancels a vacuum in flight at once).
    """

    def __init__(self, table: LakeTable, spark: Callable[[], SparkSession], stop: StopControl) -> None:
        self.table = table
        self._spark = spark
        self.stop = stop
        self.last_vacuum: float | None = None  # the first round vacuums
        # Vacuum only once this says yes: ``run`` holds it until the stream has started for real.
        self.allowed: Callable[[], bool] = lambda: True

    def maybe_vacuum(self, config: Config) -> None:
        interval = config.vacuum.interval_s
        if interval <= 0 or (self.last_vacuum is not None and time.monotonic() - self.last_vacuum < interval):
            return
        if not self.allowed() or self.stop.stopping:
            return
        group = f"lakecluster-vacuum-{uuid.uuid4().hex[:8]}"

        def session() -> SparkSession:  # Spark is needed only for a table with a file old enough to go
            if self.stop.stopping:  # a stop during the look for old files: no VACUUM starts
                raise VacuumStopped
            spark = self._spark()
            spark.sparkContext.setJobGroup(group, "vacuum", interruptOnCancel=True)
            self.stop.vacuum_group = group
            if self.stop.stopping:  # a stop came between the check and the group: cancel what starts
                threading.Thread(target=self.stop.cancel_vacuum, daemon=True).start()
            return spark

        try:
            expire_quarantine(session, self.table, config.vacuum.quarantine_retention_days)
            vacuum_all(session, self.table, config.vacuum)
        finally:
            if self.stop.vacuum_group is not None:
                self.stop.vacuum_group = None
                self._spark().sparkContext.setLocalProperty("spark.jobGroup.id", None)  # type: ignore[arg-type]
        self.expire_capture(config)
        self.last_vacuum = time.monotonic()  # after success: a failed vacuum is retried with the round

    def expire_capture(self, config: Config) -> None:
        """Delete the workload capture files past ``workload.retention_days`` or ``workload.max_bytes``
        (docs/workload.md). A failure is logged: the capture is a side folder, never worth a round."""
        try:
            expire(self.table, config.workload)
        except Exception as e:
            log.warning("workload capture: expiring old capture files of %s failed: %s", self.table.uri, e)
