"""The schema registry client against a real registry (Apicurio Registry's Confluent-compatible API)."""

from __future__ import annotations

import pytest

from lakecluster.stream.schema_registry import (
    SchemaRegistryClient,
    SchemaRegistryUnavailableError,
    UnknownSchemaIdError,
    record_full_name,
    subject_name,
)
from tests.services.ports import free_port
from tests.services.schema_registry import SchemaRegistry

ORDER_V1 = {"type": "record", "name": "Order", "namespace": "shop",
            "fields": [{"name": "id", "type": "long"}, {"name": "city", "type": "string"}]}  # fmt: skip
ORDER_V2 = {**ORDER_V1, "fields": [*ORDER_V1["fields"], {"name": "qty", "type": ["null", "int"], "default": None}]}


def test_subjects_follow_the_three_naming_strategies() -> None:
    assert subject_name("topic_name", "orders") == "orders-value"
    assert subject_name("record_name", "orders", "shop.Order") == "shop.Order"
    assert subject_name("topic_record_name", "orders", "shop.Order") == "orders-shop.Order"
    with pytest.raises(ValueError, match="full name"):
        subject_name("record_name", "orders")
    assert record_full_name(ORDER_V1) == "shop.Order"
    assert record_full_name({"type": "record", "name": "a.b.C", "namespace": "x", "fields": []}) == "a.b.C"
    assert record_full_name("string") is None


@pytest.mark.integration
def test_writer_schemas_by_id_once_per_id_and_unknown_ids_named(schema_registry: SchemaRegistry) -> None:
    client = SchemaRegistryClient([schema_registry.url])
    first = client.register("reg-orders-value", ORDER_V1)
    second = client.register("reg-orders-value", ORDER_V2)
    assert first != second and client.register("reg-orders-value", ORDER_V1) == first
    fresh = SchemaRegistryClient([schema_registry.url])
    assert fresh.schema(second).parsed == ORDER_V2 and fresh.schema(first).parsed == ORDER_V1
    assert fresh.latest("reg-orders-value") == (2, second, fresh.schema(second))
    assert fresh.latest("reg-no-such-subject") is None
    assert ("reg-orders-value", 1) in fresh.versions_of(first)
    # Asked once per id: with the registry out of reach, a known id still answers.
    fresh.urls = [f"http://127.0.0.1:{free_port()}"]
    assert fresh.schema(first).parsed == ORDER_V1
    with pytest.raises(SchemaRegistryUnavailableError, match="no schema registry answered"):
        fresh.schema(first + second + 1000)
    with pytest.raises(UnknownSchemaIdError) as unknown:
        client.schema(first + second + 1000)
    assert unknown.value.schema_id == first + second + 1000


@pytest.mark.integration
def test_a_registry_url_that_does_not_answer_is_passed_over(schema_registry: SchemaRegistry) -> None:
    dead = f"http://127.0.0.1:{free_port()}"
    client = SchemaRegistryClient([dead, schema_registry.url], timeout_s=2)
    schema_id = client.register("reg-failover-value", ORDER_V1)
    assert SchemaRegistryClient([dead, schema_registry.url]).schema(schema_id).parsed == ORDER_V1
    assert client.urls[client._preferred] == schema_registry.url  # the one that answered is asked first
    with pytest.raises(SchemaRegistryUnavailableError, match=dead.removeprefix("http://")):
        SchemaRegistryClient([dead], timeout_s=2).schema(schema_id)
