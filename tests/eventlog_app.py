"""A real pyspark + delta-spark application writing Spark event logs, for the importer's tests
(tests/workload/test_eventlog.py): run as ``python tests/eventlog_app.py LOGS TABLE``.

In one JVM, four applications one after the other:

- ``queries``: Spark 4's default log (rolling, zstd) with the query listener on, time zone
  Europe/Paris; writes a small Delta table, runs the queries of :data:`QUERIES`, a join, a scan of
  plain parquet, a query that fails, then appends and queries again (table version 1);
- ``plain``, ``lz4``, ``snappy``: a single log file, uncompressed or compressed, one query each.
"""

from __future__ import annotations

import sys
import time

QUERIES = [
    "city = 'CITY7'",
    "qty >= 10 AND qty < 20 AND part = 1",
    "city IN ('CITY3', 'CITY1', 'CITY2')",
    "qty IN (" + ", ".join(str(v) for v in range(50, 90)) + ")",
    "day > DATE'1995-06-01' AND revenue <= 12.5 AND part IN (0, 3)",
    "city LIKE 'CITY1%' AND NOT (qty = 3)",
    "city = 'A, B (x) ''q'' ü'",
    "qty > -5 AND ratio < -0.5",
    "ts >= TIMESTAMP'2026-01-01 00:30:00'",
    "upper(city) = 'X'",
]
LAST = "qty = 7"  # after the append: reads table version 1


def main(logs: str, table: str) -> None:
    from pyspark.sql import SparkSession

    from lakecluster import jars
    from lakecluster.config import SparkConfig
    from lakecluster.workload.listener import listener_jar

    application_jars = [*jars.spark_jars(s3=False), listener_jar(SparkConfig())]  # Delta's, and the listener's
    base = {"spark.jars": ",".join(str(j) for j in application_jars),
            "spark.sql.extensions": "io.delta.sql.DeltaSparkSessionExtension",
            "spark.sql.catalog.spark_catalog": "org.apache.spark.sql.delta.catalog.DeltaCatalog",
            "spark.databricks.delta.snapshotPartitions": "1", "spark.sql.shuffle.partitions": "1",
            "spark.ui.enabled": "false", "spark.ui.showConsoleProgress": "false",
            "spark.eventLog.enabled": "true", "spark.eventLog.dir": logs}  # fmt: skip
    apps = {
        "queries": {"spark.sql.queryExecutionListeners": "lakecluster.workload.WorkloadListener",
                    "spark.sql.session.timeZone": "Europe/Paris"},
        "plain": {"spark.eventLog.rolling.enabled": "false", "spark.eventLog.compress": "false"},
        "lz4": {"spark.eventLog.rolling.enabled": "false", "spark.eventLog.compression.codec": "lz4"},
        "snappy": {"spark.eventLog.rolling.enabled": "false", "spark.eventLog.compression.codec": "snappy"},
    }  # fmt: skip
    started = time.monotonic()
    for name, conf in apps.items():
        builder = SparkSession.builder.master("local[1]").appName(name)
        for key, value in {**base, **conf}.items():
            builder = builder.config(key, value)
        spark = builder.getOrCreate()
        spark.sparkContext.setLogLevel("ERROR")
        if name == "queries":
            queries(spark, table)
        else:
            spark.read.format("delta").load(table).where(LAST).collect()
        print(name, spark.sparkContext.applicationId, f"{time.monotonic() - started:.1f}s", flush=True)
        spark.stop()


def queries(spark, table: str) -> None:  # type: ignore[no-untyped-def]
    (spark.range(0, 2000)
     .selectExpr("id", "cast(id % 4 as int) as part", "concat('CITY', cast(id % 50 as string)) as city",
                 "cast(id % 100 as int) as qty", "date_add(date'1995-01-01', cast(id % 300 as int)) as day",
                 "cast(id as decimal(18,2)) / 100 as revenue",
                 "timestamp'2026-01-01 00:00:00' + make_interval(0, 0, 0, 0, 0, 0, id) as ts",
                 "cast(id as double) / 7 - 1 as ratio")
     .repartitionByRange(4, "qty").write.format("delta").partitionBy("part").save(table))  # fmt: skip
    frame = spark.read.format("delta").load(table)
    for where in QUERIES:
        frame.where(where).collect()
    spark.sql(f"SELECT a.city, count(*) FROM delta.`{table}` a JOIN delta.`{table}` b ON a.id = b.id "
              "WHERE a.qty BETWEEN 5 AND 9 AND b.part = 2 GROUP BY a.city").collect()  # fmt: skip
    spark.range(10).write.parquet(table + "-parquet")
    spark.read.parquet(table + "-parquet").where("id = 3").collect()  # not a Delta table: not recorded
    try:
        frame.where("raise_error(city) IS NULL").collect()  # fails: not recorded
    except Exception:
        pass
    spark.range(0, 10).selectExpr("id", "1 as part", "'CITY7' as city", "7 as qty", "date'1995-01-01' as day",
                                  "cast(1 as decimal(22,6)) as revenue", "timestamp'2026-01-01 00:00:00' as ts",
                                  "0.0d as ratio").write.format("delta").mode("append").save(table)  # fmt: skip
    spark.read.format("delta").load(table).where(LAST).collect()
    spark._jvm.lakecluster.workload.WorkloadListener.flushAll()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
