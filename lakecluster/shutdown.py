"""Stopping a service on SIGTERM or Ctrl-C, within a bound whatever it is doing.

The first signal asks the service to stop: the stream finishes its micro-batch and the compactor
its group, each for at most its ``stop_timeout_s``, after which the work is cancelled. A vacuum is
cancelled at once (it only deletes files no version needs; the next one finishes the job).
Whatever is still running ``MARGIN_S`` after those timeouts (a Spark job that ignores
cancellation, a call waiting on storage) is left behind: the process exits. That is safe at any
point, as a crash is: nothing reaches the table but whole Delta commits, the stream's replay is
idempotent, and files written for a commit that never happened are deleted by vacuum after the
retention period. A second signal exits at once.
"""

from __future__ import annotations

import logging
import os
import signal
import threading
import time
from collections.abc import Callable
from typing import Any

log = logging.getLogger(__name__)

# Left after the services' own stop timeouts for cancelled work to unwind and the JVM to stop.
MARGIN_S = 10.0


def install_signal_handlers(request_stop: Callable[[], None], *, what: str, deadline_s: float,
                            exit: Callable[[int], Any] = os._exit) -> None:  # fmt: skip
    """First SIGTERM / Ctrl-C: ``request_stop`` (on a thread of its own), and exit the process
    ``deadline_s`` later if it is still running then. A second one: exit at once (status 130)."""
    seen = {"n": 0}

    def handler(signum: int, frame: Any) -> None:
        seen["n"] += 1
        name = signal.Signals(signum).name
        if seen["n"] > 1:
            log.warning("second %s: stopping now", name)
            exit(130)
        log.warning("received %s: stopping after the current %s (at most %.0f s)", name, what, deadline_s)
        threading.Thread(target=request_stop, daemon=True, name="lakecluster-stop").start()
        threading.Thread(target=_exit_after, args=(deadline_s, what, exit), daemon=True,
                         name="lakecluster-stop-deadline").start()  # fmt: skip

    signal.signal(signal.SIGTERM, handler)
    signal.signal(signal.SIGINT, handler)


def _exit_after(deadline_s: float, what: str, exit: Callable[[int], Any]) -> None:
    time.sleep(deadline_s)
    log.warning(
        "stop: the %s in flight still runs after %.0f s; leaving it (a Delta commit is whole or absent; files "
        "written for no commit are deleted by vacuum after the retention period)", what, deadline_s,
    )  # fmt: skip
    for handler in logging.getLogger().handlers:
        handler.flush()
    exit(0)
