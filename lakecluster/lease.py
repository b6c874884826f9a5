"""One holder at a time: a lease that a second process is refused, and that a killed holder frees.

Local disks: an exclusive ``flock`` on the lease file. The kernel drops it when the holder dies,
however it dies (SIGKILL included), so a restart is never blocked by a stale lock.

Object stores have no locks: the lease is an object naming its holder and an expiry, renewed by a
background thread every ``ttl/3``. A process finds it unexpired and refuses to start; a holder
killed without releasing it blocks restarts for at most ``ttl``; one that cannot renew it for two
thirds of the ttl stops by itself. Every write of it is conditional
on the version read before it (S3 ``If-None-Match: *`` to create it, ``If-Match: <ETag>`` to take
over an expired one or to renew it, ``storage.put_if``): of processes that found the same version,
one writes and the others are refused, however far apart their reads and writes were, and a holder
whose lease was taken over learns it at its next renewal. A release writes it as expired (on the
version it holds), never deletes it: a delete could remove the lease of a process that took it over.
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
        self._etag: str | None = None  # on object stores, the version of the lease this holder wrote last
        self._renewed = time.monotonic()  # when the store last took this holder's write of the lease
        self._io = threading.Lock()  # one write of the lease at a time: the renewals and the release
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.lost = threading.Event()  # set if the renewal thread finds the lease taken over

    @classmethod
    def acquire(cls, uri: str, purpose: str, *, storage: StorageConfig, ttl_s: float = 30.0) -> Lease:
        """Hold the lease at ``uri`` (reached with ``storage``) for ``purpose``.

        Raises:
            LeaseHeldError: another live process holds it (named in the message).
        """
        uri = normalize(uri)
        info = _holder(purpose)
        if is_local(uri):
            return cls._acquire_local(uri, info, storage)
        return cls._acquire_remote(uri, info, ttl_s, storage)

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
    def _acquire_remote(cls, uri: str, info: dict[str, Any], ttl_s: float, settings: StorageConfig) -> Lease:
        found = storage.read_versioned(uri, settings)
        held = _parse(found)
        if held is not None and held.get("expires", 0) > time.time():
            left = held["expires"] - time.time()
            raise LeaseHeldError(
                f"{info['purpose']} is already running: {_describe(held)} holds {uri} (renewed by its holder; "
                f"if that process is gone the lease expires in {left:.0f}s)"
            )
        lease = cls(uri, info, None, ttl_s, settings)
        sent = time.monotonic()  # the expiry written counts from about now, not from the answer
        # Free, or expired: replace exactly the version read. Another process that wrote since
        # (created it, or took the expired one over first) makes this write fail.
        lease._etag = storage.put_if(uri, lease._body(), settings, etag=None if found is None else found.etag)
        if lease._etag is None:
            now = _parse(storage.read_versioned(uri, settings)) or {}
            raise LeaseHeldError(f"{info['purpose']}: another process took {uri} at the same moment: "
                                 f"{_describe(now)}")  # fmt: skip
        if not lease._etag:
            raise OSError(f"{uri}: the store sent no ETag for the lease it wrote; its renewals are conditional "
                          "on one (If-Match), so this store cannot hold a lease")  # fmt: skip
        lease._renewed = sent
        lease._thread = threading.Thread(target=lease._renew, name="lakecluster-lease", daemon=True)
        lease._thread.start()
        return lease

    def _body(self, expires: float | None = None) -> bytes:
        return json.dumps({**self.info, "expires": time.time() + self._ttl_s if expires is None else expires}).encode()

    def _renew(self) -> None:
        wait = self._ttl_s / 3
        while not self._stop.wait(wait):
            wait = self._ttl_s / 3
            try:
                if not self.renew():
                    return
            except Exception as e:  # a storage hiccup (OSError) or anything else: the deadline below decides
                log.warning("could not renew lease %s: %s", self.uri, e)
                wait = self._ttl_s / 6  # sooner after a failure
            if not self._stop.is_set() and not self.valid():
                return

    def valid(self) -> bool:
        """Whether this process may still act as the holder: the lease is not lost and, on object
        stores, a renewal sent within the last two thirds of the ttl got through (so the expiry it
        wrote is at least a third of the ttl away). Sets :attr:`lost` when the time has run out, also
        while a renewal is still waiting on the store: a caller checks this just before it commits."""
        if self.lost.is_set():
            return False
        if self._handle is not None or self._ttl_s <= 0:
            return True  # a flock: held until this process ends or releases it
        unconfirmed = time.monotonic() - self._renewed
        if unconfirmed > self._ttl_s * 2 / 3:
            # Its expiry comes at most a third of the ttl later; another process may take it then.
            log.error("lease %s not renewed for %.0fs (its ttl is %.0fs): stopping before another process "
                      "can take it over", self.uri, unconfirmed, self._ttl_s)  # fmt: skip
            self.lost.set()
            return False
        return True

    def renew(self) -> bool:
        """Push the expiry ``ttl`` ahead, if this process still holds the lease; else set
        :attr:`lost` and return False. After :meth:`release`, write nothing and return False.
        (The renewal thread calls this every ``ttl/3``; :meth:`valid` turns false when no renewal
        got through for two thirds of the ttl.)

        Raises:
            OSError: the store failed; nothing is known (the caller tries again).
        """
        with self._io:
            if self._stop.is_set():
                return False
            sent = time.monotonic()
            if not self._renew_version():
                return False
            self._renewed = sent
            return True

    def _renew_version(self) -> bool:
        etag = storage.put_if(self.uri, self._body(), self.storage, etag=self._etag)
        if etag is not None:
            self._etag = etag
            return True
        found = storage.read_versioned(self.uri, self.storage)
        held = _parse(found)
        if found is not None and held is not None and held.get("owner") == self.info["owner"]:
            # Ours still, in a version this process did not see: an earlier renewal whose answer was
            # lost. Renew that version.
            self._etag = storage.put_if(self.uri, self._body(), self.storage, etag=found.etag)
            if self._etag is not None:
                return True
            found = storage.read_versioned(self.uri, self.storage)
            held = _parse(found)
        if found is None:  # deleted by hand: take it again unless another process was quicker
            self._etag = storage.put_if(self.uri, self._body(), self.storage, etag=None)
            if self._etag is not None:
                log.warning("lease %s had been deleted; taken again", self.uri)
                return True
            held = _parse(storage.read_versioned(self.uri, self.storage))
        log.error("lease %s was taken over by %s", self.uri, _describe(held or {}))
        self.lost.set()
        return False

    def release(self) -> None:
        """Give the lease up. On object stores it is written as expired, only if it is still the
        version this holder wrote last: a lease another process took over since stays theirs."""
        self._stop.set()
        if self._handle is not None:
            with contextlib.suppress(OSError):
                fcntl.flock(self._handle, fcntl.LOCK_UN)
            self._handle.close()
            self._handle = None
            return
        if self._thread is not None:
            self._thread.join(timeout=5)
        if not self._io.acquire(timeout=5):  # a renewal stuck in the store: the lease expires by itself
            log.warning("lease %s not released (a renewal is still waiting on the store); it expires "
                        "within %.0fs", self.uri, self._ttl_s)  # fmt: skip
            return
        try:
            if self._etag:  # conditional on this holder's version: safe even when another took it over
                storage.put_if(self.uri, self._body(expires=0), self.storage, etag=self._etag)
                self._etag = None  # released: a second release writes nothing
        except OSError as e:
            log.warning("lease %s not released (%s); it expires within %.0fs", self.uri, e, self._ttl_s)
        finally:
            self._io.release()

    def __enter__(self) -> Lease:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


def _parse(found: storage.Versioned | None) -> dict[str, Any] | None:
    """The holder a lease object names; {} for one that is not JSON (written half, by hand)."""
    if found is None:
        return None
    try:
        held = json.loads(found.data or b"{}")
    except ValueError:
        return {}
    return held if isinstance(held, dict) else {}
