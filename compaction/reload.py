"""New compaction thresholds without a restart: the compactor re-reads its configuration when the
config file changes or on SIGHUP, applies the ``[compaction]`` and ``[vacuum]`` sections, logs
every changed key, and keeps running on the old settings when the new file is invalid.

Other sections (the table, the source, Spark, storage, metrics) are fixed for the life of the
process: a change to them is logged as needing a restart and not applied.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import threading
from collections.abc import Callable
from typing import Any

from lakecluster.config import Config, describe
from lakecluster.errors import ConfigError

log = logging.getLogger(__name__)

RELOADABLE = ("compaction", "vacuum")


class ThresholdReloader:
    """Watches the config file's modification time and takes reload requests (SIGHUP)."""

    def __init__(self, load: Callable[[], Config], path: str | os.PathLike[str] | None) -> None:
        self._load = load
        self._path = path
        self._mtime = self._stat()
        self._requested = threading.Event()

    def _stat(self) -> float | None:
        try:
            return os.stat(self._path).st_mtime_ns if self._path is not None else None
        except OSError:
            return None

    def request(self) -> None:
        """Reload before the next round (called from the SIGHUP handler)."""
        self._requested.set()

    @property
    def requested(self) -> bool:
        return self._requested.is_set()

    def due(self) -> bool:
        return self._requested.is_set() or self._stat() != self._mtime

    def reload(self, current: Config) -> Config:
        """``current`` with the reloadable sections of the configuration as it is now."""
        why = "SIGHUP" if self._requested.is_set() else f"{self._path} changed"
        self._requested.clear()
        self._mtime = self._stat()
        try:
            new = self._load()
        except ConfigError as e:
            log.error("configuration not reloaded (%s): %s; the compactor keeps its current settings", why, e)
            return current
        fixed = sorted(k for k in _changed(describe(current), describe(new)) if k.split(".")[0] not in RELOADABLE)
        if fixed:
            log.warning("configuration reloaded (%s): %s changed but take effect only after a restart",
                        why, ", ".join(fixed))  # fmt: skip
        updated = dataclasses.replace(current, **{s: getattr(new, s) for s in RELOADABLE})
        changes = _changed(describe(current), describe(updated))
        for key in sorted(changes):
            old, value = changes[key]
            log.warning("configuration reloaded (%s): %s: %s -> %s", why, key, old, value)
        if not changes and not fixed:
            log.info("configuration reloaded (%s): nothing changed", why)
        return updated


def _changed(old: dict[str, Any], new: dict[str, Any], prefix: str = "") -> dict[str, tuple[Any, Any]]:
    """{dotted key: (old, new)} of every leaf that differs between two ``describe()`` trees."""
    out: dict[str, tuple[Any, Any]] = {}
    for key in sorted(set(old) | set(new)):
        a, b = old.get(key), new.get(key)
        name = f"{prefix}{key}"
        if isinstance(a, dict) and isinstance(b, dict):
            out.update(_changed(a, b, f"{name}."))
        elif a != b:
            out[name] = (a, b)
    return out
