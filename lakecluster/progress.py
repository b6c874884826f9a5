"""Progress lines of long phases (fetching jars, starting Spark, a vacuum): a line when one starts,
one every ``EVERY_S`` while it lasts, and one when it ends, so that no minute passes in silence.

Where the lines go is the command line's choice (:func:`set_sink`: the terminal); a program using
lakecluster as a library gets them as INFO records of the ``lakecluster.progress`` logger.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable, Iterator

log = logging.getLogger(__name__)

EVERY_S = 10.0

_sink: Callable[[str], None] | None = None


def set_sink(sink: Callable[[str], None] | None) -> None:
    """Send progress lines to ``sink`` (None: the ``lakecluster.progress`` logger, at INFO)."""
    global _sink
    _sink = sink


def say(line: str) -> None:
    """One progress line; a sink that fails (a closed terminal) never fails the work it reports on."""
    with contextlib.suppress(Exception):
        if _sink is None:
            log.info("%s", line)
        else:
            _sink(line)


@contextlib.contextmanager
def phase(what: str, detail: Callable[[], str] | None = None, *, every_s: float | None = None,
          announce: bool = True) -> Iterator[None]:  # fmt: skip
    """``what ...`` now, ``what: N s[, detail()]`` every ``every_s`` (default ``EVERY_S``) while the
    block runs, ``what: done in N s`` after it (``failed after`` when it raised). With
    ``announce=False``, a phase that ends before the first beat prints nothing."""
    interval = EVERY_S if every_s is None else every_s
    started = time.monotonic()
    done = threading.Event()
    beats = threading.Event()

    def beat() -> None:
        while not done.wait(interval):
            beats.set()
            extra = ""
            if detail is not None:
                with contextlib.suppress(Exception):  # a progress detail never fails the phase
                    extra = f", {detail()}"
            say(f"{what}: {time.monotonic() - started:.0f} s{extra}")

    if announce:
        say(f"{what} ...")
    beater = threading.Thread(target=beat, daemon=True, name="lakecluster-progress")
    beater.start()
    ok = False
    try:
        yield
        ok = True
    finally:
        done.set()
        beater.join(1.0)  # a beat being said now comes before the end line
        if announce or beats.is_set():
            say(f"{what}: {'done in' if ok else 'failed after'} {time.monotonic() - started:.1f} s")
