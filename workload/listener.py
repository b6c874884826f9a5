"""The query listener that captures a table's workload in any Spark application (docs/workload.md).

The listener is Java (``jvm/WorkloadListener.java``, ``jvm/WorkloadWriter.java`` beside this module),
compiled on first use into a jar of its own in the jars cache (:func:`listener_jar`). It needs
Spark's classes only (Delta's it reaches by name), so it runs in an application with its own
delta-spark. An application of another team enables it with two settings, which ``lakecluster
workload --listener-conf`` prints: the jar on ``spark.jars`` and the listener's class on
``spark.sql.queryExecutionListeners``.
The listener's own settings are Spark conf keys under ``spark.lakecluster.workload.``; their
defaults are those of lakecluster's ``[workload]`` keys, and the command prints a line for each
key the configuration sets otherwise.
"""

from __future__ import annotations

from pathlib import Path

from lakecluster import jars
from lakecluster.config import SparkConfig, WorkloadConfig

LISTENER_CLASS = "lakecluster.workload.WorkloadListener"
LISTENERS_KEY = "spark.sql.queryExecutionListeners"
PREFIX = "spark.lakecluster.workload."
# lakecluster's [workload] keys the listener reads, by its Spark conf name (spark.lakecluster.workload.<name>).
LISTENER_KEYS = {
    "flush_records": "flushRecords",
    "flush_interval_s": "flushSeconds",
    "max_in_values": "maxInValues",
    "max_file_bytes": "maxFileBytes",
    "max_bytes_per_app_day": "maxBytesPerAppDay",
}


JAVA_SOURCES = Path(__file__).parent / "jvm"


def listener_jar(spark: SparkConfig) -> Path:
    """The jar holding the listener, in the jars cache of ``spark`` (compiled on first use)."""
    return jars.compiled_jar("lakecluster-workload", JAVA_SOURCES, [], cache_dir=jars.cache_dir(spark.jars_cache))


def listener_conf(workload: WorkloadConfig, jar: Path) -> dict[str, str]:
    """The Spark settings that turn capture on in an application: the jar, the listener, and the
    listener's settings that differ from its defaults."""
    conf = {"spark.jars": str(jar), LISTENERS_KEY: LISTENER_CLASS}
    defaults = WorkloadConfig()
    for key, name in LISTENER_KEYS.items():
        value = getattr(workload, key)
        if value != getattr(defaults, key):
            conf[PREFIX + name] = f"{value:g}" if isinstance(value, float) else str(value)
    return conf
