"""Fault injection for the tests: die for real (like SIGKILL), or fail a call, at a named point.

Set ``LAKECLUSTER_TEST_CRASH_AT=<point>`` (or ``<point>:<n>`` for the n-th micro-batch of the
stream) to die there; ``LAKECLUSTER_TEST_FAIL_AT=<point>`` to raise an ``OSError`` there (a call
whose outcome the caller cannot know); ``LAKECLUSTER_TEST_PAUSE_AT=<point>:<seconds>`` to wait
there (two processes made to overlap). Never set in production; each check is one environment lookup.
"""

from __future__ import annotations

import logging
import os
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
    name, _, seconds = os.environ.get(PAUSE_ENV, "").partition(":")
    if name == point:
        log.warning("test pause of %s s at %s", seconds, point)
        time.sleep(float(seconds))
