"""The SparkSession lakecluster runs on: Delta Lake, its jars, storage access, and the settings its
writes depend on. Components register their own data sources; nothing here knows about them."""

from __future__ import annotations

import logging
import os
import signal
import sys
import threading
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from pyspark.sql import SparkSession

from lakecluster import faults, jars, progress
from lakecluster.class_archive import ClassArchive, chosen_by_user, keep_at_exit
from lakecluster.config import SparkConfig, StorageConfig
from lakecluster.storage import hadoop_conf

log = logging.getLogger(__name__)
LOG4J_CONFIG = Path(__file__).parent / "jvm" / "log4j2.properties"

# Settings the project relies on; user-given spark.conf entries are applied after these.
BASE_CONF = {
    "spark.sql.extensions": "io.delta.sql.DeltaSparkSessionExtension",
    "spark.sql.catalog.spark_catalog": "org.apache.spark.sql.delta.catalog.DeltaCatalog",
    # Commits from several processes (stream, compactors) must never overwrite each other: Delta's
    # own stores are safe inside one JVM only (docs/storage.md).
    "spark.delta.logStore.file.impl": jars.LOGSTORE_CLASS,
    "spark.delta.logStore.s3.impl": jars.LOGSTORE_CLASS,
    "spark.delta.logStore.s3a.impl": jars.LOGSTORE_CLASS,
    "spark.sql.session.timeZone": "UTC",
    # Spark 4 writes INT96 timestamps by default: no stats, read back as ns.
    "spark.sql.parquet.outputTimestampType": "TIMESTAMP_MICROS",
    "spark.sql.shuffle.partitions": "8",
    # Delta rebuilds a snapshot with this many shuffle partitions (default 50): on a few cores
    # that is ~6 s of task overhead per commit for a small log.
    "spark.databricks.delta.snapshotPartitions": "4",
    # Every micro-batch asks the snapshot for its app transaction (txnAppId/txnVersion); kept in the
    # checksum file, that is a small read instead of a state reconstruction job per batch.
    "spark.databricks.delta.setTransactionsInCrc.writeOnCommit": "true",
    # Errors carry the JVM stack trace (their causes), which tells transient faults from fatal ones.
    "spark.sql.pyspark.jvmStacktrace.enabled": "true",
    # pyspark 4 sends every Column call's Python call site to the JVM (for error messages), five
    # more calls into the JVM each: building the Avro decoding of a micro-batch (stream/avro.py)
    # took 0.35-0.55 s so, 0.10-0.24 s without. lakecluster's errors name their cause themselves.
    "spark.python.sql.dataFrameDebugging.enabled": "false",
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.sql.streaming.stopTimeout": "60s",
    # With no new data and stream.trigger_interval_s = 0, Spark asks the sources for their latest
    # offsets again after this long (its default: 10 ms, a hundred Kafka ListOffsets requests or
    # calls into the generator's Python runner a second). An idle generator stream used 9 % of a
    # core so, 4 % with 100 ms (2 % with 500 ms); 100 ms keeps the wait for new data short.
    "spark.sql.streaming.pollingDelay": "100ms",
    "spark.python.worker.reuse": "true",
    # pyspark's daemon with pyspark imported from the installed package, not compiled from Spark's
    # zip at each start (lakecluster/python_daemon.py).
    "spark.python.daemon.module": "lakecluster.python_daemon",
    "spark.sql.execution.arrow.maxRecordsPerBatch": "65536",
    "spark.driver.memory": "2g",
    # A compaction group names its input files one by one; above this many paths Spark lists
    # them with a distributed job (seconds per group) instead of a few stat calls on the driver.
    "spark.sql.sources.parallelPartitionDiscovery.threshold": "100000",
    # Delta's VACUUM lists the table's directories in this many tasks (Spark's default: 10,000):
    # on 2 cores a vacuum of a small table took 26-54 s, 5 s with 16.
    "spark.sql.sources.parallelPartitionDiscovery.parallelism": "16",
}


# HotSpot leaves methods over 8,000 bytes of bytecode to the interpreter, and Spark's whole-stage
# code for a projection of many expressions is often larger (up to 64 KiB, Spark's own limit): the
# Avro decoding of a micro-batch with its per-record rules (stream/avro.py) ran 2.1 x slower than
# with the JIT compiling it (400,000 SSB records: 5.5 s, 2.6 s with this option; the effect on the
# whole stream is in docs/benchmarks.md, "Ingest, Avro").
JIT_OPTIONS = "-XX:-DontCompileHugeMethods"


def session_conf(
    config: SparkConfig, storage: StorageConfig, *, s3: bool, extra_jars: Sequence[Path] = ()
) -> dict[str, str]:
    """Every setting the session is built with: ours (our jars and ``extra_jars``), storage
    access, then the user's."""
    jar_files = [*jars.spark_jars(s3=s3, cache_dir=jars.cache_dir(config.jars_cache)), *extra_jars]
    java_options = (f"-Dlog4j2.configurationFile={LOG4J_CONFIG} -Dlakecluster.jvm.log.level={config.log_level} "
                    f"{JIT_OPTIONS}")  # fmt: skip
    if config.java_options:
        java_options = f"{java_options} {config.java_options}"
    conf = {**BASE_CONF, "spark.jars": ",".join(str(j) for j in jar_files),
            "spark.driver.extraJavaOptions": java_options, "spark.executor.extraJavaOptions": java_options}
    if s3:
        conf.update({f"spark.hadoop.{k}": v for k, v in hadoop_conf(storage).items()})
    conf.update(config.conf)
    return conf


def get_session(
    config: SparkConfig,
    storage: StorageConfig | None = None,
    *,
    s3: bool = False,
    app_name: str = "lakecluster",
    extra: Mapping[str, str] | None = None,
    extra_jars: Sequence[Path] = (),
) -> SparkSession:
    """Build (or reuse) the session. ``s3`` adds hadoop-aws and the S3 settings; ``extra_jars`` go
    on ``spark.jars`` after lakecluster's (the workload listener's, say)."""
    # Python workers must run this interpreter, or they fail to import lakecluster.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    from pyspark import SparkContext

    conf = {**session_conf(config, storage or StorageConfig(), s3=s3, extra_jars=extra_jars), **(extra or {})}
    archive, pending = None, None
    starts_jvm = SparkContext._gateway is None  # else getOrCreate runs in the JVM already up
    driver_options = conf.get("spark.driver.extraJavaOptions", "")
    if config.class_archive and starts_jvm and not chosen_by_user(driver_options):
        try:
            archive = ClassArchive.in_jars_cache(config.jars_cache)
            options, pending = archive.java_options()
            conf["spark.driver.extraJavaOptions"] = f"{driver_options} {options}".strip()
        except OSError as error:  # a read-only cache: Spark starts as it would without an archive
            log.info("no JVM class archive (%s)", error)
            archive, pending = None, None
    builder = SparkSession.builder.master(config.master).appName(app_name)
    for key, value in conf.items():
        builder = builder.config(key, value)
    loud = config.log_level in ("warn", "info", "debug")
    if starts_jvm:
        with progress.phase(f"starting Spark ({config.master})"):
            spark = _start_outside_signals(lambda: _with_jvm_console(builder.getOrCreate, shown=loud))
    else:
        spark = _start_outside_signals(lambda: _with_jvm_console(builder.getOrCreate, shown=loud))
    jvm = getattr(SparkContext._gateway, "proc", None)
    if archive is not None and pending is not None and jvm is not None:
        keep_at_exit(archive, pending, jvm, before_exit=spark.sparkContext.stop)
    spark.sparkContext.setLogLevel(config.log_level.upper())
    return spark


def _with_jvm_console(start: Callable[[], SparkSession], *, shown: bool) -> SparkSession:
    """Start the JVM with its stdout and stderr on a pipe that a thread drains into the
    ``lakecluster.jvm`` log.

    Besides log4j (configured by ``spark.log_level``), the JVM and the Python workers it starts
    write to the console on their own: launcher notices, uncaught exceptions of JVM threads,
    worker tracebacks, Delta's console notes (VACUUM's "Deleted N files"). Every failure that
    matters also reaches lakecluster as an exception and is reported once, as one line; what
    lakecluster prints (and ``--json`` output above all) is its own. The JVM's lines go to the log
    at WARNING when ``spark.log_level`` is warn or more verbose (``--debug``), else at DEBUG.
    """
    if SparkSession.getActiveSession() is not None or not _console_is_file_descriptors():
        return start()
    sys.stdout.flush()  # what Python has buffered belongs on the real stdout, not in the pipe
    sys.stderr.flush()
    read_end, write_end = os.pipe()
    saved = {fd: os.dup(fd) for fd in (1, 2)}
    for fd in saved:
        os.dup2(write_end, fd)  # the JVM (and whatever it starts) inherits these
    try:
        return start()
    finally:
        for fd, copy in saved.items():
            os.dup2(copy, fd)
            os.close(copy)
        os.close(write_end)
        threading.Thread(target=_drain, args=(read_end, logging.WARNING if shown else logging.DEBUG),
                         name="lakecluster-jvm-console", daemon=True).start()  # fmt: skip


def _console_is_file_descriptors() -> bool:
    try:
        os.fstat(1)
        os.fstat(2)
    except OSError:
        return False
    return True


def _drain(fd: int, level: int) -> None:
    log = logging.getLogger("lakecluster.jvm")
    with os.fdopen(fd, "rb") as pipe:
        for raw in pipe:
            line = raw.decode("utf-8", "replace").rstrip()
            if line:
                log.log(level, "%s", line)


def _start_outside_signals(start: Callable[[], SparkSession]) -> SparkSession:
    """Start the JVM ignoring SIGTERM, while this process keeps its own SIGTERM and SIGINT handlers.

    systemd (KillMode=control-group), `timeout` and `kill -- -pgid` signal the whole process
    group. A JVM that died with it would turn the graceful stop of the driver (finish the batch,
    stop the query) into a crash; so the JVM starts with SIGTERM ignored, a disposition that
    survives exec (PySpark does the same for SIGINT), and the driver, which owns the shutdown,
    stops it. The disposition is set in the child between fork and exec only: were it set in this
    process for the seconds the start takes, a stop arriving meanwhile would be dropped, and the
    service would run on as if it had never been asked to stop. SparkContext also replaces SIGINT
    with a handler that cancels jobs and raises KeyboardInterrupt, which would bypass the "finish
    the current batch" handler the CLI installs: the process's own is put back.
    """
    import pyspark.java_gateway as gateway

    launch = gateway.Popen

    def launch_ignoring_sigterm(*args: Any, **kwargs: Any) -> Any:
        theirs = kwargs.get("preexec_fn")

        def in_the_child() -> None:
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
            if theirs is not None:
                theirs()

        kwargs["preexec_fn"] = in_the_child
        return launch(*args, **kwargs)

    on_main_thread = threading.current_thread() is threading.main_thread()
    previous_int = signal.getsignal(signal.SIGINT) if on_main_thread else None
    gateway.Popen = launch_ignoring_sigterm  # type: ignore[misc,assignment]
    try:
        faults.pause_point("spark_start")
        return start()
    finally:
        gateway.Popen = launch  # type: ignore[misc]
        if on_main_thread:
            signal.signal(signal.SIGINT, previous_int)
