"""The SparkSession lakecluster runs on, with the settings its writes depend on."""

from __future__ import annotations

import os
import sys

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
}


def get_session(config: SparkConfig, app_name: str = "lakecluster") -> SparkSession:
    """Build (or reuse) the session and register lakecluster's Python data sources."""
    # Python workers must run this interpreter, or they fail to import lakecluster (brief §5).
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    builder = SparkSession.builder.master(config.master).appName(app_name)
    for key, value in {**BASE_CONF, **config.conf}.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    register_sources(spark)
    return spark


def register_sources(spark: SparkSession) -> None:
    from lakecluster.stream.generator_source import GeneratorDataSource
    from lakecluster.stream.kafka_source import KafkaDataSource

    spark.dataSource.register(GeneratorDataSource)
    spark.dataSource.register(KafkaDataSource)
