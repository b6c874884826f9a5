"""Fault injection for the tests: die for real (like SIGKILL), or fail a call, at a named point.

Set ``LAKECLUSTER_TEST_CRASH_AT=<point>`` (or ``<point>:<n>`` for the n-th micro-batch of the
stream) to die there; ``LAKECLUSTER_TEST_FAIL_AT=<point>`` to raise an ``OSError`` there (a call
whose outcome the caller cannot know); ``LAKECLUSTER_TEST_PAUSE_AT=<point>:<seconds>`` to wait
there (two processes made to overlap), ``<point>:<seconds>:native`` to wait inside a native call
that signals do not end (as a stuck storage call in a C++ library). Never set in production; each
check is one environment lookup.
"""

from __future__ import annotations

import ctypes
import logging
import os
import signal
import threading
import time

ENV = "LAKECLUSTER_TEST_CRASH_AT"
FAIL_ENV = "LAKECLUSTER_TEST_FAIL_AT"
PAUSE_ENV = "LAKECLUSTER_TEST_PAUSE_AT"
log = logging.getLogger(__name__)


def crash_point(point: str) -> None:
    if os.environ.get(ENV) == point:
        log.error("test crash at %s", point)
        os._exit(137)


def fail_point(point: str) -> None:
    if os.environ.get(FAIL_ENV) == point:
        log.error("test failure injected at %s", point)
        raise OSError(f"injected failure at {point} (connection reset)")


def pause_point(point: str) -> None:
    name, _, rest = os.environ.get(PAUSE_ENV, "").partition(":")
    seconds, _, how = rest.partition(":")
    if name == point:
        log.warning("test pause of %s s at %s", seconds, point)
        if how == "native":
            _wait_natively(float(seconds))
        else:
            time.sleep(float(seconds))


def _wait_natively(seconds: float) -> None:
    """Wait on a pthread condition variable through ctypes (the GIL released): a signal does not
    end the wait, so Python runs no signal handler on this thread until it ends."""
    libc = ctypes.CDLL(None)
    mutex, cond = ctypes.create_string_buffer(64), ctypes.create_string_buffer(64)  # zeroed: initialised
    done = threading.Event()

    def release() -> None:
        time.sleep(seconds)
        libc.pthread_mutex_lock(mutex)
        done.set()
        libc.pthread_cond_signal(cond)
        libc.pthread_mutex_unlock(mutex)

    threading.Thread(target=release, daemon=True).start()
    # A stop signal interrupting the wait would let Python run its handler between two waits; a
    # C++ library retries such interruptions itself. Blocked here, the kernel hands it to another thread.
    mask = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM, signal.SIGINT})
    libc.pthread_mutex_lock(mutex)
    try:
        while not done.is_set():
            libc.pthread_cond_wait(cond, mutex)
    finally:
        libc.pthread_mutex_unlock(mutex)
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)
