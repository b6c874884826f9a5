"""Blobs a rewrite task receives, held in memory up to a limit and spilled to local disk beyond it.

The spill file has no name: it is created unlinked (``O_TMPFILE`` where the file system has it,
else created and removed at once), so the kernel frees its blocks when the task's process ends,
whether it returns, fails or is killed. Nothing is left behind to sweep.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass


@dataclass(frozen=True)
class Entry:
    """One blob: where it sorts among its run's (``order``), its rows, its decoded bytes, and
    either the bytes themselves or their place in the spill file."""

    order: tuple[int, ...]
    rows: int
    nbytes: int
    data: bytes | None
    offset: int = 0
    length: int = 0


def spill_directory(configured: str) -> str:
    """Where a task spills: the configured directory, else Spark's local directories for the
    worker (``SPARK_LOCAL_DIRS``, the first), else the system's temporary directory."""
    if configured:
        return configured
    local = os.environ.get("SPARK_LOCAL_DIRS", "").split(",")[0].strip()
    return local or tempfile.gettempdir()


class BlobStore:
    """Blobs by run, in memory while they take at most ``memory_limit`` bytes, on disk after that.

    Args:
        directory: the spill file's directory (created if missing).
        memory_limit: bytes of blobs held in memory; 0 spills every blob.
    """

    def __init__(self, directory: str, memory_limit: int) -> None:
        self.directory = directory
        self.memory_limit = memory_limit
        self.held = 0  # bytes of blobs in memory
        self.spilled_bytes = 0  # bytes spilled (to this store's file; a caller may add others')
        self._end = 0  # the spill file's size: where the next blob goes
        self._runs: dict[int, list[Entry]] = {}
        self._file: object | None = None
        self._fd = -1

    def add(self, run: int, order: tuple[int, ...], rows: int, nbytes: int, blob: bytes) -> None:
        if self.held + len(blob) <= self.memory_limit:
            entry = Entry(order, rows, nbytes, blob)
            self.held += len(blob)
        else:
            entry = Entry(order, rows, nbytes, None, self._append(blob), len(blob))
        self._runs.setdefault(run, []).append(entry)

    def _append(self, blob: bytes) -> int:
        if self._fd < 0:
            os.makedirs(self.directory, exist_ok=True)
            self._file = tempfile.TemporaryFile(dir=self.directory, prefix="lakecluster-spill-")
            self._fd = self._file.fileno()  # type: ignore[attr-defined]
        offset = self._end
        view = memoryview(blob)
        while view:
            written = os.pwrite(self._fd, view, offset + len(blob) - len(view))
            view = view[written:]
        self._end += len(blob)
        self.spilled_bytes += len(blob)
        return offset

    def runs(self) -> list[int]:
        return sorted(self._runs)

    def entries(self, run: int) -> list[Entry]:
        """The run's blobs in their order (stable for equal orders: as added)."""
        return sorted(self._runs.get(run, ()), key=lambda e: e.order)

    def read(self, entry: Entry) -> bytes:
        if entry.data is not None:
            return entry.data
        out = bytearray(entry.length)
        view, done = memoryview(out), 0
        while done < entry.length:
            n = os.preadv(self._fd, [view[done:]], entry.offset + done)
            if n <= 0:
                raise OSError(f"spill file ended {entry.length - done} bytes early")
            done += n
        return bytes(out)

    def blobs(self, run: int) -> Iterator[tuple[Entry, bytes]]:
        for entry in self.entries(run):
            yield entry, self.read(entry)

    def drop(self, run: int) -> None:
        """Forget the run (its blobs in memory are freed; its bytes on disk stay until close)."""
        for entry in self._runs.pop(run, ()):
            if entry.data is not None:
                self.held -= len(entry.data)

    def close(self) -> None:
        if self._file is not None:
            self._file.close()  # type: ignore[attr-defined]
            self._file, self._fd = None, -1
        self._runs.clear()
        self.held = 0

    def __enter__(self) -> BlobStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
