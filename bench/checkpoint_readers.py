"""Checkpoint readers: delta-rs, DuckDB and a raw Parquet reader poll a table's log while
`lakecluster stream` commits to it, until Delta has written ``--checkpoints`` checkpoints; every
failed read is counted.

    python bench/checkpoint_readers.py --checkpoints 20

The stream runs the built-in generator into a new local table with Delta's default checkpoint
interval (a checkpoint every 10 commits). Beside it, each on a thread of its own and as fast as it
can: delta-rs opens the table (its snapshot starts from the latest checkpoint) and counts its files;
DuckDB counts its rows with ``delta_scan``; a raw reader opens every ``*.checkpoint.parquet`` the
moment it is listed, and ``_last_checkpoint`` each time. A reader that opens a checkpoint before it
is whole fails ("Corrupt footer", a JSON error): lakecluster's LogStore writes both under a
temporary name and renames them on filesystems whose writes are not atomic.

Prints a table and writes the "Checkpoint readers" section of docs/benchmarks.md (unless --no-write).
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
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from bench.ingest import write_section  # noqa: E402
from tests.conftest import duckdb_connection  # noqa: E402 - DuckDB with the delta extension, offline

DOCS = REPO / "docs" / "benchmarks.md"


@dataclass
class Reader:
    name: str
    read: Callable[[], object]
    reads: int = 0
    failures: list[str] = field(default_factory=list)

    def poll(self, stop: threading.Event) -> None:
        while not stop.is_set():
            try:
                self.read()
                self.reads += 1
            except _NotYet:
                pass
            except Exception as e:  # any failure to read what the log lists is the finding
                self.failures.append(f"{type(e).__name__}: {str(e)[:300]}")
            time.sleep(0.01)


class _NotYet(Exception):
    """The table has no first commit yet."""


def readers(table: Path, checkpoints_seen: set[str]) -> list[Reader]:
    from deltalake import DeltaTable

    log = table / "_delta_log"
    duck = duckdb_connection()

    def delta_rs() -> int:
        if not any(log.glob("*.json")):
            raise _NotYet
        return len(DeltaTable(str(table)).file_uris())

    def duckdb() -> int:
        if not any(log.glob("*.json")):
            raise _NotYet
        return int(duck.execute(f"SELECT count(*) FROM delta_scan('{table}')").fetchone()[0])

    def raw() -> int:
        import pyarrow.parquet as pq

        opened = 0
        for path in sorted(log.glob("*.checkpoint.parquet")):
            if path.name not in checkpoints_seen:
                try:
                    pq.read_metadata(path)
                except FileNotFoundError:
                    continue
                checkpoints_seen.add(path.name)
                opened += 1
        try:
            json.loads((log / "_last_checkpoint").read_text())
        except FileNotFoundError:
            pass
        return opened

    return [Reader("delta-rs (open table, list files)", delta_rs), Reader("DuckDB (delta_scan count)", duckdb),
            Reader("raw (checkpoint footers, _last_checkpoint)", raw)]  # fmt: skip


def run(checkpoints: int, timeout_s: float) -> tuple[list[Reader], int, int, float]:
    with tempfile.TemporaryDirectory(prefix="lakecluster-checkpoints-") as tmp:
        cwd = Path(tmp)
        table = cwd / "lakecluster-data" / "lineorder"
        seen: set[str] = set()
        polling = readers(table, seen)
        stop = threading.Event()
        threads = [threading.Thread(target=r.poll, args=(stop,), daemon=True) for r in polling]
        for t in threads:
            t.start()
        command = [sys.executable, "-m", "lakecluster", "--set=metrics.port=0", "--set=stream.trigger_interval_s=0",
                   "--set=source.generator.rows_per_second=4000", "--set=vacuum.interval_s=0", "stream"]  # fmt: skip
        started = time.monotonic()
        with open(cwd / "stream.log", "wb") as out:
            stream = subprocess.Popen(command, cwd=cwd, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            while len(list((table / "_delta_log").glob("*.checkpoint.parquet"))) < checkpoints:
                if stream.poll() is not None:
                    raise SystemExit("the stream exited:\n" + (cwd / "stream.log").read_text()[-3000:])
                if time.monotonic() - started > timeout_s:
                    raise SystemExit(f"fewer than {checkpoints} checkpoints after {timeout_s:.0f} s")
                time.sleep(0.5)
        finally:
            stream.send_signal(signal.SIGTERM)
            stream.wait(timeout=120)
            stop.set()
            for t in threads:
                t.join(30)
        elapsed = time.monotonic() - started
        commits = len(list((table / "_delta_log").glob("*.json")))
        written = len(list((table / "_delta_log").glob("*.checkpoint.parquet")))
    return polling, commits, written, elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--checkpoints", type=int, default=20)
    parser.add_argument("--timeout-s", type=float, default=3600)
    parser.add_argument("--no-write", action="store_true")
    args = parser.parse_args()
    polling, commits, written, elapsed = run(args.checkpoints, args.timeout_s)
    rows = ["| reader | reads | failed reads |", "|---|---:|---:|"]
    rows += [f"| {r.name} | {r.reads:,} | {len(r.failures)} |" for r in polling]
    table = "\n".join(rows)
    failed = sum(len(r.failures) for r in polling)
    verdict = (f"{commits} commits and {written} checkpoints in {elapsed:.0f} s; failed reads: **{failed}** "
               f"(goal 0: {'met' if failed == 0 else 'not met'}).")  # fmt: skip
    print(table)
    print(verdict)
    for r in polling:
        for failure in r.failures[:5]:
            print(f"  {r.name}: {failure}")
    if not args.no_write:
        section = (
            "## Checkpoint readers: no reader opens a checkpoint half written\n\n"
            f"`python bench/checkpoint_readers.py --checkpoints {args.checkpoints}` — `lakecluster stream` (built-in "
            "generator, a new local table, Delta's checkpoint every 10 commits) while three readers poll the table "
            "on threads of their own as fast as they can: delta-rs opens it and lists its files, DuckDB counts its "
            "rows with `delta_scan`, a raw reader opens every checkpoint's footer the moment it is listed and "
            "`_last_checkpoint` each time. Before the LogStore wrote checkpoints under a temporary name, the raw "
            "reader failed 124 times in 20 checkpoints (tests/lakecluster/test_checkpoints.py has the short form).\n\n"
            f"{table}\n\n{verdict}\n"
        )
        write_section(DOCS, "## Checkpoint readers", section)
    if failed:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
