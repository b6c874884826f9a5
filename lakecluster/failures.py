"""What an object-store failure means: the error a library raised, turned into its cause and a hint.

pyarrow, delta-rs and the AWS SDKs report S3 failures in their own words ("AWS Error ACCESS_DENIED
during HeadObject operation: No response body", "Kernel error -> Generic S3 error"), and some do
not say the cause at all: S3 answers a HEAD request without a body, so a wrong key, a wrong secret
and a missing permission all read "ACCESS_DENIED". :func:`storage_error` recognises the causes
from the text and, where the text cannot tell them apart, asks the store once more with a listing
(whose answer has a body naming the cause). The command line reports the result as one line.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

from lakecluster import storage
from lakecluster.config import StorageConfig
from lakecluster.errors import StorageError
from lakecluster.uris import is_s3, normalize

# What each cause reads like in pyarrow's, delta-rs's and the AWS SDKs' words, most specific first:
# an error's text is matched against them in this order.
_CAUSES = {
    "key": ["INVALID_ACCESS_KEY_ID", "InvalidAccessKeyId", "access key ID you provided does not exist"],
    "secret": ["SIGNATURE_DOES_NOT_MATCH", "SignatureDoesNotMatch", "signature we calculated does not"],
    "region": ["AuthorizationHeaderMalformed", "PermanentRedirect", "IncorrectEndpoint", r"region '[\w-]+' is wrong",
               "301 Moved Permanently"],
    "expired": ["ExpiredToken", "EXPIRED_TOKEN", "token included in the request is expired", "TokenRefreshRequired"],
    "clock": ["RequestTimeTooSkewed", "REQUEST_TIME_TOO_SKEWED"],
    "bucket": ["NoSuchBucket", "NO_SUCH_BUCKET", "Bucket '[^']*' not found", "bucket does not exist"],
    "no-credentials": ["loading credentials", r"169\.254\.169\.254", "IMDS", "Unable to locate credentials",
                       "No credentials"],
    "endpoint": ["NETWORK_CONNECTION", "Could not connect", "Couldn't connect", "Connection refused",
                 "Failed to connect", "Couldn't resolve host", "dns error", "tcp connect error"],
    # Reached once, then lost or slow: a network or server problem of the moment, not a setting.
    "transient": ["error sending request", "Connection reset", "timed out", "Timeout was reached",
                  "SlowDown", "ServiceUnavailable", "503 Service Unavailable", "InternalError"],
    "denied": ["ACCESS_DENIED", "AccessDenied", "Access Denied", "403 Forbidden"],
}
_PATTERNS = {name: re.compile("|".join(texts)) for name, texts in _CAUSES.items()}
_S3_TEXT = re.compile(r"AWS Error|S3 error|Kernel error|ObjectStore|object_store|bucket '|s3://", re.IGNORECASE)
_OPERATION = re.compile(r"during (\w+) operation|Error performing (GET|PUT|HEAD|POST|DELETE)")


def storage_error(error: BaseException, uri: str | None, settings: StorageConfig | None) -> StorageError | None:
    """The cause of an S3 failure of the table at ``uri`` as a :class:`StorageError`; None when
    ``error`` (or what it was raised from) is no object-store failure lakecluster recognises."""
    if uri is None or settings is None or not is_s3(uri):
        return None
    text = "\n".join(_texts(error))
    if not _S3_TEXT.search(text):
        return None
    cause = _cause_of(text)
    if cause is None:
        return None
    s3 = storage.S3Settings.of(settings)
    if cause == "denied":
        cause = _cause_of_denial(uri, settings, s3)
    return _explain(cause, normalize(uri), s3, _operation(text))


def _texts(error: BaseException) -> Iterator[str]:
    """The error's text and that of the errors it was raised from or during."""
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        yield str(current)
        current = current.__cause__ or current.__context__


def _cause_of(text: str) -> str | None:
    for name, pattern in _PATTERNS.items():
        if pattern.search(text):
            return name
    return None


def _cause_of_denial(uri: str, settings: StorageConfig, s3: storage.S3Settings) -> str:
    """Why S3 said "access denied": a listing of the table's prefix names a wrong key or secret
    (a HEAD request's refusal has no body to say so); keys that list fine lack a permission."""
    if not (s3.access_key_id and s3.secret_access_key):
        # Credentials may still have come from elsewhere (an instance role, web identity, a
        # profile): the refusal alone cannot tell a missing key from a role without permission.
        return "no-key-configured"
    import pyarrow.fs as pafs

    fs, path = storage.filesystem(uri, settings)
    try:
        fs.get_file_info(pafs.FileSelector(path, allow_not_found=True, recursive=False))
    except OSError as e:
        found = _cause_of(str(e))
        if found in ("key", "secret", "region", "endpoint"):
            return found
    return "permission"


def _operation(text: str) -> str:
    match = _OPERATION.search(text)
    if match is None:
        return ""
    return match.group(1) or match.group(2)


def _explain(cause: str, uri: str, s3: storage.S3Settings, operation: str) -> StorageError:
    endpoint = s3.endpoint or "AWS S3"
    bucket = uri.split("://", 1)[1].split("/", 1)[0]
    refusals = ("permission", "key", "secret", "no-key-configured")
    detail = f"S3 refused {operation}" if operation and cause in refusals else ""
    if cause == "key":
        return StorageError(uri, f"{endpoint} does not know the access key ID '{s3.access_key_id}'",
                            "check storage.s3_access_key_id (or AWS_ACCESS_KEY_ID)", detail)  # fmt: skip
    if cause == "secret":
        return StorageError(uri, f"the secret access key does not match the access key ID '{s3.access_key_id}'",
                            "check storage.s3_secret_access_key (or AWS_SECRET_ACCESS_KEY)", detail)  # fmt: skip
    if cause == "region":
        return StorageError(uri, f"bucket '{bucket}' is not in region '{s3.region or 'us-east-1'}'",
                            "set storage.s3_region (or AWS_REGION) to the bucket's region")  # fmt: skip
    if cause == "bucket":
        return StorageError(uri, f"bucket '{bucket}' does not exist at {endpoint}",
                            "create the bucket, or fix the bucket name in table.path")  # fmt: skip
    if cause == "no-credentials":
        return StorageError(uri, "no S3 credentials were found (none in the configuration or the environment, "
                            "and no instance role answered)",
                            "set storage.s3_access_key_id and storage.s3_secret_access_key (or AWS_ACCESS_KEY_ID "
                            "and AWS_SECRET_ACCESS_KEY)")  # fmt: skip
    if cause == "no-key-configured":
        return StorageError(uri, f"S3 refused access to bucket '{bucket}', and no access key is configured",
                            "set storage.s3_access_key_id and storage.s3_secret_access_key (or AWS_ACCESS_KEY_ID "
                            "and AWS_SECRET_ACCESS_KEY); if the process runs with a role or profile instead, grant "
                            "it read, write, list and delete on the table's prefix", detail)  # fmt: skip
    if cause == "expired":
        return StorageError(uri, "the S3 credentials have expired (a temporary session token)",
                            "renew them (storage.s3_session_token or AWS_SESSION_TOKEN with its key), or use "
                            "credentials that refresh themselves (a role)")  # fmt: skip
    if cause == "clock":
        return StorageError(uri, "S3 refused the request because this machine's clock is off",
                            "synchronise the clock (NTP); S3 accepts requests within 15 minutes of its time")
    if cause == "endpoint":
        return StorageError(uri, f"cannot connect to the S3 endpoint {endpoint}",
                            "check storage.s3_endpoint (or AWS_ENDPOINT_URL) and that the server is running")
    if cause == "transient":
        return StorageError(uri, f"the S3 endpoint {endpoint} was reached but the request failed (timeout, reset "
                            "or overload)", "retry; if it persists, check the network and the endpoint's health")
    return StorageError(uri, f"access key '{s3.access_key_id}' is not allowed to do this in bucket '{bucket}'",
                        "grant it read, write, list and delete on the table's prefix, or use a key that has them",
                        detail)  # fmt: skip
