"""Storage settings: config keys first, then the AWS environment, resolved once for remote executors."""

from __future__ import annotations

import pytest

from lakecluster import storage
from lakecluster.config import StorageConfig
from tests.at_once import at_once

AWS = ("AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3", "AWS_REGION", "AWS_DEFAULT_REGION", "AWS_ACCESS_KEY_ID",
       "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN")  # fmt: skip


@pytest.fixture
def no_aws_env(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    for name in AWS:
        monkeypatch.delenv(name, raising=False)
    return monkeypatch


def test_resolved_carries_the_environment_to_hosts_that_lack_it(no_aws_env: pytest.MonkeyPatch) -> None:
    no_aws_env.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:9000")
    no_aws_env.setenv("AWS_REGION", "eu-west-1")
    no_aws_env.setenv("AWS_ACCESS_KEY_ID", "env-key")
    no_aws_env.setenv("AWS_SECRET_ACCESS_KEY", "env-secret")
    no_aws_env.setenv("AWS_SESSION_TOKEN", "env-token")
    shipped = storage.resolved(StorageConfig(s3_access_key_id="config-key", s3_secret_access_key="config-secret",
                                             s3_path_style=False))  # fmt: skip
    # An executor evaluates the shipped settings without any AWS variable and gets the same thing.
    for name in AWS:
        no_aws_env.delenv(name, raising=False)
    # The config's key comes with the config's secret and (absent) token, never the shell's token.
    assert shipped == StorageConfig(
        s3_endpoint="http://127.0.0.1:9000", s3_region="eu-west-1", s3_access_key_id="config-key",
        s3_secret_access_key="config-secret", s3_session_token=None, s3_path_style=False,
    )  # fmt: skip
    assert storage.delta_options("s3://b/t", shipped)["AWS_ENDPOINT_URL"] == "http://127.0.0.1:9000"  # type: ignore[index]


def test_credentials_come_whole_from_the_environment_when_the_config_has_none(
    no_aws_env: pytest.MonkeyPatch,
) -> None:
    no_aws_env.setenv("AWS_ACCESS_KEY_ID", "env-key")
    no_aws_env.setenv("AWS_SECRET_ACCESS_KEY", "env-secret")
    no_aws_env.setenv("AWS_SESSION_TOKEN", "env-token")
    shipped = storage.resolved(StorageConfig(s3_session_token="config-token-without-a-key"))
    assert (shipped.s3_access_key_id, shipped.s3_secret_access_key, shipped.s3_session_token) == (
        "env-key", "env-secret", "env-token",
    )  # fmt: skip
    conf = storage.hadoop_conf(shipped)
    assert (conf["fs.s3a.access.key"], conf["fs.s3a.session.token"]) == ("env-key", "env-token")


def test_nothing_set_anywhere_is_left_to_the_executors_own_chain(no_aws_env: pytest.MonkeyPatch) -> None:
    """With no key in config or environment (an instance role), no empty credentials are shipped."""
    shipped = storage.resolved(StorageConfig())
    assert shipped == StorageConfig()
    assert "fs.s3a.access.key" not in storage.hadoop_conf(shipped)


def test_create_if_absent_on_a_local_disk(tmp_path) -> None:  # type: ignore[no-untyped-def]
    path = tmp_path / "new" / "folder" / "x.json"
    assert storage.create_if_absent(str(path), b"first", StorageConfig())
    assert not storage.create_if_absent(f"file://{path}", b"second", StorageConfig())
    assert path.read_bytes() == b"first"
    assert sorted(p.name for p in path.parent.iterdir()) == ["x.json"], "no temporary file left"


def test_create_if_absent_refuses_a_scheme_it_has_no_atomic_create_for() -> None:
    with pytest.raises(ValueError, match="unsupported storage scheme"):
        storage.create_if_absent("gs://bucket/x.json", b"x", StorageConfig())


@pytest.mark.integration
def test_create_if_absent_on_s3_is_decided_by_the_conditional_put(s3, s3_prefix: str) -> None:  # type: ignore[no-untyped-def]
    """One PUT with ``If-None-Match: *``: a key that exists is refused whoever wrote it and whenever,
    and of writers creating one key at once exactly one does."""
    settings = StorageConfig(**s3.storage_settings())
    fs, base = s3.filesystem(), s3_prefix.removeprefix("s3://").rstrip("/")

    def content(name: str) -> bytes:
        with fs.open_input_stream(f"{base}/{name}") as f:
            return f.read()

    assert storage.create_if_absent(f"{s3_prefix}a/x.json", b"first", settings)
    assert not storage.create_if_absent(f"{s3_prefix}a/x.json", b"second", settings)
    assert content("a/x.json") == b"first"
    # An object another client wrote (a plain PUT through pyarrow) is refused the same way.
    with fs.open_output_stream(f"{base}/b.json") as out:
        out.write(b"pyarrow's")
    assert not storage.create_if_absent(f"{s3_prefix}b.json", b"mine", settings)
    assert content("b.json") == b"pyarrow's"

    def race(name: str, writers: int = 4) -> list[int]:
        created = at_once(lambda i: storage.create_if_absent(f"{s3_prefix}{name}", f"writer {i}".encode(), settings),
                          writers)  # fmt: skip
        return [i for i, won in enumerate(created) if won is True]

    for round_ in range(5):
        won = race(f"race-{round_}")
        assert len(won) == 1 and content(f"race-{round_}") == f"writer {won[0]}".encode()


def test_put_if_replaces_only_the_version_it_names_on_s3(s3, s3_prefix: str) -> None:  # type: ignore[no-untyped-def]
    """``If-Match``: of two writers that read the same version, the first replaces it and the second
    is refused; a version that is gone (the key deleted) is refused too."""
    settings = StorageConfig(**s3.storage_settings())
    uri = f"{s3_prefix}lease"
    assert storage.read_versioned(uri, settings) is None
    first = storage.put_if(uri, b"one", settings, etag=None)
    assert first and storage.put_if(uri, b"again", settings, etag=None) is None
    read = storage.read_versioned(uri, settings)
    assert read == storage.Versioned(b"one", first)
    second = storage.put_if(uri, b"two", settings, etag=read.etag)
    assert second and second != first
    assert storage.put_if(uri, b"stale", settings, etag=read.etag) is None
    assert storage.read_versioned(uri, settings) == storage.Versioned(b"two", second)
    s3.filesystem().delete_file(uri.removeprefix("s3://"))
    assert storage.put_if(uri, b"three", settings, etag=second) is None
    assert storage.read_versioned(uri, settings) is None
    with pytest.raises(ValueError, match="unsupported storage scheme"):
        storage.put_if("gs://b/k", b"x", settings, etag=None)


def test_conditional_writes_use_the_configured_key_whole_beside_a_shell_session_token(
    s3, s3_prefix: str, monkeypatch: pytest.MonkeyPatch
) -> None:  # type: ignore[no-untyped-def]
    """The config names a key and a secret; the shell holds another identity's AWS_SESSION_TOKEN.
    object_store's S3Store reads the environment too, and signed the configured key with that token:
    the store refused every conditional write (403), so neither a lease nor an adoption could be
    written."""
    settings = StorageConfig(**s3.storage_settings())
    monkeypatch.setenv("AWS_SESSION_TOKEN", "another-identitys-token")
    monkeypatch.setattr(storage, "_stores", {})  # clients built from now on, with this environment
    assert storage.put_if(f"{s3_prefix}lease", b"one", settings, etag=None)
    assert storage.create_if_absent(f"{s3_prefix}adoption.json", b"{}", settings)
    assert storage.read_versioned(f"{s3_prefix}lease", settings).data == b"one"  # type: ignore[union-attr]
