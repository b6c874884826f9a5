"""Access to the storage a table lives on, for each reader and writer of it.

One :class:`~lakecluster.config.StorageConfig` gives S3 endpoint, region and credentials; keys left
unset fall back to the standard AWS environment variables (``AWS_ENDPOINT_URL``, ``AWS_REGION``,
``AWS_ACCESS_KEY_ID``, ``AWS_SECRET_ACCESS_KEY``, ``AWS_SESSION_TOKEN``). From it this module builds
what each library needs: pyarrow filesystems (sketches, index, leases), delta-rs storage options
(readers), Hadoop S3A settings (Spark) and object_store clients (``obstore``: conditional creates).
Every function takes the settings it applies: there is no process-wide storage setting (a table
handle, ``lakecluster.table.LakeTable``, carries its own).

Commits on S3 are made safe between processes by S3 conditional writes (``If-None-Match: *``):
delta-rs with ``aws_conditional_put=etag``, Spark through lakecluster's LogStore (docs/storage.md).
lakecluster's own put-if-absent files (the adopted layouts) use the same condition through
:func:`create_if_absent`; the stream's lease on S3 replaces its object only if it is still the
version it read (``If-Match``, :func:`put_if`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import threading
import time
import uuid
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast
from urllib.parse import urlsplit

import obstore
import pyarrow.fs as pafs
from obstore.exceptions import AlreadyExistsError, BaseError, NotFoundError, PreconditionError
from obstore.store import S3Store

if TYPE_CHECKING:
    from obstore.store import S3Config, S3Credential

from lakecluster.config import StorageConfig
from lakecluster.uris import bucket_key, is_local, is_s3, normalize

_lock = threading.Lock()
# Filesystems by the settings they were built from: one S3 client per configuration and process.
_cache: dict[StorageConfig, pafs.FileSystem] = {}
# object_store clients by settings and bucket (an S3Store is bound to one bucket).
_stores: dict[tuple[StorageConfig, str], S3Store] = {}
# AWS S3 answers 409 ConditionalRequestConflict to a conditional PUT while a conflicting operation on
# the key is in flight; it asks for a retry, which then gets 200 or 412.
_CONFLICT_TRIES = 3


@dataclass(frozen=True)
class S3Settings:
    """The effective S3 settings: config first, then the AWS environment."""

    endpoint: str | None
    region: str | None
    access_key_id: str | None
    secret_access_key: str | None
    session_token: str | None
    path_style: bool

    @classmethod
    def of(cls, storage: StorageConfig) -> S3Settings:
        env = os.environ
        # Key, secret and token are one credential: all from the config when it names a key or a
        # secret, else all from the environment. Mixed (a config key with the shell's session
        # token) they would be refused by S3.
        if storage.s3_access_key_id or storage.s3_secret_access_key:
            key, secret, token = storage.s3_access_key_id, storage.s3_secret_access_key, storage.s3_session_token
        else:
            key, secret, token = env.get("AWS_ACCESS_KEY_ID"), env.get("AWS_SECRET_ACCESS_KEY"), env.get(
                "AWS_SESSION_TOKEN"
            )
        return cls(
            endpoint=storage.s3_endpoint or env.get("AWS_ENDPOINT_URL_S3") or env.get("AWS_ENDPOINT_URL"),
            region=storage.s3_region or env.get("AWS_REGION") or env.get("AWS_DEFAULT_REGION"),
            access_key_id=key,
            secret_access_key=secret,
            session_token=token,
            path_style=storage.s3_path_style,
        )

    @property
    def uses_http(self) -> bool:
        return bool(self.endpoint) and urlsplit(self.endpoint or "").scheme == "http"


def resolved(storage: StorageConfig) -> StorageConfig:
    """The settings with what this process's AWS environment supplies filled in.

    For work shipped to other hosts (Spark executors): their environment is not this one's, so
    they must get the values the driver resolved. Whatever stays unset (no key anywhere) is left to
    the executor's own AWS default chain, an instance role for example.
    """
    s = S3Settings.of(storage)
    return dataclasses.replace(storage, s3_endpoint=s.endpoint, s3_region=s.region, s3_access_key_id=s.access_key_id,
                               s3_secret_access_key=s.secret_access_key, s3_session_token=s.session_token)  # fmt: skip


def filesystem(uri: str, storage: StorageConfig) -> tuple[pafs.FileSystem, str]:
    """The pyarrow filesystem of a location and the path inside it."""
    uri = normalize(uri)
    if is_local(uri):
        return pafs.LocalFileSystem(), uri
    if not is_s3(uri):
        raise ValueError(f"unsupported storage scheme in {uri!r}: use a local path or s3://bucket/path")
    with _lock:
        fs = _cache.get(storage)
        if fs is None:
            fs = _s3_filesystem(S3Settings.of(storage))
            _cache[storage] = fs
    return fs, bucket_key(uri)


def _s3_filesystem(s: S3Settings) -> pafs.S3FileSystem:
    kwargs: dict[str, object] = {"region": s.region or "us-east-1"}
    if s.endpoint:
        parts = urlsplit(s.endpoint)
        kwargs["endpoint_override"] = parts.netloc or parts.path
        kwargs["scheme"] = parts.scheme or "https"
    if s.access_key_id and s.secret_access_key:
        kwargs.update(access_key=s.access_key_id, secret_key=s.secret_access_key, session_token=s.session_token)
    return pafs.S3FileSystem(**kwargs)  # type: ignore[arg-type]


def delta_options(uri: str, storage: StorageConfig) -> dict[str, str] | None:
    """Storage options for delta-rs (``DeltaTable(uri, storage_options=...)``); None for local paths."""
    if not is_s3(uri):
        return None
    s = S3Settings.of(storage)
    out = {
        # Two processes committing the same version: the second PUT fails instead of replacing the first.
        "aws_conditional_put": "etag",
        "AWS_REGION": s.region or "us-east-1",
        "AWS_VIRTUAL_HOSTED_STYLE_REQUEST": "false" if s.path_style else "true",
    }
    if s.endpoint:
        out["AWS_ENDPOINT_URL"] = s.endpoint
        if s.uses_http:
            out["AWS_ALLOW_HTTP"] = "true"
    if s.access_key_id and s.secret_access_key:
        out["AWS_ACCESS_KEY_ID"] = s.access_key_id
        out["AWS_SECRET_ACCESS_KEY"] = s.secret_access_key
        if s.session_token:
            out["AWS_SESSION_TOKEN"] = s.session_token
    return out


def hadoop_conf(storage: StorageConfig) -> dict[str, str]:
    """Hadoop settings for Spark's S3A filesystem (``s3://`` and ``s3a://`` both go through it)."""
    s = S3Settings.of(storage)
    conf = {
        "fs.s3.impl": "org.apache.hadoop.fs.s3a.S3AFileSystem",
        "fs.s3a.impl": "org.apache.hadoop.fs.s3a.S3AFileSystem",
        "fs.AbstractFileSystem.s3.impl": "org.apache.hadoop.fs.s3a.S3A",
        "fs.s3a.path.style.access": "true" if s.path_style else "false",
        # Conditional creates (If-None-Match: *) make Delta commits from several processes safe.
        "fs.s3a.create.conditional.enabled": "true",
        "fs.s3a.endpoint.region": s.region or "us-east-1",
    }
    if s.endpoint:
        conf["fs.s3a.endpoint"] = s.endpoint
        conf["fs.s3a.connection.ssl.enabled"] = "false" if s.uses_http else "true"
    if s.access_key_id and s.secret_access_key:
        conf["fs.s3a.access.key"] = s.access_key_id
        conf["fs.s3a.secret.key"] = s.secret_access_key
        if s.session_token:
            conf["fs.s3a.session.token"] = s.session_token
            conf["fs.s3a.aws.credentials.provider"] = "org.apache.hadoop.fs.s3a.TemporaryAWSCredentialsProvider"
    return conf


def create_if_absent(uri: str, data: bytes, storage: StorageConfig) -> bool:
    """Write ``data`` as the file at ``uri`` unless one is there already, atomically: of any number
    of processes creating the same name at once, exactly one does.

    * Local disks: the data is written under a temporary name beside it, then hard-linked to
      ``uri``; ``link(2)`` fails when the name exists.
    * S3: one PUT with ``If-None-Match: *`` (:func:`put_if` without an entity tag). The store
      refuses it with 412 when the key exists, however long ago the other writer checked or wrote;
      a store that ignores the header (docs/storage.md, "S3-compatible stores") breaks this.

    Returns:
        True if this call created the file; False if it existed, left as it was. Should a PUT
        whose answer was lost be sent again (by the client's retries or a caller's), the second
        finds the key: False can then mean that the first created it. A caller that must know
        compares the content it finds with its own.

    Raises:
        ValueError: ``uri`` is neither a local path nor ``s3://`` (the schemes lakecluster supports,
            ``lakecluster/uris.py``): no create-if-absent is assumed for a store not tested.
        OSError: the store failed otherwise (refused, unreachable).
    """
    uri = normalize(uri)
    if is_local(uri):
        return _link_if_absent(uri, data)
    return put_if(uri, data, storage, etag=None) is not None


@dataclass(frozen=True)
class Versioned:
    """An object's bytes and the entity tag (ETag) of that version of it."""

    data: bytes
    etag: str


def read_versioned(uri: str, storage: StorageConfig) -> Versioned | None:
    """The object at an ``s3://`` ``uri`` with its entity tag, or None if there is none.

    Raises:
        ValueError: ``uri`` is not ``s3://``.
        OSError: the store failed (refused, unreachable).
    """
    store, key = _store_key(uri, storage)
    try:
        got = obstore.get(store, key)
        data = bytes(got.bytes())
    except (FileNotFoundError, NotFoundError):  # obstore raises the builtin for a 404
        return None
    except BaseError as e:  # obstore's errors are not OSErrors; callers of storage expect one
        raise OSError(f"{uri}: read failed: {e}") from e
    return Versioned(data, str(got.meta.get("e_tag") or ""))


def put_if(uri: str, data: bytes, storage: StorageConfig, *, etag: str | None) -> str | None:
    """Write ``data`` at an ``s3://`` ``uri`` only if the key holds the version ``etag`` names
    (``If-Match``), or, with ``etag=None``, only if the key is absent (``If-None-Match: *``):
    object_store's ``PutMode::Update`` and ``PutMode::Create`` through ``obstore``, reached with the
    options delta-rs gets (:func:`delta_options`). Of two writers holding the same version, one
    replaces it and the other is refused, however far apart their reads and writes were.

    Returns:
        The new version's entity tag ("" if the store sent none), or None when the condition
        failed (the key was there, or held another version, or was gone) and nothing was written.

    Raises:
        ValueError: ``uri`` is not ``s3://``.
        OSError: the store failed otherwise (refused, unreachable).
    """
    store, key = _store_key(uri, storage)
    mode: Any = "create" if etag is None else {"e_tag": etag}
    for attempt in range(1, _CONFLICT_TRIES + 1):
        try:
            result = obstore.put(store, key, data, mode=mode)
            return str(result.get("e_tag") or "")
        except BaseError as e:  # obstore's errors are not OSErrors; callers of storage expect one
            # object_store reports AWS's 409 (a conflicting request in flight) as AlreadyExists too;
            # only the 412 of the condition means it failed. A 409 asks for a retry.
            if not _conflict(e):
                if isinstance(e, (AlreadyExistsError, PreconditionError)):
                    return None
                raise OSError(f"{uri}: conditional PUT ({_condition(etag)}) failed: {e}") from e
            if attempt == _CONFLICT_TRIES:
                raise OSError(f"{uri}: conditional PUT ({_condition(etag)}) kept meeting a conflicting "
                              f"request: {e}") from e  # fmt: skip
            time.sleep(0.1 * attempt)
    raise AssertionError("unreachable: every try returns or raises")


def _condition(etag: str | None) -> str:
    return "If-None-Match: *" if etag is None else f"If-Match: {etag}"


def _store_key(uri: str, storage: StorageConfig) -> tuple[S3Store, str]:
    uri = normalize(uri)
    if not is_s3(uri):
        raise ValueError(f"unsupported storage scheme in {uri!r}: use a local path or s3://bucket/path")
    bucket, _, key = bucket_key(uri).partition("/")
    return _object_store(uri, bucket, storage), key


def _conflict(error: Exception) -> bool:
    """Whether an S3 answer was 409 Conflict (``ConditionalRequestConflict``), not 412."""
    text = str(error)  # "... status 409 Conflict ..." (a key may hold the digits 409: not enough)
    return "409 Conflict" in text or "ConditionalRequestConflict" in text


def _link_if_absent(path: str, data: bytes) -> bool:
    folder, name = os.path.split(path)
    os.makedirs(folder, exist_ok=True)
    tmp = os.path.join(folder, f".{name}.{uuid.uuid4().hex}.tmp")
    try:
        with open(tmp, "wb") as out:  # a failed write (a full disk) leaves no temporary file behind either
            out.write(data)
        os.link(tmp, path)  # fails if the name exists: put-if-absent, atomically
        return True
    except FileExistsError:
        return False
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)


def _object_store(uri: str, bucket: str, storage: StorageConfig) -> S3Store:
    """The object_store client of one bucket, from the options delta-rs gets (one per settings)."""
    with _lock:
        store = _stores.get((storage, bucket))
        if store is None:
            # delta-rs's option names (aws_endpoint, AWS_ALLOW_HTTP, ...) are object_store's own keys.
            options = cast("S3Config", delta_options(uri, storage) or {})
            s = S3Settings.of(storage)
            if s.access_key_id and s.secret_access_key:
                # As a credential provider, not as options: S3Store also reads the AWS environment,
                # and would sign the configured key with the shell's AWS_SESSION_TOKEN (403).
                for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN"):
                    options.pop(name, None)  # type: ignore[misc]
                credential: S3Credential = {"access_key_id": s.access_key_id, "secret_access_key": s.secret_access_key,
                                            "token": s.session_token, "expires_at": None}  # fmt: skip
                store = S3Store(bucket, config=options, credential_provider=lambda: credential)
            else:
                store = S3Store(bucket, config=options)
            _stores[(storage, bucket)] = store
    return store
