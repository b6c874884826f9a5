"""The Java client's options read as kafka-python's: a JAAS password with escapes is the password
Java's parser reads."""

from __future__ import annotations

from dataclasses import replace

import pytest

from lakecluster.config import load_config
from lakecluster.stream.kafka import client_kwargs


@pytest.mark.parametrize(("quoted", "password"), [
    (r'"plain"', "plain"),
    (r'"back\\slash"', "back\\slash"),
    (r'"with \"quotes\" in"', 'with "quotes" in'),
])  # fmt: skip
def test_a_jaas_password_is_unescaped_as_java_reads_it(quoted: str, password: str) -> None:
    jaas = f"org.apache.kafka.common.security.plain.PlainLoginModule required username=\"u\" password={quoted};"
    config = load_config(overrides={"source.kind": '"kafka"', "source.kafka.topics": '["t"]'}, environ={})
    kafka = config.source.kafka
    options = {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN", "sasl.jaas.config": jaas}
    kwargs = client_kwargs(replace(kafka, options=options))
    assert kwargs["sasl_plain_username"] == "u"
    assert kwargs["sasl_plain_password"] == password
