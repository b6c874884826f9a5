"""Fault injection for the crash tests: die for real (like SIGKILL) at a named point.

Set ``LAKECLUSTER_TEST_CRASH_AT=<point>`` (or ``<point>:<n>`` for the n-th micro-batch of the
stream). Never set in production; the check is one environment lookup.
"""

from __future__ import annotations

import logging
import os

ENV = "LAKECLUSTER_TEST_CRASH_AT"
log = logging.getLogger(__name__)


def crash_point(point: str) -> None:
    if os.environ.get(ENV) == point:
        log.error("test crash at %s", point)
        os._exit(137)
