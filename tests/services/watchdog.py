"""``python watchdog.py OWNER_PID OWNER_START -- COMMAND...``: runs COMMAND until it exits or the
process OWNER_PID (started at OWNER_START, in clock ticks since boot) is gone, then ends it.

For a server that outlives the process starting it but not the test run: an xdist worker starts
the run's one schema registry, and the run's controller (the owner) may outlive that worker. The
command dies with this process (``setpriv --pdeathsig KILL``); SIGTERM is passed on to it. Standard
library only: it runs by its path, outside the repository's packages.
"""

from __future__ import annotations

import shutil
import signal
import subprocess
import sys
import time
from types import FrameType


def start_time(pid: int) -> int | None:
    """When ``pid`` started (clock ticks since boot); None when it is gone or a zombie."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return None if fields[0] in ("Z", "X") else int(fields[19])


def dying_with_parent() -> list[str]:
    """The prefix that makes a command die with the process starting it (util-linux's setpriv;
    none where it is missing)."""
    return ["setpriv", "--pdeathsig", "KILL", "--"] if shutil.which("setpriv") else []


def main(argv: list[str]) -> int:
    owner, owner_start = int(argv[0]), int(argv[1])
    command = argv[argv.index("--") + 1 :]
    child = subprocess.Popen([*dying_with_parent(), *command])

    def pass_on(signum: int, frame: FrameType | None) -> None:
        child.terminate()

    signal.signal(signal.SIGTERM, pass_on)
    while child.poll() is None:
        if start_time(owner) != owner_start:
            child.terminate()
            try:
                child.wait(timeout=20)
            except subprocess.TimeoutExpired:
                child.kill()
            break
        time.sleep(0.5)
    return child.wait()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
