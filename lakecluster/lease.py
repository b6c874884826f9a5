"""One holder at a time: a lease that a second process is refused, and that a killed holder frees.

Local disks: an exclusive ``flock`` on the lease file. The kernel drops it when the holder dies,
however it dies (SIGKILL included), so a restart is never blocked by a stale lock.

Object stores have no locks: the lease is an object naming its holder and an expiry, renewed by a
background thread every ``ttl/3``. A process finds it unexpired and refuses to start; a holder
killed without releasing it blocks restarts for at most ``ttl``. Two processes racing for a free
lease both write, wait, and read back: only the one whose write survived goes on (object stores
have read-after-write consistency; the window left is two starts within the same moment).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import socket
import threading
import time
import uuid
from typing import IO, Any

from lakecluster import storage
from lakecluster.config import StorageConfig
from lakecluster.errors import LeaseHeldError
from lakecluster.uris import is_local, normalize

log = logging.getLogger(__name__)


def _holder(purpose: str) -> dict[str, Any]:
    return {"owner": uuid.uuid4().hex, "host": socket.gethostname(), "pid": os.getpid(), "purpose": purpose,
            "since": time.time()}  # fmt: skip


def _describe(info: dict[str, Any]) -> str:
    since = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(info.get("since", 0)))
    return f"pid {info.get('pid')} on {info.get('host')} ({info.get('purpose')}, since {since})"


class Lease:
    """``Lease.acquire(uri, purpose, storage=...)`` or raise :class:`LeaseHeldError`; ``release()`` when done."""

    def __init__(self, uri: str, info: dict[str, Any], handle: IO[str] | None, ttl_s: float,
                 storage: StorageConfig) -> None:  # fmt: skip
        self.uri = uri
        self.storage = storage
        self.info = info
        self._handle = handle
        self._ttl_s = ttl_s
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.lost = threading.Event()  # set if the renewal thread finds the lease taken over

    @classmethod
    def acquire(cls, uri: str, purpose: str, *, storage: StorageConfig, ttl_s: float = 30.0,
                settle_s: float = 1.0) -> Lease:  # fmt: skip
        """Hold the lease at ``uri`` (reached with ``storage``) for ``purpose``.

        Raises:
            LeaseHeldError: another live process holds it (named in the message).
        """
        uri = normalize(uri)
        info = _holder(purpose)
        if is_local(uri):
            return cls._acquire_local(uri, info, storage)
        return cls._acquire_remote(uri, info, ttl_s, settle_s, storage)

    @classmethod
    def _acquire_local(cls, path: str, info: dict[str, Any], storage: StorageConfig) -> Lease:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        handle = open(path, "a+")
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.seek(0)
            try:
                held = json.loads(handle.read() or "{}")
            except ValueError:
                held = {}
            handle.close()
            raise LeaseHeldError(f"{info['purpose']} is already running: {_describe(held)} holds {path}") from None
        handle.seek(0)
        handle.truncate()
        handle.write(json.dumps(info))
        handle.flush()
        return cls(path, info, handle, 0.0, storage)

    @classmethod
    def _acquire_remote(cls, uri: str, info: dict[str, Any], ttl_s: float, settle_s: float,
                        settings: StorageConfig) -> Lease:  # fmt: skip
        fs, path = storage.filesystem(uri, settings)
        held = _read_remote(fs, path)
        if held is not None and held.get("expires", 0) > time.time():
            left = held["expires"] - time.time()
            raise LeaseHeldError(
                f"{info['purpose']} is already running: {_describe(held)} holds {uri} (renewed by its holder; "
                f"if that process is gone the lease expires in {left:.0f}s)"
            )
        lease = cls(uri, info, None, ttl_s, settings)
        lease._write_remote()
        time.sleep(settle_s)
        now = _read_remote(fs, path)
        if now is None or now.get("owner") != info["owner"]:
            raise LeaseHeldError(f"{info['purpose']}: another process took {uri} at the same moment: "
                                 f"{_describe(now or {})}")  # fmt: skip
        lease._thread = threading.Thread(target=lease._renew, name="lakecluster-lease", daemon=True)
        lease._thread.start()
        return lease

    def _write_remote(self) -> None:
        fs, path = storage.filesystem(self.uri, self.storage)
        body = json.dumps({**self.info, "expires": time.time() + self._ttl_s}).encode()
        with fs.open_output_stream(path) as out:
            out.write(body)

    def _renew(self) -> None:
        fs, path = storage.filesystem(self.uri, self.storage)
        while not self._stop.wait(self._ttl_s / 3):
            try:
                held = _read_remote(fs, path)
                if held is not None and held.get("owner") != self.info["owner"]:
                    log.error("lease %s was taken over by %s", self.uri, _describe(held))
                    self.lost.set()
                    return
                self._write_remote()
            except OSError as e:  # storage hiccup: retry at the next tick, the ttl covers it
                log.warning("could not renew lease %s: %s", self.uri, e)

    def release(self) -> None:
        self._stop.set()
        if self._handle is not None:
            with contextlib.suppress(OSError):
                fcntl.flock(self._handle, fcntl.LOCK_UN)
            self._handle.close()
            self._handle = None
            return
        if self._thread is not None:
            self._thread.join(timeout=5)
        fs, path = storage.filesystem(self.uri, self.storage)
        with contextlib.suppress(OSError):
            held = _read_remote(fs, path)
            if held is not None and held.get("owner") == self.info["owner"]:
                fs.delete_file(path)

    def __enter__(self) -> Lease:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


def _read_remote(fs: Any, path: str) -> dict[str, Any] | None:
    try:
        with fs.open_input_stream(path) as f:
            return json.loads(f.read() or b"{}")
    except FileNotFoundError:
        return None
    except ValueError:
        return {}
