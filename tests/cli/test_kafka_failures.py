"""Kafka failures as a user meets them: a refused SASL login named at once, a wait for a broker
that is down reported while it lasts. Against the real broker (its SASL/PLAIN listener) and a
closed port; no command here starts Spark."""

from __future__ import annotations

import itertools
import logging
import time
from pathlib import Path

import pytest

from lakecluster.config import KafkaSourceConfig
from lakecluster.errors import BrokerUnavailableError
from lakecluster.stream import kafka
from tests.cli.conftest import run_cli
from tests.services.kafka import SASL_USERS, KafkaBroker, plain_jaas_config
from tests.services.ports import free_port

TRACE = "Traceback (most recent call last)"


@pytest.mark.integration
def test_a_refused_sasl_login_is_named_at_once(kafka: KafkaBroker, tmp_path: Path) -> None:
    user = next(iter(SASL_USERS))
    options = ('{"security.protocol" = "SASL_PLAINTEXT", "sasl.mechanism" = "PLAIN", "sasl.jaas.config" = '
               f"'{plain_jaas_config(user, 'not-the-password')}'}}")  # fmt: skip
    started = time.monotonic()
    table = tmp_path / "t"
    proc = run_cli("--set", "source.kind=kafka", "--set", f"source.kafka.bootstrap_servers={kafka.sasl_bootstrap}",
                   "--set", 'source.kafka.topics=["t"]', "--set", f"source.kafka.options={options}",
                   "--set", f"table.path={table}", "--set", "metrics.port=0", "stream", cwd=tmp_path)  # fmt: skip
    seconds = time.monotonic() - started
    assert proc.returncode == 1, proc.stderr
    assert proc.stderr.splitlines() == [
        f"lakecluster: KafkaLoginError: the Kafka broker at {kafka.sasl_bootstrap} refused the SASL login of user "
        f"'{user}' (PLAIN over SASL_PLAINTEXT): Authentication failed: Invalid username or password; check the "
        "username and password in source.kafka.options sasl.jaas.config"
    ]
    assert "not-the-password" not in proc.stderr
    # Named by the broker's answer, not after source.kafka.connect_timeout_s (30 s) of retries.
    assert seconds < 15, seconds


def test_waiting_for_a_broker_that_is_down_is_reported_while_it_lasts(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """The interval is 10 s in a service; shortened here so that a 2-second wait shows several lines."""
    monkeypatch.setattr(kafka, "PROGRESS_EVERY_S", 0.5, raising=False)
    port = free_port()
    settings = KafkaSourceConfig(bootstrap_servers=f"127.0.0.1:{port}", topics=("t",), connect_timeout_s=2.0)
    caplog.set_level(logging.WARNING, logger="lakecluster.stream.kafka")
    with pytest.raises(BrokerUnavailableError, match="no Kafka broker answered"):
        kafka.consumer(settings)
    lines = [r for r in caplog.records if r.name == "lakecluster.stream.kafka"]
    assert len(lines) >= 4, [r.getMessage() for r in lines]
    for record in lines:
        assert record.getMessage().startswith(f"waiting for a Kafka broker at 127.0.0.1:{port}: ")
        assert " of 2s (source.kafka.connect_timeout_s); " in record.getMessage()
        assert "Connection refused" in record.getMessage()
    assert " 0s of 2s " in lines[0].getMessage()  # the first line at the first failed try
    gaps = [b.created - a.created for a, b in itertools.pairwise(lines)]
    assert max(gaps) < 0.5 + 0.3, gaps
