"""Progress lines of long phases: announced, a beat per interval while running, an end line."""

from __future__ import annotations

import itertools
import time

import pytest

from lakecluster import progress


@pytest.fixture
def lines():  # type: ignore[no-untyped-def]
    said: list[tuple[float, str]] = []
    progress.set_sink(lambda line: said.append((time.monotonic(), line)))
    yield said
    progress.set_sink(None)


def test_a_long_phase_says_how_it_goes_every_interval_and_when_it_ends(lines) -> None:  # type: ignore[no-untyped-def]
    started = time.monotonic()
    with progress.phase("starting Spark (local[2])", lambda: "12.0 MiB so far", every_s=0.2):
        time.sleep(0.9)
    texts = [t for _, t in lines]
    assert texts[0] == "starting Spark (local[2]) ..."
    beats = texts[1:-1]
    assert len(beats) >= 3 and all(b.startswith("starting Spark (local[2]): ") for b in beats), texts
    assert all(b.endswith(" s, 12.0 MiB so far") for b in beats), beats
    assert texts[-1].startswith("starting Spark (local[2]): done in 0.")
    stamps = [started] + [s for s, _ in lines]
    assert max(b - a for a, b in itertools.pairwise(stamps)) < 0.7  # the interval, and room for a busy machine


def test_an_unannounced_phase_is_silent_when_quick_and_heard_when_long(lines) -> None:  # type: ignore[no-untyped-def]
    with progress.phase("vacuum t", announce=False, every_s=0.2):
        time.sleep(0.01)
    assert lines == []
    with progress.phase("vacuum t", announce=False, every_s=0.1):
        time.sleep(0.35)
    texts = [t for _, t in lines]
    assert texts[0].startswith("vacuum t: ") and texts[-1].startswith("vacuum t: done in")


def test_a_failing_phase_says_so_and_a_failing_detail_does_not_fail_it(lines) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(OSError), progress.phase("fetching jars", lambda: str(1 / 0), every_s=0.05):
        time.sleep(0.2)
        raise OSError("connection reset")
    texts = [t for _, t in lines]
    assert texts[-1].startswith("fetching jars: failed after")
    assert any(t.startswith("fetching jars: ") and t.endswith(" s") for t in texts[1:-1]), texts
