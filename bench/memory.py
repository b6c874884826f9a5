"""Memory under a backlog: millions of records ingested and compacted with the default settings.

    python bench/memory.py --records 20000000

Starts Apache Kafka (the tests' launcher) and fills a topic with ``--records`` SSB-like JSON
records, written by a separate Spark job through Spark's Kafka sink (kafka-python would spend
most of the run producing). Then ``lakecluster run`` starts with the default settings, only the
broker, the topic and the table named, against the whole backlog at once, and runs until every
record is in the table and the compactor has had nothing to commit for ``--idle-s`` seconds.

Every half second the memory of every process of the run is read from /proc (PSS, which splits
shared pages among the processes sharing them, and RSS): the Python driver, its JVM, Spark's
Python workers. The table printed (and written to the "Memory"
section of docs/benchmarks.md) has the peak of their sum, the peak per kind of process, the
broker's own peak beside it, and what the defaults bounded: records per micro-batch and bytes per
compaction group, read back from the Delta log.
"""

from __future__ import annotations

import argparse
import json
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from bench.ingest import write_section  # noqa: E402
from bench.process_tree import tree_stats  # noqa: E402
from tests.services.kafka import KafkaBroker  # noqa: E402 - the launcher the tests use

GIB = 1024**3


def produce(bootstrap: str, topic: str, records: int) -> None:
    """Write ``records`` generator rows as JSON values to ``topic`` (a Spark job, run in its own process)."""
    import pyarrow as pa
    from pyspark.sql import functions as F

    from lakecluster.config import SparkConfig
    from lakecluster.schema import spark_ddl
    from lakecluster.spark import get_session
    from lakecluster.stream.generator import GeneratorSettings, generate
    from lakecluster.stream.ssb import SSB_COLUMNS

    chunk = 100_000
    settings = GeneratorSettings()

    def rows(batches):  # type: ignore[no-untyped-def]
        for batch in batches:
            for start in pa.array(batch.column(0)).to_numpy():  # one generator call per 100k rows
                yield generate(int(start), min(int(start) + chunk, records), settings, SSB_COLUMNS)

    spark = get_session(SparkConfig(), app_name="bench-produce")
    starts = spark.range(0, records, chunk, numPartitions=max(1, records // (20 * chunk)))
    frame = starts.mapInArrow(rows, spark_ddl(SSB_COLUMNS))
    values = frame.select(
        F.to_json(F.struct(*frame.columns), {"timestampFormat": "yyyy-MM-dd'T'HH:mm:ss.SSSSSSXXX"}).alias("value")
    )
    (values.write.format("kafka").option("kafka.bootstrap.servers", bootstrap).option("topic", topic)
     .option("kafka.linger.ms", "50").option("kafka.batch.size", str(1 << 20))
     .option("kafka.compression.type", "lz4").save())  # fmt: skip


def _memory(pid: int) -> tuple[int, int]:
    """(RSS, PSS) in bytes. PSS divides pages shared between processes (Spark's forked Python
    workers share most of theirs) among them, so PSS adds up to what the processes use together."""
    try:
        fields = dict(line.split(":", 1) for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines()[1:])
        return int(fields["Rss"].split()[0]) * 1024, int(fields["Pss"].split()[0]) * 1024
    except (OSError, KeyError, ValueError):
        return 0, 0


def _kind(pid: int) -> str:
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return "gone"
    if "java" in cmdline.split(" ", 1)[0]:
        return "jvm"
    if "pyspark.daemon" in cmdline or "pyspark.worker" in cmdline or "pyspark/daemon" in cmdline:
        return "python workers"
    return "python driver" if "lakecluster" in cmdline else "other"


@dataclass
class Sampler:
    """Peak memory of a process tree: of the sum of PSS (and of RSS), and PSS per kind of process."""

    root: int
    peak_total: int = 0  # PSS
    peak_rss_total: int = 0
    peak_by_kind: dict[str, int] = field(default_factory=dict)
    samples: list[tuple[float, int]] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)

    def run(self) -> None:
        start = time.monotonic()
        while not self._stop.is_set():
            pids = list(tree_stats(self.root))
            by_kind: dict[str, int] = {}
            rss_total = 0
            for pid in pids:
                kind = _kind(pid)
                rss, pss = _memory(pid)
                by_kind[kind] = by_kind.get(kind, 0) + pss
                rss_total += rss
            total = sum(by_kind.values())
            self.peak_total = max(self.peak_total, total)
            self.peak_rss_total = max(self.peak_rss_total, rss_total)
            for kind, value in by_kind.items():
                self.peak_by_kind[kind] = max(self.peak_by_kind.get(kind, 0), value)
            self.samples.append((time.monotonic() - start, total))
            self._stop.wait(0.5)

    def stop(self) -> None:
        self._stop.set()


def table_state(table: Path) -> tuple[int, int]:
    """(rows in the table, its version), from the Delta log's stats."""
    from deltalake import DeltaTable

    dt = DeltaTable(str(table))
    actions = dt.get_add_actions(flatten=True)
    rows = sum(v for v in actions.column("num_records").to_pylist() if v) if actions.num_rows else 0
    return rows, dt.version()


def log_summary(table: Path) -> dict[str, int]:
    """What the defaults bounded: the largest micro-batch and compaction group, from the log."""
    from deltalake import DeltaTable

    history = DeltaTable(str(table)).history()
    batches = [int(h.get("operationMetrics", {}).get("numOutputRows", 0)) for h in history
               if h.get("operation") == "WRITE"]  # fmt: skip
    groups = [int(h.get("operationMetrics", {}).get("numRemovedBytes", 0)) for h in history
              if h.get("operation") == "OPTIMIZE"]  # fmt: skip
    return {"micro_batches": len(batches), "max_batch_rows": max(batches, default=0),
            "compactions": len(groups), "max_group_bytes": max(groups, default=0)}  # fmt: skip


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--records", type=int, default=20_000_000)
    p.add_argument("--partitions", type=int, default=4)
    p.add_argument("--idle-s", type=float, default=150.0,
                   help="the run is done when every record is in and no commit came for this long")  # fmt: skip
    p.add_argument("--timeout-s", type=float, default=4 * 3600)
    p.add_argument("--no-write", action="store_true", help="do not update docs/benchmarks.md")
    p.add_argument("--produce-only", nargs=2, metavar=("BOOTSTRAP", "TOPIC"), help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.produce_only:
        produce(*args.produce_only, args.records)
        return

    work = Path(tempfile.mkdtemp(prefix="bench-memory-"))
    broker = KafkaBroker(work / "kafka").start()
    broker_sampler = Sampler(broker.pid or 0)
    threading.Thread(target=broker_sampler.run, daemon=True).start()
    try:
        broker.create_topic("lineorder", args.partitions)
        t0 = time.monotonic()
        subprocess.run([sys.executable, __file__, "--records", str(args.records), "--produce-only",
                        broker.bootstrap, "lineorder"], check=True, cwd=work)  # fmt: skip
        produced = sum(broker.end_offsets("lineorder").values())
        assert produced == args.records, (produced, args.records)
        print(f"produced {produced:,} records in {time.monotonic() - t0:.0f} s", flush=True)

        table = work / "lineorder"
        command = [sys.executable, "-m", "lakecluster", "--set=source.kind=kafka",
                   f"--set=source.kafka.bootstrap_servers={broker.bootstrap}",
                   '--set=source.kafka.topics=["lineorder"]', f"--set=table.path={table}",
                   "--set=metrics.port=0", "run"]  # fmt: skip
        start = time.monotonic()
        run = subprocess.Popen(command, cwd=work, stdout=open(work / "run.log", "w"), stderr=subprocess.STDOUT)
        sampler = Sampler(run.pid)
        threading.Thread(target=sampler.run, daemon=True).start()
        rows, version, last_change, ingested_at = 0, -1, time.monotonic(), None
        while time.monotonic() - start < args.timeout_s:
            time.sleep(10)
            if run.poll() is not None:
                raise SystemExit(f"lakecluster run exited {run.returncode}; see {work / 'run.log'}")
            if not (table / "_delta_log").exists():
                continue
            rows, now_version = table_state(table)
            if now_version != version:
                version, last_change = now_version, time.monotonic()
            if rows >= args.records and ingested_at is None:
                ingested_at = time.monotonic() - start
            print(f"{time.monotonic() - start:7.0f} s  rows {rows:,}  version {version}  "
                  f"pss {sampler.peak_total / GIB:.2f} GiB peak", flush=True)  # fmt: skip
            if rows >= args.records and time.monotonic() - last_change >= args.idle_s:
                break
        else:
            raise SystemExit(f"not done after {args.timeout_s} s; see {work / 'run.log'}")
        run.send_signal(signal.SIGTERM)
        exit_code = run.wait(timeout=300)
        sampler.stop()
        elapsed = time.monotonic() - start - args.idle_s
        rows, version = table_state(table)
    finally:
        broker_sampler.stop()
        broker.stop()
    summary = log_summary(table)
    print(json.dumps({"peak_total": sampler.peak_total, "peak_rss_total": sampler.peak_rss_total,
                      "by_kind": sampler.peak_by_kind,
                      "broker": broker_sampler.peak_total, **summary}))  # fmt: skip
    report(args, sampler, broker_sampler, summary, rows, ingested_at or 0.0, elapsed, exit_code)


def report(args, sampler: Sampler, broker: Sampler, summary: dict[str, int], rows: int,  # type: ignore[no-untyped-def]
           ingested_s: float, elapsed_s: float, exit_code: int) -> None:
    kinds = ("python driver", "jvm", "python workers")
    lines = [f"| {kind} | {sampler.peak_by_kind.get(kind, 0) / GIB:.2f} |" for kind in kinds]
    command = f"python bench/memory.py --records {args.records} --partitions {args.partitions}"
    section = (
        "## Memory: a backlog of records ingested and compacted with the default settings\n\n"
        f"`{command}` — {args.records:,} SSB-like JSON records waiting in {args.partitions} partitions of a local "
        "Apache Kafka topic; `lakecluster run` (stream and compactor in one process, Spark local[2], every "
        "setting at its default) reads the whole backlog, 2 cores. Memory sampled every 0.5 s from /proc for every "
        "process of the run.\n\n"
        "| processes of `lakecluster run` | peak PSS (GiB) |\n|---|---:|\n"
        + "\n".join(lines)
        + f"\n| **all together (peak of the sum)** | **{sampler.peak_total / GIB:.2f}** |\n"
        f"| all together, RSS (counts pages the Python workers share once per worker) | "
        f"{sampler.peak_rss_total / GIB:.2f} |\n"
        f"| the Kafka broker (not part of the run) | {broker.peak_total / GIB:.2f} |\n\n"
        f"Goal: under 4 GiB for the run. Rows in the table at the end: {rows:,}; all in after "
        f"{ingested_s:.0f} s, compaction done after {elapsed_s:.0f} s; `run` exited {exit_code} on SIGTERM. "
        f"What bounded memory: {summary['micro_batches']} micro-batches of at most "
        f"{summary['max_batch_rows']:,} rows (`source.kafka.max_offsets_per_trigger`), {summary['compactions']} "
        f"compaction groups of at most {summary['max_group_bytes'] / 2**20:.0f} MiB "
        "(`compaction.max_group_bytes`).\n"
    )
    print(section)
    if not args.no_write:
        write_section(REPO / "docs" / "benchmarks.md", "## Memory", section)


if __name__ == "__main__":
    main()
