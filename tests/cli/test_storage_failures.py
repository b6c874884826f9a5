"""S3 failures as a user meets them: one line naming the cause and what to set, no Rust log lines.

Each test runs the command line against the real S3 server (SeaweedFS) with one thing wrong. The
commands fail before Spark would start (the subprocesses cannot start it), so no JVM runs. No AWS
setting of the machine reaches them, and the instance metadata service they may ask is a closed
local port (no test depends on the network).
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from lakecluster.config import StorageConfig
from lakecluster.failures import storage_error
from tests.cli.conftest import NO_JAVA_HOME
from tests.conftest import lakecluster_cmd
from tests.services.ports import free_port
from tests.services.s3 import READER_KEY, READER_SECRET, S3Server

pytestmark = pytest.mark.integration

TRACE = "Traceback (most recent call last)"


def run_without_aws_env(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """``python -m lakecluster ARGS`` with no AWS credentials, region or endpoint from this machine."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "LAKECLUSTER_", "RUST_LOG"))}
    env.update(JAVA_HOME=NO_JAVA_HOME, AWS_CONFIG_FILE="/nonexistent", AWS_SHARED_CREDENTIALS_FILE="/nonexistent",
               AWS_EC2_METADATA_SERVICE_ENDPOINT=f"http://127.0.0.1:{free_port()}")  # fmt: skip
    return subprocess.run(lakecluster_cmd(*args), cwd=cwd, capture_output=True, text=True, env=env, timeout=120)


def settings(endpoint: str, key: str | None, secret: str | None, table: str) -> list[str]:
    out = ["--set", f"storage.s3_endpoint={endpoint}", "--set", f"table.path={table}", "--set", "metrics.port=0"]
    if key is not None and secret is not None:
        out += ["--set", f"storage.s3_access_key_id={key}", "--set", f"storage.s3_secret_access_key={secret}"]
    return out


def assert_one_line(proc: subprocess.CompletedProcess[str], line: str) -> None:
    assert proc.returncode == 1, proc.stderr
    assert proc.stderr.splitlines()[-1] == line, proc.stderr
    assert TRACE not in proc.stderr and "WARN" not in proc.stderr, proc.stderr


def test_unknown_access_key_is_named(s3: S3Server, s3_prefix: str, tmp_path: Path) -> None:
    table = f"{s3_prefix}t"
    proc = run_without_aws_env(*settings(s3.endpoint, "no-such-key", s3.secret_key, table), "status", cwd=tmp_path)
    assert_one_line(proc, f"lakecluster: StorageError: {table}: {s3.endpoint} does not know the access key ID "
                          "'no-such-key' (S3 refused HeadObject); check storage.s3_access_key_id (or "
                          "AWS_ACCESS_KEY_ID)")  # fmt: skip


def test_wrong_secret_is_named(s3: S3Server, s3_prefix: str, tmp_path: Path) -> None:
    table = f"{s3_prefix}t"
    proc = run_without_aws_env(*settings(s3.endpoint, s3.access_key, "not-the-secret", table), "explain", "--where",
                               "d_year = 1995", cwd=tmp_path)  # fmt: skip
    assert_one_line(proc, f"lakecluster: StorageError: {table}: the secret access key does not match the access key "
                          f"ID '{s3.access_key}' (S3 refused HeadObject); check storage.s3_secret_access_key (or "
                          "AWS_SECRET_ACCESS_KEY)")  # fmt: skip
    assert "not-the-secret" not in proc.stderr


def test_missing_credentials_are_named(s3: S3Server, s3_prefix: str, tmp_path: Path) -> None:
    """The server refuses anonymous requests; with no key configured the refusal cannot tell a
    missing key from a role without the permission, and the line says both."""
    table = f"{s3_prefix}t"
    proc = run_without_aws_env(*settings(s3.endpoint, None, None, table), "status", cwd=tmp_path)
    assert_one_line(proc, f"lakecluster: StorageError: {table}: S3 refused access to bucket 'lakecluster-test', and "
                          "no access key is configured (S3 refused HeadObject); set storage.s3_access_key_id and "
                          "storage.s3_secret_access_key (or AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY); if the "
                          "process runs with a role or profile instead, grant it read, write, list and delete on "
                          "the table's prefix")  # fmt: skip


def test_missing_credentials_without_an_endpoint_keep_the_sdks_warnings_off_the_terminal(tmp_path: Path) -> None:
    """No credentials, no endpoint, no instance role: the S3 clients' retries and warnings stay off
    the terminal, and the one line says what failed (here, with no network, AWS S3 cannot be
    reached; `tune` reads the log as every other command does, through lakecluster's own reader)."""
    proc = run_without_aws_env("--set", "table.path=s3://lakecluster-test/t", "--set", "metrics.port=0", "tune",
                               cwd=tmp_path)  # fmt: skip
    assert_one_line(proc, "lakecluster: StorageError: s3://lakecluster-test/t: cannot connect to the S3 endpoint AWS "
                          "S3; check storage.s3_endpoint (or AWS_ENDPOINT_URL) and that the server is running")
    assert len(proc.stderr.splitlines()) == 1, proc.stderr


def test_endpoint_down_is_named(s3: S3Server, tmp_path: Path) -> None:
    endpoint = f"http://127.0.0.1:{free_port()}"
    table = "s3://lakecluster-test/t"
    proc = run_without_aws_env(*settings(endpoint, s3.access_key, s3.secret_key, table), "status", cwd=tmp_path)
    assert_one_line(proc, f"lakecluster: StorageError: {table}: cannot connect to the S3 endpoint {endpoint}; check "
                          "storage.s3_endpoint (or AWS_ENDPOINT_URL) and that the server is running")  # fmt: skip


@pytest.mark.parametrize("command", ["status", "stream"])
def test_missing_bucket_is_named(s3: S3Server, tmp_path: Path, command: str) -> None:
    table = "s3://no-such-bucket/t"
    proc = run_without_aws_env(*settings(s3.endpoint, s3.access_key, s3.secret_key, table), command, cwd=tmp_path)
    assert_one_line(proc, f"lakecluster: StorageError: {table}: bucket 'no-such-bucket' does not exist at "
                          f"{s3.endpoint}; create the bucket, or fix the bucket name in table.path")  # fmt: skip


def test_key_without_write_permission_is_named(s3: S3Server, s3_prefix: str, tmp_path: Path) -> None:
    table = f"{s3_prefix}t"
    proc = run_without_aws_env(*settings(s3.endpoint, READER_KEY, READER_SECRET, table), "stream", cwd=tmp_path)
    assert_one_line(proc, f"lakecluster: StorageError: {table}: access key '{READER_KEY}' is not allowed to do this "
                          "in bucket 'lakecluster-test' (S3 refused PutObject); grant it read, write, list and delete "
                          "on the table's prefix, or use a key that has them")  # fmt: skip


def test_debug_shows_the_trace_then_the_same_line(s3: S3Server, s3_prefix: str, tmp_path: Path) -> None:
    table = f"{s3_prefix}t"
    args = [*settings(s3.endpoint, "no-such-key", s3.secret_key, table), "status"]
    quiet = run_without_aws_env(*args, cwd=tmp_path)
    debug = run_without_aws_env("--debug", *args, cwd=tmp_path)
    assert debug.returncode == 1
    assert debug.stderr.startswith(TRACE) and debug.stderr.endswith(quiet.stderr)


def test_a_bucket_in_another_region_is_named() -> None:
    """SeaweedFS takes any region, so AWS's answer to a request signed for the wrong region (its
    own words, from a real refusal) stands in for the server here."""
    refusal = OSError("When getting information for key 't/_delta_log/_last_checkpoint' in bucket 'lake': AWS Error "
                      "UNKNOWN (HTTP status 400) during HeadObject operation: AuthorizationHeaderMalformed: The "
                      "authorization header is malformed; the region 'us-east-1' is wrong; expecting "
                      "'eu-west-3'")  # fmt: skip
    found = storage_error(refusal, "s3://lake/t", StorageConfig(s3_region="us-east-1", s3_access_key_id="k",
                                                               s3_secret_access_key="s"))  # fmt: skip
    assert str(found) == ("s3://lake/t: bucket 'lake' is not in region 'us-east-1'; set storage.s3_region (or "
                          "AWS_REGION) to the bucket's region")  # fmt: skip
