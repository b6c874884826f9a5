"""The query listener (``workload/jvm/WorkloadListener.java``) on real Spark queries of a real
Delta table: what it records, read back by ``workload.capture``; files read against Spark's own
``numFiles``; many threads and a second application capturing at once; a table it cannot write to.

The listener is registered on the suite's session for each test and unregistered after it, so
no other test captures anything."""

from __future__ import annotations

import datetime as dt
import json
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from lakecluster.config import WorkloadConfig
from lakecluster.table import LakeTable
from lakecluster.workload.capture import CapturedScan, read_capture
from lakecluster.workload.listener import JAVA_SOURCES, LISTENER_CLASS, listener_conf, listener_jar
from lakecluster.workload.queries import Predicate
from tests.conftest import subprocess_env
from tests.spark_scans import files_scanned

ROWS = 4000


@pytest.fixture(scope="module")
def flat_table(spark, tmp_path_factory: pytest.TempPathFactory) -> Path:  # type: ignore[no-untyped-def]
    """A flattened, lineorder-like Delta table partitioned by ``part``, each partition's files cut
    by ``qty`` ranges (so range filters skip files): 4 partitions x 4 files."""
    path = tmp_path_factory.mktemp("workload") / "flat"
    (spark.range(0, ROWS)
     .selectExpr("id", "cast(id % 4 as int) as part", "concat('CITY', cast(id % 50 as string)) as city",
                 "cast(id % 100 as int) as qty", "date_add(date'1995-01-01', cast(id % 300 as int)) as day",
                 "cast(id as decimal(18,2)) / 100 as revenue")
     .repartitionByRange(4, "qty").write.format("delta").partitionBy("part").save(str(path)))  # fmt: skip
    return path


class Listener:
    """The listener registered on the session; ``scans()`` flushes it and reads the capture back."""

    def __init__(self, spark: Any) -> None:  # type: ignore[no-untyped-def]
        self.spark = spark
        self.java = spark._jvm.lakecluster.workload.WorkloadListener()
        spark._jsparkSession.listenerManager().register(self.java)

    def flush(self) -> None:
        # Spark calls listeners on its listener bus thread, after the query returned.
        self.spark.sparkContext._jsc.sc().listenerBus().waitUntilEmpty()
        self.java.flush()

    def scans(self, table: Path, **settings: Any) -> list[CapturedScan]:
        self.flush()
        capture = read_capture(LakeTable.at(str(table)), WorkloadConfig(**settings))
        assert capture.skipped == []
        return capture.scans


@pytest.fixture
def listener(spark) -> Iterator[Listener]:  # type: ignore[no-untyped-def]
    made = Listener(spark)
    try:
        yield made
    finally:
        spark._jsparkSession.listenerManager().unregister(made.java)
        made.java.flush()


def _run(spark: Any, table: Path, where: str, select: str = "*") -> tuple[int, Any]:  # type: ignore[no-untyped-def]
    frame = spark.read.format("delta").load(str(table)).where(where).selectExpr(select)
    frame.collect()
    return files_scanned(frame), frame


def _new(before: list[CapturedScan], after: list[CapturedScan]) -> list[CapturedScan]:
    seen = {(s.app_id, s.execution_id, s.scan) for s in before}
    return [s for s in after if (s.app_id, s.execution_id, s.scan) not in seen]


def test_filters_and_files_read_of_real_queries(spark, flat_table: Path, listener: Listener) -> None:  # type: ignore[no-untyped-def]
    queries: list[tuple[str, tuple[Predicate, ...], Callable[[list[dict]], bool]]] = [
        ("city = 'CITY7'", (Predicate("city", "eq", ("CITY7",)),), lambda f: f[0]["op"] == "="),
        ("qty >= 10 AND qty < 20 AND part = 1",
         (Predicate("qty", "range", low=Decimal(10), high=Decimal(20)), Predicate("part", "eq", (Decimal(1),))),
         lambda f: {x["op"] for x in f} == {">=", "<", "="}),
        ("city IN ('CITY3', 'CITY1', 'CITY2')", (Predicate("city", "eq", ("CITY1", "CITY2", "CITY3")),),
         lambda f: f[0]["op"] == "in" and len(f[0]["values"]) == 3),
        # 12 values: Spark makes it an InSet (over spark.sql.optimizer.inSetConversionThreshold), kept whole.
        ("qty IN (" + ", ".join(str(v) for v in range(71, 59, -1)) + ")",
         (Predicate("qty", "eq", tuple(Decimal(v) for v in range(60, 72))),), lambda f: len(f[0]["values"]) == 12),
        # 40 values, over the default 32: kept as their count, smallest and largest.
        ("qty IN (" + ", ".join(str(v) for v in range(50, 90)) + ")",
         (Predicate("qty", "range", low=Decimal(50), high=Decimal(89)),),
         lambda f: f[0] == {"column": "qty", "type": "int", "op": "in", "count": 40, "min": 50, "max": 89}),
        ("day > DATE'1995-06-01' AND revenue <= 12.5 AND part IN (0, 3)",
         (Predicate("day", "range", low=dt.date(1995, 6, 1)), Predicate("revenue", "range", high=Decimal("12.5")),
          Predicate("part", "eq", (Decimal(0), Decimal(3)))), lambda f: True),
        ("city LIKE 'CITY1%' AND NOT (qty = 3)", (Predicate("city", "range", low="CITY1", high="CITY1\U0010ffff"),),
         lambda f: {x["op"] for x in f} == {"starts_with", "!="}),
    ]  # fmt: skip
    before = listener.scans(flat_table)
    expected_files = []
    for where, _, _ in queries:
        files, _ = _run(spark, flat_table, where)
        expected_files.append(files)
    got = _new(before, listener.scans(flat_table))
    assert len(got) == len(queries)
    for scan, (where, predicates, shape_ok), files in zip(got, queries, expected_files, strict=True):
        assert sorted(scan.predicates, key=repr) == sorted(predicates, key=repr), where
        assert shape_ok(list(scan.filters)), (where, scan.filters)
        assert scan.files_read == files, where  # Spark's own numFiles of the scan
        assert scan.files_total == 16 and scan.table_version == 0
        assert scan.app_id == spark.sparkContext.applicationId and scan.query == "collectToPython"
    # Partition filters are recorded apart from data filters, and they prune: part = 1 reads one partition.
    assert got[1].files_read is not None and got[1].files_read <= 4 < got[0].files_read  # type: ignore[operator]
    assert {"column": "part", "type": "int", "op": "=", "value": 1} in got[1].filters
    assert got[4].shape == "qty IN" and got[5].shape == "day > AND part IN AND revenue <"


def test_a_join_and_aggregate_records_each_scan_of_the_flattened_table(spark, flat_table: Path,  # type: ignore[no-untyped-def]
                                                                      listener: Listener) -> None:  # fmt: skip
    spark.read.format("delta").load(str(flat_table)).createOrReplaceTempView("flat")
    frame = spark.sql("SELECT a.city, count(*), sum(b.revenue) FROM flat a JOIN flat b ON a.id = b.id "
                      "WHERE a.qty BETWEEN 5 AND 9 AND b.part = 2 GROUP BY a.city")  # fmt: skip
    before = listener.scans(flat_table)
    frame.collect()
    got = _new(before, listener.scans(flat_table))
    assert len(got) == 2
    assert len({s.query_key for s in got}) == 1  # one query, two scans
    by_column = {p.column: p for s in got for p in s.predicates}
    assert by_column["qty"] == Predicate("qty", "range", low=Decimal(5), high=Decimal(9))
    assert by_column["part"] == Predicate("part", "eq", (Decimal(2),))
    assert sum(s.files_read or 0 for s in got) == files_scanned(frame)


def test_threads_querying_at_once_capture_every_scan_whole(spark, flat_table: Path, listener: Listener) -> None:  # type: ignore[no-untyped-def]
    before = listener.scans(flat_table)
    errors: list[BaseException] = []

    def reader(n: int) -> None:
        try:
            for i in range(3):
                spark.read.format("delta").load(str(flat_table)).where(f"qty = {n * 10 + i}").count()
        except BaseException as e:
            errors.append(e)

    threads = [threading.Thread(target=reader, args=(n,)) for n in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    got = _new(before, listener.scans(flat_table))
    values = sorted(p.values[0] for s in got for p in s.predicates)
    assert values == sorted(Decimal(n * 10 + i) for n in range(6) for i in range(3))


def test_a_table_the_listener_cannot_write_to_fails_no_query(spark, tmp_path: Path, flat_table: Path,  # type: ignore[no-untyped-def]
                                                             listener: Listener) -> None:  # fmt: skip
    table = tmp_path / "readonly"
    spark.range(0, 100).selectExpr("id", "id % 7 as k").write.format("delta").save(str(table))
    (table / "_lakecluster").write_text("a file where the side folder should be")
    failed = listener.java.failedWrites()
    assert spark.read.format("delta").load(str(table)).where("k = 3").count() == 14
    listener.flush()  # the write fails inside the listener: logged once, nothing raised
    assert listener.java.failedWrites() == failed + 1
    assert (table / "_lakecluster").is_file()
    # The listener goes on capturing other tables.
    before = listener.scans(flat_table)
    _run(spark, flat_table, "city = 'CITY9'")
    assert [s.predicates for s in _new(before, listener.scans(flat_table))] == [(Predicate("city", "eq", ("CITY9",)),)]


APPLICATION = """
import sys
from pyspark.sql import SparkSession
conf_lines, delta_jars, table = sys.argv[1], sys.argv[2], sys.argv[3]
builder = (SparkSession.builder.master("local[1]").appName("other-team")
           .config("spark.sql.extensions", "io.delta.sql.DeltaSparkSessionExtension")
           .config("spark.sql.catalog.spark_catalog", "org.apache.spark.sql.delta.catalog.DeltaCatalog")
           # A small local application's own settings (Delta's 50 state partitions: 50 tasks a query).
           .config("spark.databricks.delta.snapshotPartitions", "1").config("spark.sql.shuffle.partitions", "1")
           .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false"))
conf = dict(line.split("=", 1) for line in conf_lines.splitlines())
conf["spark.jars"] = delta_jars + "," + conf["spark.jars"]  # the application's own jars, and lakecluster's
for key, value in conf.items():
    builder = builder.config(key, value)
spark = builder.getOrCreate()
print("READY", flush=True)
sys.stdin.readline()  # the test's own queries run meanwhile
frame = spark.read.format("delta").load(table)
for i in range(3):
    frame.where(f"city = 'CITY{i}' AND part = 1").count()
spark.stop()
"""


def test_an_application_started_with_the_two_documented_settings_captures_beside_another(  # type: ignore[no-untyped-def]
        spark, flat_table: Path, listener: Listener, tmp_path: Path) -> None:  # fmt: skip
    """A fresh pyspark application of another team, with only the printed settings added, and
    this process's application capture into one table at once; every record is whole."""
    from lakecluster import jars
    from lakecluster.cli.workload import format_listener_conf
    from lakecluster.config import SparkConfig

    assert list(listener_conf(WorkloadConfig(), Path("l.jar"))) == ["spark.jars", "spark.sql.queryExecutionListeners"]
    # With workload.flush_records = 1 in lakecluster's configuration, a third line: a file per record.
    conf = listener_conf(WorkloadConfig(flush_records=1), listener_jar(SparkConfig()))
    assert conf["spark.sql.queryExecutionListeners"] == LISTENER_CLASS
    assert conf["spark.lakecluster.workload.flushRecords"] == "1"
    delta = ",".join(str(j) for j in jars.spark_jars(s3=False)[:-1])  # the application's own Delta
    other = subprocess.Popen([sys.executable, "-c", APPLICATION, format_listener_conf(conf), delta, str(flat_table)],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                             env=subprocess_env())  # fmt: skip
    try:
        assert other.stdout is not None and other.stdin is not None
        assert other.stdout.readline().strip() == "READY", other.stderr.read() if other.stderr else ""
        before = listener.scans(flat_table)
        other.stdin.write("go\n")
        other.stdin.flush()
        for i in range(3):  # this application's queries, while the other runs its own
            spark.read.format("delta").load(str(flat_table)).where(f"qty = {i}").count()
        _, err = other.communicate(timeout=300)
        assert other.returncode == 0, err[-3000:]
    finally:
        if other.poll() is None:
            other.kill()
    got = _new(before, listener.scans(flat_table))
    theirs = [s for s in got if s.app_id != spark.sparkContext.applicationId]
    ours = [s for s in got if s.app_id == spark.sparkContext.applicationId]
    assert sorted(p.values[0] for s in theirs for p in s.predicates if p.column == "city") == [
        f"CITY{i}" for i in range(3)]  # fmt: skip
    assert all(s.files_read is not None and s.files_read <= 4 for s in theirs)  # part = 1: one partition's files
    assert sorted(p.values[0] for s in ours for p in s.predicates) == [Decimal(i) for i in range(3)]
    # Each application wrote files of its own, whole JSON lines.
    files = sorted((flat_table / "_lakecluster" / "workload").rglob("*.jsonl"))
    writers = {f.name.split("-", 1)[1].rsplit("-", 2)[0] for f in files}  # <ms>-<app id>-<seq>-<token>.jsonl
    assert writers >= {theirs[0].app_id, ours[0].app_id}
    assert len([f for f in files if f"-{theirs[0].app_id}-" in f.name]) == 3  # flushRecords = 1: a file per record
    for f in files:
        for line in f.read_text().splitlines():
            assert json.loads(line)["v"] == 1


def test_the_listeners_defaults_are_the_configurations() -> None:
    """The listener runs without lakecluster's configuration: its own defaults must be the
    ``[workload]`` defaults that docs/configuration.md states."""
    import re

    from lakecluster.workload.listener import LISTENER_KEYS

    source = (JAVA_SOURCES / "WorkloadWriter.java").read_text()
    java = {name: float(int(number) << int(shift or 0))  # "1000", "16L << 20"
            for name, number, shift in re.findall(r"static final (?:long|double) ([A-Z_]+) = (\d+)L?(?: << (\d+))?;",
                                                  source)}  # fmt: skip
    defaults = WorkloadConfig()
    constants = {"flush_records": "FLUSH_RECORDS", "flush_interval_s": "FLUSH_SECONDS",
                 "max_in_values": "MAX_IN_VALUES", "max_file_bytes": "MAX_FILE_BYTES",
                 "max_bytes_per_app_day": "MAX_BYTES_PER_APP_DAY"}  # fmt: skip
    assert set(constants) == set(LISTENER_KEYS)
    assert {key: java[name] for key, name in constants.items()} == {k: float(getattr(defaults, k)) for k in constants}
    for name in LISTENER_KEYS.values():
        assert f'PREFIX + "{name}"' in source


# The constants of every type the capture format records: the column's Spark type, a where-clause
# in Spark's SQL, and the same clause in lakecluster's where-clause language.
LITERALS = [
    ("t8", "tinyint", "t8 = -7", "t8 = -7"),
    ("t16", "smallint", "t16 <= 300", "t16 <= 300"),
    ("t32", "int", "t32 > 2147483000", "t32 > 2147483000"),
    ("t64", "bigint", "t64 = 9007199254740993", "t64 = 9007199254740993"),  # above 2^53: exact, not a double
    ("f32", "float", "f32 = float(1.1)", "f32 = 1.1"),
    ("f64", "double", "f64 >= 0.30000000000000004", "f64 >= 0.30000000000000004"),
    ("f64", "double", "f64 = double('NaN')", "f64 = NaN"),
    ("f64", "double", "f64 > double('-Infinity')", "f64 > -Infinity"),
    ("dec", "decimal(18,2)", "dec = 12.50", "dec = 12.50"),
    ("day", "date", "day < DATE'1995-06-01'", "day < DATE '1995-06-01'"),
    ("ts", "timestamp", "ts = TIMESTAMP'2024-03-10 12:34:56.789+00:00'",
     "ts = TIMESTAMP '2024-03-10 12:34:56.789+00:00'"),
    ("ts", "timestamp", "ts > TIMESTAMP'2024-03-10 12:34:56.123456+00:00'",
     "ts > TIMESTAMP '2024-03-10 12:34:56.123456+00:00'"),
    ("ntz", "timestamp_ntz", "ntz = TIMESTAMP_NTZ'2024-03-10 12:34:00'", "ntz = TIMESTAMP '2024-03-10 12:34:00'"),
    ("s", "string", "s = 'O\\'Brien ✓ \\\\ %_'", "s = 'O''Brien ✓ \\ %_'"),  # Spark escapes with \\
    ("s", "string", "s LIKE 'Ab%'", "s LIKE 'Ab%'"),
    ("b", "boolean", "b <=> true", "b = TRUE"),  # Spark simplifies b = true to b, a filter of no constant
]  # fmt: skip


def test_the_listener_writes_every_type_s_constants_as_the_capture_format_reads_them(  # type: ignore[no-untyped-def]
    spark, tmp_path: Path, listener: Listener
) -> None:
    """One format for constants: what ``WorkloadListener.java`` records is exactly what
    ``lakecluster.literals.encode`` writes for the value it decodes to, and that value is the one
    the where-clause language gives the same constant. A change to either side fails here."""
    from lakecluster import literals
    from lakecluster import predicate as P

    table = tmp_path / "typed"
    (spark.range(0, 8).selectExpr(
        "cast(id as tinyint) as t8", "cast(id as smallint) as t16", "cast(id as int) as t32", "id as t64",
        "cast(id as float) as f32", "cast(id as double) as f64", "cast(id as decimal(18,2)) as dec",
        "date_add(date'1995-01-01', cast(id as int)) as day", "timestamp'2024-03-10 00:00:00+00:00' as ts",
        "timestamp_ntz'2024-03-10 00:00:00' as ntz", "concat('s', cast(id as string)) as s", "id % 2 = 0 as b")
     .write.format("delta").save(str(table)))  # fmt: skip
    columns = {name: literals.column_of(name, kind) for name, kind, _, _ in LITERALS}
    before = listener.scans(table)
    for _, _, spark_where, _ in LITERALS:
        _run(spark, table, spark_where)
    scans = _new(before, listener.scans(table))
    assert len(scans) == len(LITERALS)
    for scan, (name, kind, spark_where, ours) in zip(scans, LITERALS, strict=True):
        recorded = [f for f in scan.filters if f.get("column") == name and f["op"] not in ("is_not_null", "other")]
        assert len(recorded) == 1 and recorded[0]["type"] == kind, (spark_where, scan.filters)
        f = recorded[0]
        parsed = P.parse(ours, [c for c in columns.values() if c is not None])
        if f["op"] == "starts_with":
            assert isinstance(parsed, P.Like) and P.like_prefix(parsed.pattern)[0] == literals.decode(kind, f["value"])
            assert literals.encode(kind, literals.decode(kind, f["value"])) == f["value"]
            continue
        assert isinstance(parsed, P.Compare), ours
        value = literals.decode(kind, f["value"])
        assert literals.encode(kind, value) == f["value"], (spark_where, f["value"])  # Java writes the one format
        assert type(value) is type(parsed.value), (spark_where, value, parsed.value)
        same = value == parsed.value or (value != value and parsed.value != parsed.value)  # NaN
        assert same, (spark_where, value, parsed.value)
