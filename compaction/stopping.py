"""Stopping the compactor within its bound.

A stop request lets the group in flight finish for up to ``compaction.stop_timeout_s``, then
cancels its Spark jobs (the rewrite checks :attr:`StopControl.cancelled` before it starts, when it
returns and before the commit, and abandons the group: nothing of it is committed, its files are
vacuum's). A vacuum in flight is cancelled at once: what it has not deleted yet, the next one will.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger(__name__)


class StopControl:
    """The compactor's stop request and what it cancels: the rewrite's and the vacuum's Spark jobs.

    Args:
        started_session: the compactor's session if it started one (None: nothing to cancel).
        timeout_s: ``compaction.stop_timeout_s`` as configured now (it may be reloaded).
    """

    def __init__(self, started_session: Callable[[], SparkSession | None], timeout_s: Callable[[], float]) -> None:
        self._session = started_session
        self._timeout_s = timeout_s
        self.requested = threading.Event()
        self.wake = threading.Event()  # ends the wait between rounds early: a stop or a reload
        self.cancelled = threading.Event()  # the stop timeout passed mid-rewrite: abandon it, whatever Spark did
        self.busy = threading.Event()  # a rewrite is in flight
        self.job_group: str | None = None  # the Spark job group of the rewrite in flight
        self.vacuum_group: str | None = None  # the Spark job group of the vacuum in flight

    @property
    def stopping(self) -> bool:
        return self.requested.is_set()

    def request(self) -> None:
        """Stop after the group in flight, or cancel it after the timeout; cancel a vacuum at once."""
        self.requested.set()
        self.wake.set()
        if self.vacuum_group is not None:
            log.warning("stop: cancelling the vacuum in flight")
        threading.Thread(target=self.cancel_vacuum, daemon=True, name="lakecluster-vacuum-stop").start()
        threading.Thread(target=self._cancel_after_timeout, daemon=True, name="lakecluster-compact-stop").start()

    def _cancel_after_timeout(self) -> None:
        time.sleep(self._timeout_s())
        # Set whatever the compactor does now (a rewrite, or the planning of one): the rewrite
        # checks it before it starts, when it returns and before the commit, and abandons the
        # group; its files, if any, are orphaned (vacuum's). Set before cancelling: a job
        # submitted after cancelJobGroup is not cancelled.
        self.cancelled.set()
        group = self.job_group
        if self.busy.is_set():
            log.warning("stop: cancelling the rewrite in flight (nothing of it is committed)")
        session = self._session()
        if group is not None and session is not None:
            session.sparkContext.cancelJobGroup(group)

    def cancel_vacuum(self) -> None:
        """Cancel the vacuum's Spark jobs until it ends: cancelJobGroup reaches only the jobs running
        at that moment, and Delta's VACUUM runs many, one after another."""
        while (group := self.vacuum_group) is not None and (session := self._session()) is not None:
            session.sparkContext.cancelJobGroup(group)
            time.sleep(0.2)
