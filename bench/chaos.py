"""Chaos: the stream, two compactors, index syncs and vacuums on one table for half an hour, with
SIGKILLs at random points and every process restarted; then every promise is checked.

    python bench/chaos.py --minutes 30
    python bench/chaos.py --minutes 30 --storage s3

``--storage`` says where the table lives. ``local`` (the default): a temporary directory. ``s3``: a
bucket on a SeaweedFS S3 server started for the run with the tests' launcher
(``tests/services/s3.py``); the table, its quarantine table and the stream's checkpoint are then
``s3://`` locations, every ``lakecluster`` process gets the server's endpoint and credentials in
its environment (the standard AWS variables), and every check reads through S3 (delta-rs with
storage options, DuckDB with an S3 secret, the disk usage by listing the prefix). Both storages run
the same code: locations are URIs and one :class:`Storage` object holds what differs.

A local Apache Kafka broker (the tests' launcher) gets SSB-like JSON records at a steady rate from
a producer thread, one record in 500 malformed. Beside it run, as real ``lakecluster`` processes:
``stream``, two ``compact`` loops (each with a scheduled vacuum), ``index sync`` every few seconds
and a ``vacuum`` every few minutes. Every 10-60 s a random one of them is killed with SIGKILL (its
whole process group: driver, JVM, Python workers); a supervisor restarts whatever died. Vacuums use
a retention of ``--retention-hours`` (default 1, forced: the shortest retention Delta honours, since
it rounds to whole hours); a run longer than the retention has files really deleted during it.

At the end the producer stops, the kills stop, the stream catches up, everything is stopped with
SIGTERM, and the table is checked:

- rows: every valid record produced is in the table exactly once (delta-rs and DuckDB), every
  malformed one is in the quarantine table exactly once;
- time travel: every version committed within the retention period before the last vacuum's
  start reads with delta-rs, without duplicates, with as many rows as its add actions say, never
  fewer than the version before;
- the column-stats index is intact and equal to the Delta log.

Prints a table and writes the "Chaos" section of docs/benchmarks.md (its "Chaos on S3" subsection
for ``--storage s3``).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from tests.services.kafka import KafkaBroker  # noqa: E402 - the launcher the tests use
from tests.services.s3 import S3Server  # noqa: E402 - the launcher the tests use

TOPIC = "lineorder"
MALFORMED_EVERY = 500
BUCKET = "chaos"
LOCAL_HEADING = "## Chaos"
S3_HEADING = "### Chaos on S3"


def json_values(start: int, n: int) -> list[bytes]:
    """Records ``start .. start+n`` of the generator as JSON; every 500th offset is malformed."""
    from lakecluster.config import load_config
    from lakecluster.stream.produce import json_values as generator_json

    return generator_json(load_config(None), start, n, MALFORMED_EVERY)


@dataclass
class Producer:
    """Produces records at ``rate`` per second until stopped; keys are the generator offsets."""

    bootstrap: str
    rate: int
    produced: int = 0
    _stop: threading.Event = field(default_factory=threading.Event)

    def run(self) -> None:
        from kafka import KafkaProducer

        producer = KafkaProducer(bootstrap_servers=self.bootstrap, linger_ms=50, acks="all",
                                 retries=2**31 - 1, max_in_flight_requests_per_connection=1)  # fmt: skip
        chunk = max(1, self.rate // 4)
        while not self._stop.is_set():
            started = time.monotonic()
            for value in json_values(self.produced, chunk):
                producer.send(TOPIC, value=value)
            producer.flush()
            self.produced += chunk
            self._stop.wait(max(0.0, 0.25 - (time.monotonic() - started)))
        producer.close()

    def stop(self) -> None:
        self._stop.set()


@dataclass
class Storage:
    """Where the run keeps its table, and how every check reads it: a local directory, or a bucket
    on an S3 server (SeaweedFS) started for the run."""

    kind: str  # "local" or "s3"
    root: str  # the folder the table and its quarantine table go in: a directory or s3://<bucket>
    env: dict[str, str] = field(default_factory=dict)  # added to every lakecluster process's environment
    settings: dict[str, str] = field(default_factory=dict)  # the same as configuration keys, for in-process checks
    options: dict[str, str] | None = None  # delta-rs storage options
    server: S3Server | None = None

    @classmethod
    def start(cls, kind: str, work: Path) -> Storage:
        if kind == "local":
            return cls("local", str(work))
        server = S3Server(work / "s3").start()
        server.create_bucket(BUCKET)
        return cls.on_s3(server, f"s3://{BUCKET}")

    @classmethod
    def on_s3(cls, server: S3Server, root: str) -> Storage:
        """Tables under ``root`` (``s3://<bucket>[/<prefix>]``, the bucket existing) on ``server``."""
        return cls("s3", root.rstrip("/"), server.aws_environment(), server.lakecluster_settings(),
                   server.storage_options(), server)  # fmt: skip

    def stop(self) -> None:
        if self.server is not None:
            self.server.stop()

    def location(self, name: str) -> str:
        return f"{self.root}/{name}"

    def delta(self, uri: str, version: int | None = None) -> Any:
        """A delta-rs ``DeltaTable`` of ``uri`` (at ``version``)."""
        from deltalake import DeltaTable

        return DeltaTable(uri, version=version, storage_options=self.options)

    def duckdb(self) -> Any:
        """A DuckDB connection whose ``delta_scan`` reads this storage."""
        from tests.conftest import duckdb_connection  # DuckDB with its extensions loaded from their wheels

        if self.server is None:
            return duckdb_connection()
        con = duckdb_connection("httpfs")  # DuckDB's S3 client
        s = self.server
        host = s.endpoint.removeprefix("http://")  # plain HTTP on loopback: USE_SSL false
        con.execute(f"CREATE SECRET chaos (TYPE s3, KEY_ID '{s.access_key}', SECRET '{s.secret_key}', "
                    f"REGION '{s.region}', ENDPOINT '{host}', URL_STYLE 'path', USE_SSL false)")  # fmt: skip
        return con

    def bytes_under(self, uri: str) -> int:
        """Bytes of every file under ``uri`` (on S3: every object under the prefix)."""
        from pyarrow import fs as pafs

        if self.server is None:
            filesystem, path = pafs.LocalFileSystem(), uri
        else:
            filesystem, path = self.server.filesystem(), uri.removeprefix("s3://")
        infos = filesystem.get_file_info(pafs.FileSelector(path, recursive=True, allow_not_found=True))
        return sum(i.size or 0 for i in infos if i.type == pafs.FileType.File)


@dataclass
class Service:
    """One lakecluster command, restarted whenever it dies (unless ``once``: then re-run after ``every_s``)."""

    name: str
    args: list[str]
    workdir: Path
    every_s: float = 0.0  # > 0: a command that ends by itself, started again this often
    proc: subprocess.Popen[bytes] | None = None
    starts: int = 0
    kills: int = 0
    exits: Counter = field(default_factory=Counter)
    next_start: float = 0.0

    def tick(self, now: float, base: list[str], env: dict[str, str]) -> None:
        if self.proc is not None and self.proc.poll() is not None:
            self.exits[self.proc.returncode] += 1
            self.proc = None
            self.next_start = now + (self.every_s or random.uniform(1, 4))
        if self.proc is None and now >= self.next_start:
            log = (self.workdir / f"{self.name}.log").open("ab")
            self.proc = subprocess.Popen([sys.executable, "-m", "lakecluster", *base, *self.args],
                                         cwd=self.workdir, stdout=log, stderr=subprocess.STDOUT,
                                         env={**os.environ, **env}, start_new_session=True)  # fmt: skip
            self.starts += 1

    def kill(self) -> bool:
        if self.proc is None or self.proc.poll() is not None:
            return False
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.kills += 1
        return True

    def terminate(self, timeout_s: float = 180) -> None:
        if self.proc is None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGTERM)
        try:
            self.exits[self.proc.wait(timeout=timeout_s)] += 1
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)
            self.exits["killed at stop"] += 1
        self.proc = None


def disk_factor(storage: Storage, table: str) -> tuple[int, int]:
    """(bytes of every file under the table's location, bytes of the live data files)."""
    on_disk = storage.bytes_under(table)
    actions = storage.delta(table).get_add_actions(flatten=True)
    live = sum(actions.column("size_bytes").to_pylist()) if actions.num_rows else 0
    return on_disk, live


def _count(value: object) -> str:
    return f"{value:,}" if isinstance(value, int) else str(value)


def check(storage: Storage, table: str, quarantine: str, produced: int, retention_s: float,
          index_base: list[str]) -> dict:  # fmt: skip
    import pyarrow as pa

    from lakecluster.config import load_config
    from lakecluster.index.spec import IndexSpec
    from lakecluster.index.sync import sync
    from lakecluster.table import LakeTable
    from tests.index.test_concurrency import problems

    valid = produced - len(range(0, produced, MALFORMED_EVERY))
    keys = storage.delta(table).to_pyarrow_table(columns=["lo_orderkey"])["lo_orderkey"]
    expected_keys = set(range(produced)) - set(range(0, produced, MALFORMED_EVERY))
    key_list = keys.to_pylist()
    duck = storage.duckdb()
    duck_count, duck_distinct = duck.execute(
        f"SELECT count(*), count(DISTINCT lo_orderkey) FROM delta_scan('{table}')"
    ).fetchone()  # fmt: skip
    result = {
        "rows": len(key_list), "expected_rows": valid,
        "rows_exact": len(key_list) == len(set(key_list)) and set(key_list) == expected_keys,
        "duckdb_exact": duck_count == duck_distinct == valid, "expected_quarantined": produced - valid,
    }  # fmt: skip
    try:
        quarantined = storage.delta(quarantine).to_pyarrow_table(columns=["partition", "offset"])
    except Exception as e:  # an unreadable quarantine table is a failed check, reported with the rest
        result.update(quarantined=f"unreadable: {str(e).splitlines()[0]}", quarantine_exact=False)
    else:
        positions = list(zip(quarantined["partition"].to_pylist(), quarantined["offset"].to_pylist(), strict=True))
        result["quarantined"] = quarantined.num_rows
        result["quarantine_exact"] = len(set(positions)) == len(positions) == result["expected_quarantined"]

    history = storage.delta(table).history()
    # Every vacuum logs VACUUM START before it deletes anything, so no file removed after the last
    # start minus the retention is gone: every version committed since then must read.
    starts = [h["timestamp"] for h in history if h["operation"] == "VACUUM START"]
    cutoff_ms = max(starts, default=0) - retention_s * 1000
    recent = sorted(int(h["version"]) for h in history if h["timestamp"] >= cutoff_ms)
    travel_ok, previous = 0, -1
    failures: list[str] = []
    for version in recent:
        try:
            snapshot = storage.delta(table, version)
            rows = snapshot.to_pyarrow_table(columns=["lo_orderkey"])["lo_orderkey"].to_pylist()
            actions = pa.table(snapshot.get_add_actions(flatten=True))
            stated = sum(v or 0 for v in actions["num_records"].to_pylist())
            if len(rows) != len(set(rows)) or len(rows) != stated or len(rows) < previous:
                failures.append(f"version {version}: {len(rows)} rows, {len(set(rows))} keys, log says {stated}")
            previous = len(rows)
            travel_ok += 1
        except Exception as e:  # a version within retention that cannot be read is a failure
            failures.append(f"version {version}: {type(e).__name__}: {e}")
    result.update(travel_versions=len(recent), travel_ok=travel_ok - len(failures), travel_failures=failures[:5])

    overrides = {**dict(a.removeprefix("--set=").split("=", 1) for a in index_base), **storage.settings}
    config = load_config(overrides=overrides, environ={})
    spec = IndexSpec.of(LakeTable(config))
    sync(spec)
    result["index_problems"] = problems(spec, table)
    ops = Counter(h["operation"] for h in history)
    result["commits"] = dict(ops)
    return result


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--minutes", type=float, default=30)
    p.add_argument("--rate", type=int, default=1000, help="records produced per second")
    p.add_argument("--retention-hours", type=int, default=1, help="vacuum retention (whole hours, forced)")
    p.add_argument("--seed", type=int, default=7)
    p.add_argument("--storage", choices=("local", "s3"), default="local",
                   help="where the table, its quarantine and the stream's checkpoint live (s3: SeaweedFS)")  # fmt: skip
    p.add_argument("--no-write", action="store_true", help="do not update docs/benchmarks.md")
    args = p.parse_args()
    random.seed(args.seed)
    work = Path(tempfile.mkdtemp(prefix="bench-chaos-"))
    print(f"work directory {work} (each process's log: <name>.log)", flush=True)
    storage = Storage.start(args.storage, work)
    try:
        result = run(args, storage, work)
    finally:
        storage.stop()
    print(json.dumps(result, indent=1, default=str))
    report(args, result)


def run(args: argparse.Namespace, storage: Storage, work: Path) -> dict:
    """The chaos on ``storage``, then the checks; the result of both."""
    broker = KafkaBroker(work / "kafka").start()
    broker.create_topic(TOPIC, 4)
    table, retention_h = storage.location("lineorder"), args.retention_hours
    base = [
        "--set=source.kind=kafka", f"--set=source.kafka.bootstrap_servers={broker.bootstrap}",
        f'--set=source.kafka.topics=["{TOPIC}"]', f"--set=table.path={table}", "--set=metrics.port=0",
        "--set=compaction.interval_s=5", "--set=compaction.target_file_bytes=4000000",
        "--set=compaction.min_file_bytes=2000000", "--set=vacuum.interval_s=120",
        f"--set=vacuum.retention_hours={retention_h}", "--set=vacuum.force=true",
    ]  # fmt: skip
    services = [
        Service("stream", ["stream"], work),
        Service("compactor-a", ["compact"], work),
        Service("compactor-b", ["compact"], work),
        Service("index-sync", ["index", "sync"], work, every_s=5),
        Service("vacuum", ["vacuum", "--retention", str(retention_h), "--force"], work, every_s=180),
    ]
    producer = Producer(broker.bootstrap, args.rate)
    threading.Thread(target=producer.run, daemon=True).start()
    started = time.monotonic()
    end = started + args.minutes * 60
    next_kill = started + random.uniform(10, 60)
    kills: list[tuple[float, str]] = []
    factors: list[tuple[float, int, int]] = []  # (seconds, bytes on disk, live bytes), each minute
    next_sample = started + 60
    try:
        while time.monotonic() < end:
            now = time.monotonic()
            for s in services:
                s.tick(now, base, storage.env)
            if now >= next_kill:
                victim = random.choice(services)
                if victim.kill():
                    kills.append((now - started, victim.name))
                    print(f"{now - started:6.0f} s  SIGKILL {victim.name}", flush=True)
                next_kill = now + random.uniform(10, 60)
            if now >= next_sample:
                next_sample = now + 60
                with contextlib.suppress(Exception):  # the table may not exist yet
                    factors.append((now - started, *disk_factor(storage, table)))
            time.sleep(0.5)
        producer.stop()
        time.sleep(2)
        produced = producer.produced
        print(f"chaos over after {time.monotonic() - started:.0f} s; {produced:,} records produced; catching up",
              flush=True)  # fmt: skip
        # No more kills: restart whatever is down and let the stream take everything in.
        valid = produced - len(range(0, produced, MALFORMED_EVERY))
        deadline = time.monotonic() + 1800
        while time.monotonic() < deadline:
            for s in services:
                s.tick(time.monotonic(), base, storage.env)
            with contextlib.suppress(Exception):
                if storage.delta(table).to_pyarrow_table(columns=["lo_orderkey"]).num_rows >= valid:
                    break
            time.sleep(5)
        time.sleep(10)
    finally:
        producer.stop()
        for s in services:
            s.terminate()
        broker.stop()
    services_seen = {s.name: {"starts": s.starts, "kills": s.kills,
                              "exits": {str(k): v for k, v in s.exits.items()}} for s in services}  # fmt: skip
    # Printed before the checks, so a check that fails to run does not lose them.
    print(json.dumps({"produced": produced, "kills": kills, "services": services_seen}), flush=True)
    result = check(storage, table, table + "_quarantine", produced, args.retention_hours * 3600, base)
    on_disk, live = disk_factor(storage, table)
    second_half = [d / lv for t, d, lv in factors if t >= args.minutes * 30 and lv]
    result.update(disk_bytes=on_disk, live_bytes=live, disk_factor_end=on_disk / max(live, 1),
                  disk_factor_max_second_half=max(second_half, default=0.0),
                  disk_factors=[(round(t), d, lv) for t, d, lv in factors])  # fmt: skip
    result.update(storage=args.storage, minutes=args.minutes, produced=produced, kills=len(kills),
                  services=services_seen)  # fmt: skip
    return result


def report(args: argparse.Namespace, r: dict) -> None:
    rows = "\n".join(f"| {name} | {s['starts']} | {s['kills']} | "
                     f"{', '.join(f'{k}: {v}' for k, v in sorted(s['exits'].items())) or '-'} |"
                     for name, s in r["services"].items())  # fmt: skip
    ok = r["rows_exact"] and r["duckdb_exact"] and r["quarantine_exact"] and not r["travel_failures"]
    ok = ok and not r["index_problems"]
    on_s3 = args.storage == "s3"
    peak = r["disk_factor_max_second_half"]
    second_half = f"at most {peak:.2f} over the second half" if peak else "no sample in the second half"
    command = (f"python bench/chaos.py{' --storage s3' if on_s3 else ''} --minutes {args.minutes:g} "
               f"--rate {args.rate} --retention-hours {args.retention_hours} --seed {args.seed}")  # fmt: skip
    heading = (f"{S3_HEADING}: the table, its quarantine and the stream's checkpoint on SeaweedFS" if on_s3
               else f"{LOCAL_HEADING}: stream, two compactors, index syncs and vacuum, killed at random")  # fmt: skip
    where = "on a local SeaweedFS S3 server (`s3://`), " if on_s3 else ""
    section = (
        f"{heading}\n\n"
        f"`{command}` — {where}{r['produced']:,} records produced to a local Apache Kafka topic at {args.rate}/s "
        f"(one in {MALFORMED_EVERY} malformed) while {r['kills']} SIGKILLs (whole process groups) hit random "
        "processes, each restarted by a supervisor; vacuum retention "
        f"{args.retention_hours} h (forced), 2 cores.\n\n"
        "| process | starts | SIGKILLs | exits (code: count) |\n|---|---:|---:|---|\n"
        + rows
        + "\n\n| check | result |\n|---|---|\n"
        f"| rows in the table (delta-rs) | {r['rows']:,} of {r['expected_rows']:,}, "
        f"{'each exactly once' if r['rows_exact'] else '**NOT exact**'} |\n"
        f"| DuckDB | {'same rows, no duplicates' if r['duckdb_exact'] else '**differs**'} |\n"
        f"| quarantined | {_count(r['quarantined'])} of {r['expected_quarantined']:,} |\n"
        f"| time travel within retention | {r['travel_ok']} of {r['travel_versions']} versions read exactly"
        f"{'; failures: ' + '; '.join(r['travel_failures']) if r['travel_failures'] else ''} |\n"
        f"| index vs log | {'equal' if not r['index_problems'] else r['index_problems']} |\n"
        f"| bytes {'stored' if on_s3 else 'on disk'} / live bytes | {r['disk_factor_end']:.2f} at the end "
        f"({r['disk_bytes'] / 1e6:.0f} MB {'under the prefix' if on_s3 else 'on disk'}, "
        f"{r['live_bytes'] / 1e6:.0f} MB live); {second_half} (sampled each minute; "
        f"{'every object under the table prefix' if on_s3 else 'the table directory'} with its log, sketches "
        "and index, against the live data files) |\n"
        f"| commits | {', '.join(f'{k} {v}' for k, v in sorted(r['commits'].items()))} |\n\n"
        f"Verdict: **{'every check passed' if ok else 'FAILED'}**.\n"
    )
    print(section)
    if not args.no_write:
        path = REPO / "docs" / "benchmarks.md"
        path.write_text(with_section(path.read_text(), section, s3=on_s3))


def with_section(text: str, section: str, *, s3: bool) -> str:
    """``text`` (docs/benchmarks.md) with one storage's report replaced: the local run's is the
    "Chaos" section up to its S3 subsection, the S3 run's is that subsection, last in the section.
    Each run leaves the other storage's figures as they are."""
    start = text.find(LOCAL_HEADING)
    if start < 0:
        return text.rstrip() + "\n\n" + (f"{LOCAL_HEADING}\n\n" if s3 else "") + section
    end = text.find("\n## ", start + 1)
    end = len(text) if end < 0 else end + 1
    sub = text.find(S3_HEADING, start, end)
    if s3:
        begin = end if sub < 0 else sub
    else:
        begin, end = start, (end if sub < 0 else sub)
    after = text[end:]
    return text[:begin].rstrip("\n") + "\n\n" + section.rstrip("\n") + ("\n\n" + after if after else "\n")


if __name__ == "__main__":
    main()
