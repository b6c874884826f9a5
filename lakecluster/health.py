"""Liveness and readiness of the services in this process, for orchestrators' probes.

Each long-running component (the stream, the compactor) registers itself, says when it is ready
(the stream once its query runs, the compactor once a round has completed) and when it has stopped
for good. ``/healthz`` answers 200 while no component has failed for good; ``/readyz`` answers 200
once every registered component is ready and none has failed. A transient fault being retried with
backoff does not fail either probe: restarting the process would not help it.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field


@dataclass
class ComponentState:
    ready: bool = False
    failed: str | None = None
    since: float = field(default_factory=time.time)


class Health:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._components: dict[str, ComponentState] = {}

    def register(self, name: str) -> None:
        with self._lock:
            self._components.setdefault(name, ComponentState())

    def ready(self, name: str) -> None:
        with self._lock:
            state = self._components.setdefault(name, ComponentState())
            if not state.ready:
                state.ready, state.since = True, time.time()

    def failed(self, name: str, reason: str) -> None:
        with self._lock:
            state = self._components.setdefault(name, ComponentState())
            state.failed, state.since = reason, time.time()

    def snapshot(self) -> dict[str, dict[str, object]]:
        with self._lock:
            return {name: {"ready": s.ready, "failed": s.failed, "since": s.since}
                    for name, s in self._components.items()}  # fmt: skip

    def live(self) -> bool:
        with self._lock:
            return all(s.failed is None for s in self._components.values())

    def is_ready(self, name: str | None = None) -> bool:
        """Every component ready and none failed; with ``name``, that component."""
        with self._lock:
            states = list(self._components.values()) if name is None else [
                s for n, s in self._components.items() if n == name]  # fmt: skip
            return bool(states) and all(s.ready and s.failed is None for s in states)

    def reset(self) -> None:
        """Forget every component (tests running several services in one process)."""
        with self._lock:
            self._components.clear()


HEALTH = Health()
