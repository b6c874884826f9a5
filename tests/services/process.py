"""Server processes for tests: started so they die with the test run, stopped gracefully, logs kept.

Every server is started under ``setpriv --pdeathsig KILL`` when util-linux's setpriv is there: if the
Python process that started it is killed (a CI timeout, ^C twice), the kernel kills the server too,
so no broker or S3 server outlives its test session. ``setpriv`` execs, so the pid stays the server's.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from tests.services import watchdog
from tests.services.ports import is_listening

# The JIT and the collector of every test JVM (Spark drivers and executors, the broker, the
# cluster's daemons), chosen for CPU: the suite runs three workers on two cores, so every
# CPU-second a JVM spends on itself is wall time. None of them changes any behaviour.
# - C1 only: test JVMs live seconds to minutes on kilobytes, and C2's compilations cost more than
#   they save (a 6,000-row `stream --available-now`: 39 CPU-seconds with both compilers, 22 with C1).
# - C1 alone shrinks the code cache to 48 MiB by default, which a test process's Spark session
#   fills (Spark generates code per query): the JVM's sweeper then flushes and the JIT recompiles
#   all the time, a fifth of a worker JVM's CPU. Hence 256 MiB.
# - The serial collector: G1's concurrent marking and parallel threads cost more than the pauses
#   they avoid on a small heap. tests/compaction/test_other_writers.py in one process: 312
#   CPU-seconds and 214 s before these two, 219 and 168 after.
TEST_JVM = "-XX:TieredStopAtLevel=1 -XX:ReservedCodeCacheSize=256m -XX:+UseSerialGC"


def log_tail(path: Path, lines: int = 40) -> str:
    """The last ``lines`` lines of a log file (for failure messages), or a note that it is missing."""
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - 64 * 1024))
            text = f.read().decode("utf-8", "replace")
    except OSError:
        return f"(no log at {path})"
    return f"--- last lines of {path} ---\n" + "\n".join(text.splitlines()[-lines:])


def spawn(
    command: Sequence[str], *, log: Path, cwd: Path, env: Mapping[str, str] | None = None, owner: int | None = None
) -> subprocess.Popen[bytes]:
    """Start ``command`` in its own session with stdout and stderr appended to ``log``. It dies
    with this process; with ``owner``, with the process ``owner`` instead (under watchdog.py)."""
    prefix = watchdog.dying_with_parent()
    if owner is not None:
        started = watchdog.start_time(owner)
        if started is None:
            raise ProcessLookupError(f"no process {owner} to outlive")
        prefix = [sys.executable, watchdog.__file__, str(owner), str(started), "--"]
    with open(log, "ab") as out:
        return subprocess.Popen(
            [*prefix, *command], stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            cwd=cwd, env=dict(env) if env is not None else None, start_new_session=True,
        )  # fmt: skip


def wait_ready(
    proc: subprocess.Popen[bytes] | None,
    port: int,
    probe: Callable[[], str | None],
    *,
    name: str,
    timeout_s: float,
    error: type[Exception],
    logs: Callable[[], str],
) -> None:
    """Until ``port`` is open and ``probe()`` returns None; ``probe`` returns why the server is not ready
    yet. Fails at once if the process exits meanwhile; either failure quotes ``logs()``."""
    deadline = time.monotonic() + timeout_s
    not_ready = "port not open"
    while time.monotonic() < deadline:
        if proc is None or proc.poll() is not None:
            code = None if proc is None else proc.returncode
            raise error(f"{name} exited with code {code} while starting\n{logs()}")
        if not is_listening(port, timeout_s=0.5):
            time.sleep(0.1)
            continue
        not_ready = probe()
        if not_ready is None:
            return
        time.sleep(0.2)
    raise error(f"{name} not serving after {timeout_s:.0f} s ({not_ready})\n{logs()}")


def terminate(process: subprocess.Popen[bytes], timeout_s: float) -> int | None:
    """SIGTERM, wait up to ``timeout_s``, then SIGKILL; returns the exit code."""
    if process.poll() is None:
        if _stopped(process):
            os.kill(process.pid, signal.SIGCONT)  # a paused process cannot act on SIGTERM
        process.terminate()
        try:
            process.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=30)
    return process.returncode


def kill(process: subprocess.Popen[bytes]) -> None:
    """SIGKILL and reap: the abrupt end of a crash."""
    if process.poll() is None:
        process.kill()
        process.wait(timeout=30)


def _stopped(process: subprocess.Popen[bytes]) -> bool:
    try:
        stat = Path(f"/proc/{process.pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] == "T"


def group_alive(pgid: int) -> bool:
    """Whether any process of the process group ``pgid`` still runs."""
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return True


def group_gone_within(pgid: int, timeout_s: float) -> bool:
    """Waits up to ``timeout_s`` for every process of the group ``pgid`` (a driver, its JVM, its
    Python workers) to exit; returns whether they all did."""
    deadline = time.monotonic() + timeout_s
    while group_alive(pgid) and time.monotonic() < deadline:
        time.sleep(0.2)
    return not group_alive(pgid)
