"""Server processes for tests: started so they die with the test run, stopped gracefully, logs kept.

Every server is started under ``setpriv --pdeathsig KILL`` when util-linux's setpriv is there: if the
Python process that started it is killed (a CI timeout, ^C twice), the kernel kills the server too,
so no broker or S3 server outlives its test session. ``setpriv`` execs, so the pid stays the server's.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path


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
    command: Sequence[str], *, log: Path, cwd: Path, env: Mapping[str, str] | None = None
) -> subprocess.Popen[bytes]:
    """Start ``command`` in its own session with stdout and stderr appended to ``log``."""
    prefix = ["setpriv", "--pdeathsig", "KILL", "--"] if shutil.which("setpriv") else []
    with open(log, "ab") as out:
        return subprocess.Popen(
            [*prefix, *command], stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            cwd=cwd, env=dict(env) if env is not None else None, start_new_session=True,
        )  # fmt: skip


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
