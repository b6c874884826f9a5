"""A compactor on a thread beside another service in the same process (``lakecluster run``)."""

from __future__ import annotations

import threading
from collections.abc import Callable

from pyspark.sql import SparkSession

from lakecluster.compaction.loop import Compactor
from lakecluster.compaction.reload import ThresholdReloader
from lakecluster.config import Config
from lakecluster.table import LakeTable


class BackgroundCompactor:
    """A compactor's ``run_forever`` on a thread beside another service (``lakecluster run``).

    ``failure`` keeps what ended it, if anything did; ``on_failure`` is called with it from the
    compactor's thread (``run`` stops the stream then).
    """

    def __init__(self, config: Config, spark: SparkSession | None = None,
                 on_failure: Callable[[BaseException], None] | None = None,
                 reloader: ThresholdReloader | None = None,
                 on_progress: Callable[[str], None] | None = None, table: LakeTable | None = None,
                 vacuum_allowed: Callable[[], bool] | None = None) -> None:  # fmt: skip
        self.config = config
        self.vacuum_allowed = vacuum_allowed
        self.table = table
        self.spark = spark
        self.on_failure = on_failure
        self.reloader = reloader
        self.on_progress = on_progress
        self.failure: BaseException | None = None
        self._compactor: Compactor | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="lakecluster-compactor", daemon=True)

    def _run(self) -> None:
        try:
            self._compactor = Compactor(self.config, table=self.table, spark=self.spark)
            self._compactor.reloader = self.reloader
            self._compactor.on_progress = self.on_progress
            if self.vacuum_allowed is not None:
                self._compactor.vacuum_allowed = self.vacuum_allowed
            if self._stop.is_set():
                return
            self._compactor.run_forever()
        except BaseException as e:
            self.failure = e
            if self.on_failure is not None:
                self.on_failure(e)

    def start(self) -> None:
        self._thread.start()

    def request_reload(self) -> None:
        if self._compactor is not None:
            self._compactor.request_reload()

    def stop(self, timeout_s: float | None = None) -> None:
        """Ask the compactor to stop (a rewrite in progress is abandoned) and wait for its thread."""
        self._stop.set()
        if self._compactor is not None:
            self._compactor.request_stop()
        if self._thread.is_alive():
            self._thread.join(timeout_s)
