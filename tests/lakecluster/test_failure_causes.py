"""S3 failures whose words name their cause map to it (no server can be made to say these on
demand: expired session tokens, a skewed clock, a timeout after the connection was made)."""

from __future__ import annotations

import pytest

from lakecluster.config import StorageConfig
from lakecluster.failures import storage_error

KEYS = StorageConfig(s3_access_key_id="AKIAEXAMPLE", s3_secret_access_key="secret")


@pytest.mark.parametrize(("text", "says", "hint"), [
    ("AWS Error UNKNOWN (HTTP status 400) during HeadObject operation: ExpiredToken: The provided token has expired",
     "the S3 credentials have expired", "renew them"),
    ("AWS Error UNKNOWN (HTTP status 403) during GetObject operation: RequestTimeTooSkewed",
     "this machine's clock is off", "synchronise the clock"),
    ("Kernel error -> Generic S3 error: error sending request for url (https://s3.amazonaws.com/b/t): "
     "operation timed out", "was reached but the request failed", "retry"),
    ("AWS Error NETWORK_CONNECTION during HeadObject operation: curlCode: 28, Timeout was reached",
     "cannot connect to the S3 endpoint", "check storage.s3_endpoint"),
])  # fmt: skip
def test_the_words_of_a_failure_name_its_cause(text: str, says: str, hint: str) -> None:
    error = storage_error(OSError(text), "s3://b/t", KEYS)
    assert error is not None
    assert says in str(error) and hint in str(error), str(error)


@pytest.mark.parametrize("call", ["o75.commit", "z:io.delta.tables.DeltaTable.forPath"])
def test_a_jvm_failure_is_named_by_its_exception_not_by_py4js_call(call: str) -> None:
    from lakecluster.delta_txn import first_line

    text = (f"An error occurred while calling {call}.\n: io.delta.exceptions.ConcurrentDeleteDeleteException: "
            "[DELTA_CONCURRENT_DELETE_DELETE] a concurrent transaction deleted the same files\n\tat io.delta...")
    assert first_line(text).startswith("io.delta.exceptions.ConcurrentDeleteDeleteException: ")
