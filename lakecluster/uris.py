"""Table and file locations: local paths or URIs (``s3://bucket/path``), in one canonical form.

Local paths are made absolute (a relative path means "relative to where the command ran", and must
mean the same file to Spark, delta-rs and pyarrow); ``s3a://`` is written ``s3://`` (Spark reads
both through the S3A filesystem, delta-rs and pyarrow read ``s3://``).
"""

from __future__ import annotations

import os
from urllib.parse import unquote, urlsplit

S3_SCHEMES = ("s3", "s3a")


def scheme(uri: str) -> str:
    """The URI scheme in lower case; ``""`` for a plain local path."""
    if "://" not in uri:
        return ""
    return urlsplit(uri).scheme.lower()


def is_local(uri: str) -> bool:
    return scheme(uri) in ("", "file")


def is_s3(uri: str) -> bool:
    return scheme(uri) in S3_SCHEMES


def normalize(uri: str) -> str:
    """Absolute local path, or ``scheme://bucket/key`` without a trailing slash."""
    s = scheme(uri)
    if s == "":
        return os.path.abspath(os.path.expanduser(uri))
    if s == "file":
        return os.path.abspath(urlsplit(uri).path)
    if s == "s3a":
        uri = "s3://" + uri.split("://", 1)[1]
    return uri.rstrip("/")


def join(uri: str, *parts: str) -> str:
    base = uri.rstrip("/")
    return "/".join([base, *(p.strip("/") for p in parts)])


def data_file(base: str, add_path: str) -> str:
    """Where the data file of a Delta add path lives under the table root ``base``.

    Add paths are URIs: a partition directory ``s=a b`` is logged as ``s=a%20b``.
    """
    return f"{base}/{unquote(add_path)}"


def bucket_key(uri: str) -> str:
    """``bucket/key`` of an object-store URI (the path form pyarrow's S3FileSystem takes)."""
    return uri.split("://", 1)[1]
