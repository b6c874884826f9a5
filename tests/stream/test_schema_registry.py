"""The schema registry client against a real registry (Apicurio Registry's Confluent-compatible API)."""

from __future__ import annotations

import base64
import http.server
import ssl
import subprocess
import threading
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from lakecluster.stream.schema_registry import (
    SchemaRegistryClient,
    SchemaRegistryRefusedError,
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
def test_a_schema_learned_after_the_first_batch_decodes_the_next(spark, schema_registry: SchemaRegistry) -> None:  # type: ignore[no-untyped-def]
    """The stream decodes every micro-batch with the plans learned so far: a writer schema learned
    after a batch was decoded (a producer's new version) decodes that schema's records from then
    on, and is not read as an unknown id by what the earlier batches were decoded with."""
    from lakecluster.schema import ColumnSpec
    from lakecluster.stream.avro import CODE, SCHEMA_ID
    from lakecluster.stream.avro_records import AvroRecords
    from lakecluster.stream.parse import ParseLimits, ReasonCode
    from tests.stream.test_avro import wire

    client = SchemaRegistryClient([schema_registry.url])
    v1, v2 = client.register("learn-orders-value", ORDER_V1), client.register("learn-orders-value", ORDER_V2)
    columns = (ColumnSpec("id", "long", required=True), ColumnSpec("city", "string"), ColumnSpec("qty", "int"))
    records = AvroRecords(client, columns, ParseLimits())
    assert records.learn([v1]) == [v1]
    frame = spark.createDataFrame([(wire(ORDER_V1, v1, {"id": 1, "city": "Lyon"}),),
                                   (wire(ORDER_V2, v2, {"id": 2, "city": "Paris", "qty": 3}),)], "value binary")

    def rows() -> dict[int, tuple[object, object, object]]:
        return {r[SCHEMA_ID]: (r["id"], r["qty"], r[CODE]) for r in records.decode(frame).collect()}

    assert rows() == {v1: (1, None, None), v2: (None, None, ReasonCode.UNKNOWN_SCHEMA_ID.value)}
    assert records.learn([v1, v2]) == [v2]
    assert rows() == {v1: (1, None, None), v2: (2, 3, None)}


@pytest.mark.integration
def test_a_registry_url_that_does_not_answer_is_passed_over(schema_registry: SchemaRegistry) -> None:
    dead = f"http://127.0.0.1:{free_port()}"
    client = SchemaRegistryClient([dead, schema_registry.url], timeout_s=2)
    schema_id = client.register("reg-failover-value", ORDER_V1)
    assert SchemaRegistryClient([dead, schema_registry.url]).schema(schema_id).parsed == ORDER_V1
    assert client.urls[client._preferred] == schema_registry.url  # the one that answered is asked first
    with pytest.raises(SchemaRegistryUnavailableError, match=dead.removeprefix("http://")):
        SchemaRegistryClient([dead], timeout_s=2).schema(schema_id)


class _Front(http.server.BaseHTTPRequestHandler):
    """An HTTPS front with basic authentication, forwarding to the registry behind it (as a
    deployment's reverse proxy does: Apicurio 2.x itself authenticates through Keycloak only)."""

    behind = ""
    credentials = ""

    def _forward(self) -> None:
        if self.headers.get("Authorization") != "Basic " + base64.b64encode(self.credentials.encode()).decode():
            self.send_response(401)
            self.end_headers()
            self.wfile.write(b'{"error_code": 401, "message": "Unauthorized"}')
            return
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0)) or None
        headers = {"Content-Type": self.headers["Content-Type"]} if body else {}
        request = urllib.request.Request(self.behind + self.path, data=body, method=self.command, headers=headers)
        try:
            with urllib.request.urlopen(request, timeout=10) as answer:
                status, payload = answer.status, answer.read()
        except urllib.error.HTTPError as error:
            status, payload = error.code, error.read()
        self.send_response(status)
        self.end_headers()
        self.wfile.write(payload)

    do_GET = do_POST = _forward

    def log_message(self, *args: object) -> None:
        pass


@pytest.mark.integration
def test_basic_auth_and_tls_reach_the_registry_and_a_wrong_secret_is_no_outage(
    schema_registry: SchemaRegistry, tmp_path: Path
) -> None:
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=127.0.0.1",
                    "-addext", "subjectAltName=IP:127.0.0.1", "-keyout", str(key), "-out", str(cert)],
                   check=True, capture_output=True)  # fmt: skip
    handler = type("Front", (_Front,), {"behind": schema_registry.url, "credentials": "ingest:s3cret"})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    server.socket = context.wrap_socket(server.socket, server_side=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    front = f"https://127.0.0.1:{server.server_address[1]}"
    try:
        schema_id = schema_registry.register("reg-auth-value", ORDER_V1)
        client = SchemaRegistryClient([front], user="ingest", password="s3cret", ca_file=str(cert))
        assert client.schema(schema_id).parsed == ORDER_V1
        with pytest.raises(SchemaRegistryRefusedError, match="HTTP 401"):
            SchemaRegistryClient([front], user="ingest", password="wrong", ca_file=str(cert)).schema(schema_id)
        with pytest.raises(SchemaRegistryRefusedError, match="CERTIFICATE_VERIFY_FAILED"):
            SchemaRegistryClient([front], user="ingest", password="s3cret").schema(schema_id)
    finally:
        server.shutdown()
        server.server_close()
