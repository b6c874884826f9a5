"""The SparkSession lakecluster runs on, with the settings its writes depend on."""

from __future__ import annotations

import os
import signal
import sys
import threading
from collections.abc import Callable

from pyspark.sql import SparkSession

from lakecluster.config import SparkConfig

# Settings the project relies on; user-given spark.conf entries are applied after these.
BASE_CONF = {
    "spark.sql.session.timeZone": "UTC",
    # Spark 4 writes INT96 timestamps by default: no stats, read back as ns (brief §5).
    "spark.sql.parquet.outputTimestampType": "TIMESTAMP_MICROS",
    "spark.sql.shuffle.partitions": "8",
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.sql.streaming.stopTimeout": "60s",
    "spark.python.worker.reuse": "true",
    "spark.sql.execution.arrow.maxRecordsPerBatch": "65536",
    "spark.driver.memory": "2g",
    # A compaction group names its input files one by one; above this many paths Spark lists
    # them with a distributed job (seconds per group) instead of a few stat calls on the driver.
    "spark.sql.sources.parallelPartitionDiscovery.threshold": "100000",
}


def get_session(config: SparkConfig, app_name: str = "lakecluster") -> SparkSession:
    """Build (or reuse) the session and register lakecluster's Python data sources."""
    # Python workers must run this interpreter, or they fail to import lakecluster (brief §5).
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    builder = SparkSession.builder.master(config.master).appName(app_name)
    for key, value in {**BASE_CONF, **config.conf}.items():
        builder = builder.config(key, value)
    spark = _start_outside_signals(builder.getOrCreate)
    spark.sparkContext.setLogLevel("WARN")
    register_sources(spark)
    return spark


def _start_outside_signals(start: Callable[[], SparkSession]) -> SparkSession:
    """Start the JVM with SIGTERM ignored, and keep the process's own SIGINT handler.

    systemd (KillMode=control-group), `timeout` and `kill -- -pgid` signal the whole process
    group. A JVM that died with it would turn the graceful stop of the driver (finish the batch,
    stop the query) into a crash; the JVM inherits the ignored disposition and keeps it (PySpark
    does the same for SIGINT), and the driver, which owns the shutdown, stops it. SparkContext
    also replaces SIGINT with a handler that cancels jobs and raises KeyboardInterrupt, which
    would bypass the "finish the current batch" handler the CLI installs.
    """
    if threading.current_thread() is not threading.main_thread():
        return start()
    previous_term = signal.signal(signal.SIGTERM, signal.SIG_IGN)
    previous_int = signal.getsignal(signal.SIGINT)
    try:
        return start()
    finally:
        signal.signal(signal.SIGTERM, previous_term)
        signal.signal(signal.SIGINT, previous_int)


def register_sources(spark: SparkSession) -> None:
    from lakecluster.stream.generator_source import GeneratorDataSource
    from lakecluster.stream.kafka_source import KafkaDataSource

    spark.dataSource.register(GeneratorDataSource)
    spark.dataSource.register(KafkaDataSource)
