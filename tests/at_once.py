"""Calls made at the same moment from several threads, for races on real services."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def at_once(call: Callable[[int], T], callers: int) -> list[T | Exception]:
    """``call(i)`` for i in ``range(callers)``, each on a thread of its own, all released by one
    barrier; what each returned or raised, in the order of ``i``."""
    barrier = threading.Barrier(callers)
    out: list[T | Exception] = [RuntimeError("not run")] * callers

    def run(i: int) -> None:
        barrier.wait()
        try:
            out[i] = call(i)
        except Exception as e:
            out[i] = e

    threads = [threading.Thread(target=run, args=(i,)) for i in range(callers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return out
