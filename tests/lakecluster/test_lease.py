"""The stream's lease: one holder at a time, on a local disk (flock) and on a real S3 server."""

from __future__ import annotations

import json
import time
from dataclasses import replace

import pytest

from lakecluster import lease as lease_module
from lakecluster import storage
from lakecluster.config import StorageConfig
from lakecluster.errors import LeaseHeldError
from lakecluster.lease import Lease
from tests.at_once import at_once


def test_a_second_holder_is_refused_until_the_first_releases(tmp_path) -> None:  # type: ignore[no-untyped-def]
    path = str(tmp_path / "lease")
    first = Lease.acquire(path, "stream a", storage=StorageConfig())
    with pytest.raises(LeaseHeldError, match="stream b is already running: pid"):
        Lease.acquire(path, "stream b", storage=StorageConfig())
    first.release()
    Lease.acquire(path, "stream b", storage=StorageConfig()).release()


def test_a_second_holder_is_refused_on_s3_until_the_first_releases(s3, s3_prefix: str) -> None:  # type: ignore[no-untyped-def]
    settings = StorageConfig(**s3.storage_settings())
    uri = f"{s3_prefix}lease"
    first = Lease.acquire(uri, "stream a", storage=settings, ttl_s=30)
    with pytest.raises(LeaseHeldError, match=r"stream b is already running: pid \d+ .*expires in \d+s"):
        Lease.acquire(uri, "stream b", storage=settings)
    first.release()
    released = json.loads(storage.read_versioned(uri, settings).data)  # type: ignore[union-attr]
    assert released["owner"] == first.info["owner"] and released["expires"] == 0, "written as expired"
    assert not first.renew(), "a released lease is never written again"
    assert json.loads(storage.read_versioned(uri, settings).data) == released  # type: ignore[union-attr]
    Lease.acquire(uri, "stream b", storage=settings).release()


def test_a_process_that_found_the_lease_free_cannot_take_it_after_another_did_on_s3(
    s3, s3_prefix: str, monkeypatch: pytest.MonkeyPatch
) -> None:  # type: ignore[no-untyped-def]
    """B finds the lease free; A then takes it, from start to end; only then does B write. B's write
    is conditional on the lease being absent, so B is refused and A holds it alone. (Check, write,
    wait a second and read back let B overwrite A's lease here and told both they held it.)"""
    settings = StorageConfig(**s3.storage_settings())
    uri = f"{s3_prefix}lease"
    read, checks, a = storage.read_versioned, [], []

    def check_then_let_a_take_it(u: str, s: StorageConfig) -> storage.Versioned | None:
        found = read(u, s)
        if not checks:  # B's check before its write: A acquires between the two
            checks.append(found)
            a.append(Lease.acquire(uri, "stream a", storage=settings))
        return found

    monkeypatch.setattr(lease_module.storage, "read_versioned", check_then_let_a_take_it)
    try:
        with pytest.raises(LeaseHeldError, match=r"another process took .* at the same moment: pid"):
            Lease.acquire(uri, "stream b", storage=settings)
        assert checks == [None], "B checked before A wrote"
        held = json.loads(read(uri, settings).data)  # type: ignore[union-attr]
        assert held["owner"] == a[0].info["owner"]
        assert a[0].renew() and not a[0].lost.is_set(), "A still holds it"
    finally:
        monkeypatch.undo()
        for x in a:
            x.release()


def _take_at_once(uri: str, settings: StorageConfig, processes: int) -> tuple[list[Lease], int]:
    """Threads acquiring ``uri`` at once: (the leases taken, how many were refused)."""
    results = at_once(lambda i: Lease.acquire(uri, f"stream {i}", storage=settings), processes)
    held = [r for r in results if isinstance(r, Lease)]
    return held, sum(isinstance(r, LeaseHeldError) for r in results)


def test_of_processes_taking_over_an_expired_lease_at_once_exactly_one_does_on_s3(s3, s3_prefix: str) -> None:  # type: ignore[no-untyped-def]
    settings = StorageConfig(**s3.storage_settings())
    for round_ in range(3):
        uri = f"{s3_prefix}lease-{round_}"
        dead = {"owner": "dead", "host": "h", "pid": 1, "purpose": "stream", "since": 0, "expires": time.time() - 1}
        assert storage.put_if(uri, json.dumps(dead).encode(), settings, etag=None)
        held, refused = _take_at_once(uri, settings, 4)
        assert len(held) == 1 and refused == 3
        assert json.loads(storage.read_versioned(uri, settings).data)["owner"] == held[0].info["owner"]  # type: ignore[union-attr]
        held[0].release()
    held, refused = _take_at_once(f"{s3_prefix}free", settings, 4)  # a free lease, created at once
    assert len(held) == 1 and refused == 3
    held[0].release()


def test_a_holder_whose_expired_lease_was_taken_over_learns_it_at_its_next_renewal_on_s3(
    s3, s3_prefix: str, caplog: pytest.LogCaptureFixture
) -> None:  # type: ignore[no-untyped-def]
    """A holder stalled past its ttl (a long pause, a partition) finds at its next renewal that another
    process took the lease: it sets ``lost`` (the stream stops) and does not write it back."""
    settings = StorageConfig(**s3.storage_settings())
    uri = f"{s3_prefix}lease"
    stalled = Lease.acquire(uri, "stream a", storage=settings, ttl_s=1.0)
    stalled._io.acquire()  # its renewal thread waits here, as a process that stalls
    time.sleep(1.2)
    successor = Lease.acquire(uri, "stream b", storage=settings, ttl_s=30)
    with caplog.at_level("ERROR", logger="lakecluster.lease"):
        stalled._io.release()
        assert stalled.lost.wait(timeout=5)
    assert any("was taken over by pid" in r.getMessage() for r in caplog.records)
    assert json.loads(storage.read_versioned(uri, settings).data)["owner"] == successor.info["owner"]  # type: ignore[union-attr]
    stalled.release()  # not its lease any more: left alone (a delete here would free it for a third process)
    assert json.loads(storage.read_versioned(uri, settings).data)["owner"] == successor.info["owner"]  # type: ignore[union-attr]
    with pytest.raises(LeaseHeldError, match="stream b"):
        Lease.acquire(uri, "stream c", storage=settings)
    assert successor.renew() and not successor.lost.is_set()
    successor.release()


def test_a_renewal_whose_answer_was_lost_does_not_lose_the_lease_on_s3(s3, s3_prefix: str) -> None:  # type: ignore[no-untyped-def]
    """The holder's last renewal reached the store but its answer (the new ETag) did not reach the
    holder: the next renewal's If-Match fails on its own newer version, which it recognises."""
    settings = StorageConfig(**s3.storage_settings())
    uri = f"{s3_prefix}lease"
    holder = Lease.acquire(uri, "stream a", storage=settings, ttl_s=30)
    assert storage.put_if(uri, holder._body(), settings, etag=holder._etag)  # the renewal it never heard of
    assert holder.renew() and not holder.lost.is_set()
    assert holder._etag == storage.read_versioned(uri, settings).etag  # type: ignore[union-attr]
    holder.release()
    assert json.loads(storage.read_versioned(uri, settings).data)["expires"] == 0  # type: ignore[union-attr]


def test_a_holder_that_cannot_renew_stops_before_its_lease_expires_on_s3(s3, s3_prefix: str) -> None:  # type: ignore[no-untyped-def]
    """The store refuses every renewal (here: its credentials stop working). The holder cannot know
    whether another process takes the lease once it expires, so it sets ``lost`` (the stream stops)
    before the expiry it last wrote."""
    settings = StorageConfig(**s3.storage_settings())
    uri = f"{s3_prefix}lease"
    holder = Lease.acquire(uri, "stream a", storage=settings, ttl_s=3.0)
    expires = json.loads(storage.read_versioned(uri, settings).data)["expires"]  # type: ignore[union-attr]
    holder.storage = replace(settings, s3_secret_access_key="not-the-secret")  # every renewal is refused (403)
    assert holder.lost.wait(timeout=5), "lost set"
    assert time.time() < expires, "before the lease it last wrote expired"
    holder.storage = settings
    holder.release()


def test_a_holder_whose_renewal_hangs_is_not_valid_before_its_lease_expires_on_s3(s3, s3_prefix: str) -> None:  # type: ignore[no-untyped-def]
    """A renewal waiting on a store that does not answer (object_store waits 30 s by default) must not
    keep the holder acting past its expiry: ``valid()``, which the stream checks before every commit,
    turns false two thirds of the ttl after the last renewal that got through was sent."""
    settings = StorageConfig(**s3.storage_settings())
    uri = f"{s3_prefix}lease"
    holder = Lease.acquire(uri, "stream a", storage=settings, ttl_s=1.5)
    expires = json.loads(storage.read_versioned(uri, settings).data)["expires"]  # type: ignore[union-attr]
    assert holder.valid()
    holder._io.acquire()  # the renewal thread's next write waits here, as on a store that hangs
    try:
        deadline = time.monotonic() + 3
        while holder.valid() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not holder.valid() and holder.lost.is_set()
        assert time.time() < expires, "no longer valid before the expiry it last wrote"
    finally:
        holder._io.release()
    holder.release()
