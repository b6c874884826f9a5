"""The S3 fixture is a real S3 server: objects round-trip, credentials are checked, delta-rs reads and
writes tables on it, and a conditional create (``If-None-Match: *``) of an existing key is refused,
which is what keeps two Delta commits of the same version from both landing."""

from __future__ import annotations

import uuid

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from deltalake import CommitProperties, DeltaTable, write_deltalake
from deltalake.exceptions import CommitFailedError
from pyarrow import fs as pafs

from tests.services.s3 import S3Server

pytestmark = pytest.mark.integration


def _path(prefix: str) -> str:
    """``s3://bucket/key/`` as pyarrow's filesystems name it: ``bucket/key``."""
    return prefix.removeprefix("s3://").rstrip("/")


def _key(prefix: str, name: str) -> str:
    """``/bucket/key/name`` for a raw request."""
    return "/" + _path(prefix) + "/" + name


def test_pyarrow_writes_and_reads_an_object(s3: S3Server, s3_prefix: str) -> None:
    fs = s3.filesystem()
    payload = uuid.uuid4().bytes * 600_000  # 9.6 MB: the filer keeps it as several 4 MB chunks
    with fs.open_output_stream(f"{_path(s3_prefix)}/blob.bin") as out:
        out.write(payload)
    table = pa.table({"id": pa.array(range(10_000), pa.int64()), "s": [f"row {i}" for i in range(10_000)]})
    pq.write_table(table, f"{_path(s3_prefix)}/part.parquet", filesystem=fs)

    with fs.open_input_stream(f"{_path(s3_prefix)}/blob.bin") as f:
        assert f.read() == payload
    assert pq.read_table(f"{_path(s3_prefix)}/part.parquet", filesystem=fs).equals(table)
    listed = {info.base_name for info in fs.get_file_info(pafs.FileSelector(_path(s3_prefix)))}
    assert listed == {"blob.bin", "part.parquet"}


def test_prefix_is_fresh_and_empty(s3: S3Server, s3_prefix: str) -> None:
    bucket, name = _path(s3_prefix).split("/")
    assert bucket == "lakecluster-test" and len(name) == 32
    info = s3.filesystem().get_file_info(pafs.FileSelector(_path(s3_prefix), allow_not_found=True))
    assert info == []


def test_credentials_are_checked(s3: S3Server, s3_prefix: str) -> None:
    """A wrong secret is refused as on AWS, so a test cannot pass with a misconfigured client."""
    key = _key(s3_prefix, "secret.txt")
    assert s3.signed_request("PUT", key, b"x")[0] == 200
    status, body = s3.signed_request("GET", key, secret_key="not-the-secret")
    assert status == 403 and b"SignatureDoesNotMatch" in body
    assert s3.signed_request("GET", key) == (200, b"x")


def test_conditional_create_of_existing_key_is_rejected_with_412(s3: S3Server, s3_prefix: str) -> None:
    key = _key(s3_prefix, "_delta_log/00000000000000000001.json")
    assert s3.signed_request("PUT", key, b"first", {"If-None-Match": "*"})[0] == 200
    status, body = s3.signed_request("PUT", key, b"second", {"If-None-Match": "*"})
    assert status == 412, body
    assert b"PreconditionFailed" in body
    assert s3.signed_request("GET", key) == (200, b"first"), "the refused write must not have replaced the object"
    # Without the condition the same PUT overwrites: the 412 above came from the header.
    assert s3.signed_request("PUT", key, b"third")[0] == 200
    assert s3.signed_request("GET", key) == (200, b"third")


def test_deltalake_writes_and_reads_a_table(s3: S3Server, s3_prefix: str) -> None:
    uri = s3_prefix + "t"
    options = s3.storage_options()
    first = pa.table({"id": pa.array([1, 2, 3], pa.int64()), "v": ["a", "b", "c"]})
    second = pa.table({"id": pa.array([4, 5], pa.int64()), "v": ["d", "e"]})
    write_deltalake(uri, first, storage_options=options)
    write_deltalake(uri, second, mode="append", storage_options=options)

    table = DeltaTable(uri, storage_options=options)
    assert table.version() == 1
    assert table.to_pyarrow_table().sort_by("id").equals(pa.concat_tables([first, second]))
    assert DeltaTable(uri, storage_options=options, version=0).to_pyarrow_table().sort_by("id").equals(first)
    log = {i.base_name for i in s3.filesystem().get_file_info(pafs.FileSelector(_path(uri) + "/_delta_log"))}
    assert {"00000000000000000000.json", "00000000000000000001.json"} <= log


def test_two_commits_of_the_same_version_second_is_rejected(s3: S3Server, s3_prefix: str) -> None:
    """Two writers on the same snapshot: the server's conditional create lets only one write version 1."""
    uri = s3_prefix + "t"
    options = s3.storage_options()
    write_deltalake(uri, pa.table({"w": ["base"]}), storage_options=options)
    writer_a = DeltaTable(uri, storage_options=options)
    writer_b = DeltaTable(uri, storage_options=options)
    no_retry = CommitProperties(max_commit_retries=0)

    write_deltalake(writer_a, pa.table({"w": ["a"]}), mode="append", commit_properties=no_retry)
    with pytest.raises(CommitFailedError):
        write_deltalake(writer_b, pa.table({"w": ["b"]}), mode="append", commit_properties=no_retry)

    fresh = DeltaTable(uri, storage_options=options)
    assert fresh.version() == 1
    assert sorted(fresh.to_pyarrow_table()["w"].to_pylist()) == ["a", "base"], "writer a's commit was kept"


def test_concurrent_append_retries_onto_the_next_version(s3: S3Server, s3_prefix: str) -> None:
    """With retries the losing writer re-reads the log and commits version 2: both appends survive."""
    uri = s3_prefix + "t"
    options = s3.storage_options()
    write_deltalake(uri, pa.table({"w": ["base"]}), storage_options=options)
    writer_a = DeltaTable(uri, storage_options=options)
    writer_b = DeltaTable(uri, storage_options=options)
    write_deltalake(writer_a, pa.table({"w": ["a"]}), mode="append")
    write_deltalake(writer_b, pa.table({"w": ["b"]}), mode="append")

    fresh = DeltaTable(uri, storage_options=options)
    assert fresh.version() == 2
    assert sorted(fresh.to_pyarrow_table()["w"].to_pylist()) == ["a", "b", "base"]
