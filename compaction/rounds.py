"""The compactor's rounds: a round, the layout loop, the vacuum, every ``compaction.interval_s``
until stopped; faults classified and retried with capped backoff, or the service stopped for good
(:class:`FatalServiceError`) when retrying cannot fix them. Readiness (``/readyz``) once a round
was planned and its work committed."""

from __future__ import annotations

import logging
import time
from typing import Protocol

from lakecluster import metrics
from lakecluster.config import Config
from lakecluster.errors import FatalServiceError, NoBoundariesError
from lakecluster.health import HEALTH
from lakecluster.retry import Backoff, classify, first_line
from lakecluster.sizes import human_bytes

log = logging.getLogger(__name__)

HEALTH_NAME = "compactor"


class Service(Protocol):
    """What the rounds run: the compactor (``loop.Compactor``)."""

    full: bool

    @property
    def stopping(self) -> bool: ...

    @property
    def config(self) -> Config: ...

    def reload_if_due(self) -> None: ...

    def run_once(self) -> object: ...

    def layout_loop(self) -> None: ...

    def relayout_left(self) -> tuple[int, int]: ...

    def progress(self, line: str) -> None: ...

    def maybe_vacuum(self) -> None: ...

    def wait(self, seconds: float) -> None: ...


def run_rounds(service: Service, backoff: Backoff) -> None:
    """Rounds until ``service`` is stopped, or a ``compact --full`` pass has nothing left."""
    while not service.stopping:
        service.reload_if_due()
        wait = service.config.compaction.interval_s
        try:
            service.run_once()
            service.layout_loop()
            if service.full:
                files, size = service.relayout_left()
                if not files:
                    log.info("compact --full: every file of the pass is clustered under the current layout")
                    return
                service.progress(f"compaction --full: {files} file(s), {human_bytes(size)} left on other layouts")
                wait = 0.0  # the pass goes on at once; its rounds keep their per-round limits
            # Ready once a round was planned and its work committed: a vacuum (minutes on a
            # big table) never holds readiness back.
            HEALTH.ready(HEALTH_NAME)
            if not service.full:  # a full pass is a bounded job beside the service, which vacuums
                service.maybe_vacuum()
            if backoff.in_episode:
                log.warning("compactor recovered after %.0fs", backoff.reset())
        except NoBoundariesError as e:
            # Waiting for the stream's first sketches is a healthy state, not a failing round.
            HEALTH.ready(HEALTH_NAME)
            metrics.COMPACTION_LAST_SUCCESS.set(time.time())
            log.info("waiting: %s", e)
        except Exception as e:
            if service.stopping:  # work cancelled by the stop, not a failure
                log.info("stop: the round in flight was abandoned (%s)", first_line(f"{type(e).__name__}: {e}"))
                break
            text = f"{type(e).__name__}: {e}"
            kind = classify(text)
            metrics.SERVICE_FAILURES.labels("compactor", kind).inc()
            delay = backoff.next_delay(kind)
            if delay is None:
                HEALTH.failed(HEALTH_NAME, f"{kind} fault: {first_line(text)}")
                raise FatalServiceError(f"the compactor stopped for good ({kind} fault): {first_line(text)}") from e
            if backoff.attempts == 1:
                log.warning("compaction round failed (%s fault), retrying with backoff: %s", kind, first_line(text))
            else:
                log.info("compaction retry %d in %.1fs: %s", backoff.attempts, delay, first_line(text))
            metrics.SERVICE_RESTARTS.labels("compactor").inc()
            wait = delay
        service.wait(wait)
