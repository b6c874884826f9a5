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

import contextlib
import logging
import os
import signal
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

log = logging.getLogger(__name__)

# Left after the services' own stop timeouts for cancelled work to unwind and the JVM to stop.
MARGIN_S = 10.0


# Called before the process exits at the deadline (e.g. a lease released, so that a restart need
# not wait for it to expire); each is given a second.
_before_forced_exit: list[Callable[[], object]] = []


@contextlib.contextmanager
def released_on_forced_exit(release: Callable[[], object]) -> Iterator[None]:
    """Within the block, ``release`` runs also when the process exits at the stop deadline."""
    _before_forced_exit.append(release)
    try:
        yield
    finally:
        with contextlib.suppress(ValueError):
            _before_forced_exit.remove(release)


def install_signal_handlers(request_stop: Callable[[], None], *, what: str, deadline_s: float,
                            exit: Callable[[int], Any] = os._exit) -> None:  # fmt: skip
    """First SIGTERM / Ctrl-C: ``request_stop`` (on a thread of its own), and exit the process
    ``deadline_s`` later if it is still running then. A second one: exit at once (status 130).

    Python runs signal handlers on the main thread between bytecodes: a main thread waiting in a
    native call (a stuck storage request in a C++ library) would hold them back. So the signals
    are taken from the interpreter's wakeup file descriptor, which its C-level handler writes at
    once, by a thread of their own; the Python-level handlers do nothing. Call from the main thread.
    """
    read_fd, write_fd = os.pipe()
    os.set_blocking(write_fd, False)
    signal.set_wakeup_fd(write_fd, warn_on_full_buffer=False)
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, _taken_by_the_watcher)
    threading.Thread(target=_watch, args=(read_fd, request_stop, what, deadline_s, exit), daemon=True,
                     name="lakecluster-signals").start()  # fmt: skip


def _taken_by_the_watcher(signum: int, frame: Any) -> None:
    """The Python-level handler: nothing to do (``_watch`` acts on the signal)."""


def _watch(read_fd: int, request_stop: Callable[[], None], what: str, deadline_s: float,
           exit: Callable[[int], Any]) -> None:  # fmt: skip
    stops = 0
    while data := os.read(read_fd, 64):
        for signum in data:  # one byte per signal: its number (SIGHUP and others pass by)
            if signum not in (signal.SIGTERM, signal.SIGINT):
                continue
            stops += 1
            name = signal.Signals(signum).name
            if stops > 1:
                _within(0.5, lambda name=name: log.warning("second %s: stopping now", name))  # type: ignore[misc]
                exit(130)
                return
            threading.Thread(target=_exit_after, args=(deadline_s, what, exit), daemon=True,
                             name="lakecluster-stop-deadline").start()  # fmt: skip
            threading.Thread(target=request_stop, daemon=True, name="lakecluster-stop").start()
            _quietly(log.warning, "received %s: stopping after the current %s (at most %.0f s)", name, what,
                     deadline_s)  # fmt: skip


def _exit_after(deadline_s: float, what: str, exit: Callable[[int], Any]) -> None:
    time.sleep(deadline_s)
    for release in list(_before_forced_exit):
        _within(1.0, release)
    _within(1.0, lambda: log.warning(
        "stop: the %s in flight still runs after %.0f s; leaving it (a Delta commit is whole or absent; files "
        "written for no commit are deleted by vacuum after the retention period)", what, deadline_s,
    ))  # fmt: skip
    exit(0)


def _within(seconds: float, call: Callable[[], object]) -> None:
    """``call`` on a thread, waited for at most ``seconds``: a stuck write or request cannot hold
    the exit."""
    worker = threading.Thread(target=_quietly, args=(call,), daemon=True)
    worker.start()
    worker.join(seconds)


def _quietly(call: Callable[..., object], *args: object) -> None:
    with contextlib.suppress(Exception):
        call(*args)
