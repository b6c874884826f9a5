"""The driver JVM's memory, garbage collection and threads as Prometheus metrics, read at scrape time.

prometheus_client's ``process_*`` metrics describe the Python process; the Spark driver's JVM is a
child process whose heap is where a service runs out of memory (docs/operations.md, "Memory").
:class:`JvmCollector` reads the JVM's own ``java.lang.management`` MXBeans through py4j, on the
gateway of the SparkContext the process already runs: a process without one (Spark not started
yet, or stopped) serves no JVM series, and a scrape never starts Spark nor imports pyspark.

A py4j call waits for the JVM, which may be stuck (a long GC pause, a dying gateway): each read
runs on a thread of its own and a scrape waits for it at most ``timeout_s``. A read still running
from an earlier scrape is not repeated, so a stuck JVM holds one thread, not one per scrape.

A scrape whose read misses that bound serves the last reading while it is at most ``REUSE_FOR_S``
old: a series left out of one scrape is marked stale by Prometheus at once, so a driver busy for a
moment (the moments its memory matters most) would punch holes in every JVM panel. A JVM that has
not answered for longer serves no JVM series, and ``up`` with the other series says the process lives.
"""

from __future__ import annotations

import logging
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from lakecluster.faults import pause_point

log = logging.getLogger(__name__)

READ_TIMEOUT_S = 0.5  # well within a scrape timeout (Prometheus's default is 10 s; the tests use 0.9 s)
READER_THREAD = "jvm-metrics"
STUCK_AFTER_S = 30.0  # a read running this long is reported once as stuck
# A read that misses its bound serves the last reading up to this old. No longer than STUCK_AFTER_S:
# the last reading predates the stuck read, so when the stuck warning says "no JVM metrics", there are none.
REUSE_FOR_S = STUCK_AFTER_S


@dataclass(frozen=True)
class GcReading:
    name: str  # the collector's name as the JVM gives it, "G1 Young Generation"
    collections: int
    seconds: float


@dataclass(frozen=True)
class JvmReading:
    """One read of the driver JVM's MXBeans; a value the JVM leaves undefined (-1) is absent."""

    memory: dict[tuple[str, str], int]  # (area: heap | nonheap, kind: used | committed | max) -> bytes
    gc: tuple[GcReading, ...]
    threads: int
    daemon_threads: int


def _driver_jvm() -> Any | None:
    """The py4j view of the running SparkContext's JVM, or None. Looks, never imports or starts."""
    module = sys.modules.get("pyspark.core.context") or sys.modules.get("pyspark.context")
    spark_context = getattr(getattr(module, "SparkContext", None), "_active_spark_context", None)
    if spark_context is None:
        return None
    return getattr(spark_context, "_jvm", None)


def read_jvm(jvm: Any) -> JvmReading:
    """Read the MXBeans through py4j (about twenty round trips of well under a millisecond each)."""
    pause_point("jvm_metrics")
    factory = jvm.java.lang.management.ManagementFactory
    memory_bean = factory.getMemoryMXBean()
    memory: dict[tuple[str, str], int] = {}
    for area, usage in (("heap", memory_bean.getHeapMemoryUsage()), ("nonheap", memory_bean.getNonHeapMemoryUsage())):
        for kind, value in (("used", usage.getUsed()), ("committed", usage.getCommitted()), ("max", usage.getMax())):
            if value >= 0:
                memory[(area, kind)] = int(value)
    gc = tuple(
        GcReading(str(bean.getName()), int(count), max(0, int(bean.getCollectionTime())) / 1000)
        for bean in factory.getGarbageCollectorMXBeans()
        if (count := bean.getCollectionCount()) >= 0
    )
    threads = factory.getThreadMXBean()
    return JvmReading(memory, gc, int(threads.getThreadCount()), int(threads.getDaemonThreadCount()))


def families(reading: JvmReading | None) -> list[Metric]:
    """The reading as metric families (without samples when there is no reading)."""
    memory = GaugeMetricFamily("lakecluster_jvm_memory_bytes",
                               "Memory of the driver JVM by area (heap, nonheap) and kind (used, committed, max)",
                               labels=["area", "kind"])  # fmt: skip
    collections = CounterMetricFamily("lakecluster_jvm_gc_collections", "Garbage collections of the driver JVM",
                                      labels=["gc"])  # fmt: skip
    gc_seconds = CounterMetricFamily("lakecluster_jvm_gc_collection_seconds",
                                     "Accumulated wall time of the driver JVM's garbage collections", labels=["gc"])
    threads = GaugeMetricFamily("lakecluster_jvm_threads", "Live threads of the driver JVM, by daemon or not",
                                labels=["daemon"])  # fmt: skip
    if reading is not None:
        for (area, kind), value in sorted(reading.memory.items()):
            memory.add_metric([area, kind], value)
        for gc in reading.gc:
            collections.add_metric([gc.name], gc.collections)
            gc_seconds.add_metric([gc.name], gc.seconds)
        threads.add_metric(["true"], reading.daemon_threads)
        threads.add_metric(["false"], reading.threads - reading.daemon_threads)
    return [memory, collections, gc_seconds, threads]


class JvmCollector:
    """A prometheus_client collector of the driver JVM's metrics (module docstring)."""

    def __init__(self, registry: CollectorRegistry | None = None, timeout_s: float = READ_TIMEOUT_S) -> None:
        self.timeout_s = timeout_s
        self._lock = threading.Lock()
        self._reader: threading.Thread | None = None
        self._reader_started = 0.0
        self._stuck_reported = False
        self._last: tuple[float, JvmReading] | None = None  # (monotonic time read, reading)
        if registry is not None:
            registry.register(self)

    def describe(self) -> list[Metric]:
        return families(None)

    def collect(self) -> Iterator[Metric]:
        reading = self.read()
        if reading is not None:
            yield from families(reading)

    def read(self) -> JvmReading | None:
        """The JVM's values now; the last reading if it is at most ``REUSE_FOR_S`` old and this read
        is not done within ``timeout_s`` (or one from an earlier call still runs); else None (also
        without a running SparkContext, or when the read failed)."""
        jvm = _driver_jvm()
        if jvm is None:
            self._last = None  # a stopped SparkContext's values are not the next one's
            return None
        answered, reading = self._read_now(jvm)
        now = time.monotonic()
        if reading is not None:
            self._last = (now, reading)
            return reading
        if not answered and self._last is not None and now - self._last[0] <= REUSE_FOR_S:
            return self._last[1]
        return None

    def _read_now(self, jvm: Any) -> tuple[bool, JvmReading | None]:
        """(whether the JVM answered within ``timeout_s``, its reading or None if the read failed)."""
        result: list[JvmReading] = []
        done = threading.Event()

        def run() -> None:
            try:
                result.append(read_jvm(jvm))
            except Exception as e:  # a stopped or dying gateway: no JVM series in this scrape
                log.debug("cannot read the driver JVM's metrics: %s", e)
            finally:
                done.set()

        with self._lock:
            if self._reader is not None and self._reader.is_alive():
                running_s = time.monotonic() - self._reader_started
                if running_s > STUCK_AFTER_S and not self._stuck_reported:
                    self._stuck_reported = True
                    log.warning("a read of the driver JVM's metrics has not returned for %.0f s: no JVM metrics "
                                "until it does (a JVM stuck in GC or a broken py4j gateway)", running_s)  # fmt: skip
                else:
                    log.debug("the previous read of the driver JVM's metrics is still running")
                return False, None
            self._reader = threading.Thread(target=run, name=READER_THREAD, daemon=True)
            self._reader_started, self._stuck_reported = time.monotonic(), False
            self._reader.start()
        if not done.wait(self.timeout_s):
            log.warning("the driver JVM did not answer within %.1f s: this scrape serves its last reading "
                        "(if at most %.0f s old)", self.timeout_s, REUSE_FOR_S)  # fmt: skip
            return False, None
        return True, (result[0] if result else None)
