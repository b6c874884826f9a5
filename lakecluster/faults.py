"""Fault injection for the tests: die for real (like SIGKILL), or fail a call, at a named point.

Set ``LAKECLUSTER_TEST_CRASH_AT=<point>`` (or ``<point>:<n>`` for the n-th micro-batch of the
stream) to die there; ``LAKECLUSTER_TEST_FAIL_AT=<point>`` to raise an ``OSError`` there (a call
whose outcome the caller cannot know). Never set in production; each check is one environment lookup.
"""

from __future__ import annotations

import logging
import os

ENV = "LAKECLUSTER_TEST_CRASH_AT"
FAIL_ENV = "LAKECLUSTER_TEST_FAIL_AT"
log = logging.getLogger(__name__)


def crash_point(point: str) -> None:
    if os.environ.get(ENV) == point:
        log.error("test crash at %s", point)
        os._exit(137)


def fail_point(point: str) -> None:
    if os.environ.get(FAIL_ENV) == point:
        log.error("test failure injected at %s", point)
        raise OSError(f"injected failure at {point} (connection reset)")
