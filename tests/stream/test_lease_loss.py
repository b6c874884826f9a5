"""A stream that loses its lease (taken over, or not renewed in time) commits nothing more."""

from __future__ import annotations

from pathlib import Path

import pytest

from lakecluster.errors import FatalServiceError
from lakecluster.lease import Lease
from lakecluster.stream.job import StreamJob
from tests.conftest import read_delta
from tests.generated_tables import generator_config

pytestmark = pytest.mark.integration


def test_a_stream_that_lost_its_lease_commits_no_further_batch_and_stops(spark, tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:  # type: ignore[no-untyped-def]  # fmt: skip
    """The loss is marked right after the first micro-batch of rows committed (as the renewal thread marks
    it when another process took the lease over). The next micro-batch is already running: its
    commit checks the lease first and fails, and the stream stops at once with a fatal error.
    (Waiting for the micro-batch in flight, as a stop does, let it commit under a lease another
    process held.)"""
    table = tmp_path / "t"
    config = generator_config(table, rows=60_000, per_batch=6_000)
    job: StreamJob
    leases: list[Lease] = []
    acquire = Lease.acquire

    def acquired(*args, **kwargs) -> Lease:  # type: ignore[no-untyped-def]
        leases.append(acquire(*args, **kwargs))
        return leases[-1]

    monkeypatch.setattr(Lease, "acquire", acquired)

    def after_batch(report) -> None:  # type: ignore[no-untyped-def]
        if report.rows and sum(r.rows > 0 for r in job.reports) == 1:
            leases[0].lost.set()

    job = StreamJob(config, spark=spark, on_batch=after_batch)
    with pytest.raises(FatalServiceError, match="lost the stream's lease"):
        job.run()
    with_rows = [r for r in job.reports if r.rows]
    assert len(with_rows) == 1, "no micro-batch committed after the loss"
    # at most a trigger's rows: the generator offers what its rate has produced by then
    assert 0 < with_rows[0].rows + with_rows[0].quarantined <= 6_000
    assert read_delta(table).num_rows == with_rows[0].rows
