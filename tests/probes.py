"""A readiness probe as Kubernetes runs one, for tests of the services' ``/readyz``."""

from __future__ import annotations

import re
import threading
import urllib.error
import urllib.request


class Kubelet:
    """Polls ``/readyz`` once a second, as a kubelet's readiness probe does, noting beside each
    answer how many vacuums the process had completed (from its ``/metrics``)."""

    def __init__(self, port: int) -> None:
        self.base = f"http://127.0.0.1:{port}"
        self.seen: list[tuple[int, float]] = []  # (readyz status, vacuum runs completed)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._poll, daemon=True)
        self._thread.start()

    def _get(self, path: str) -> tuple[int, str]:
        try:
            with urllib.request.urlopen(self.base + path, timeout=5) as r:
                return int(r.status), r.read().decode()
        except urllib.error.HTTPError as e:
            return int(e.code), ""
        except OSError:
            return 0, ""  # not listening yet

    def _poll(self) -> None:
        while not self._stop.wait(1.0):
            status, _ = self._get("/readyz")
            _, text = self._get("/metrics")
            runs = re.search(r"^lakecluster_vacuum_runs_total (\S+)$", text, re.M)
            if status:
                self.seen.append((status, float(runs.group(1)) if runs else 0.0))

    def stop(self) -> list[tuple[int, float]]:
        self._stop.set()
        self._thread.join(timeout=10)
        return self.seen


def assert_ready_before_a_vacuum_ended_and_from_then_on(probes: list[tuple[int, float]]) -> None:
    """The probe answered 200 while no vacuum had completed yet (one was held), and 200 at every
    look after that."""
    first = next((i for i, (status, _) in enumerate(probes) if status == 200), None)
    assert first is not None, f"/readyz never answered 200: {probes}"
    assert probes[first][1] == 0, f"/readyz turned 200 only after a vacuum had completed: {probes}"
    assert all(status == 200 for status, _ in probes[first:]), f"/readyz turned unready again: {probes}"
