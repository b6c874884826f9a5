"""A real Alertmanager (Debian's ``prometheus-alertmanager``) on 127.0.0.1 that posts every alert to
a webhook receiver in the test process.

`.ci/install` installs the package; a missing binary fails the fixture, it does not skip: a machine
without it cannot pass the alerting tests by not running them. Clustering is off (no gossip port
shared with other test runs on the machine).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import threading
import time
import urllib.request
from collections.abc import Callable, Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import yaml

from tests.services import process
from tests.services.ports import free_port

BINARY = "prometheus-alertmanager"


class AlertmanagerError(RuntimeError):
    """Alertmanager could not be started or reached."""


class WebhookReceiver:
    """An HTTP server on 127.0.0.1 keeping every JSON body posted to it (Alertmanager's webhook
    notifications), with a wait for the first one that matches."""

    def __init__(self) -> None:
        self.notifications: list[dict[str, Any]] = []
        self._changed = threading.Condition()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                with receiver._changed:
                    receiver.notifications.append(json.loads(body))
                    receiver._changed.notify_all()
                self.send_response(200)
                self.end_headers()

            def log_message(self, format: str, *args: object) -> None:
                pass  # no line on stderr per notification

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}/alerts"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True, name="webhook-receiver")
        self._thread.start()

    def alerts(self) -> list[dict[str, Any]]:
        """Every alert of every notification so far, in the order received."""
        with self._changed:
            return [alert for n in self.notifications for alert in n["alerts"]]

    def wait_for(self, match: Callable[[dict[str, Any]], bool], timeout_s: float) -> dict[str, Any]:
        """The first alert (of any notification) that ``match`` accepts, waiting up to ``timeout_s``."""
        deadline = time.monotonic() + timeout_s
        with self._changed:
            while True:
                found = [a for n in self.notifications for a in n["alerts"] if match(a)]
                if found:
                    return found[0]
                left = deadline - time.monotonic()
                if left <= 0:
                    names = [(a["labels"].get("alertname"), a["status"])
                             for n in self.notifications for a in n["alerts"]]  # fmt: skip
                    raise AssertionError(f"no matching alert reached the webhook within {timeout_s:.0f}s; got {names}")
                self._changed.wait(left)

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()


class Alertmanager:
    """One ``prometheus-alertmanager`` process, its configuration, data and log under ``workdir``."""

    def __init__(self, workdir: Path, config: Mapping[str, Any]) -> None:
        self.workdir = workdir
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.address = f"127.0.0.1:{self.port}"  # what a Prometheus's alerting target names
        self.log_file = workdir / "alertmanager.log"
        self.config_file = workdir / "alertmanager.yml"
        workdir.mkdir(parents=True, exist_ok=True)
        self.config_file.write_text(yaml.safe_dump(dict(config)))
        self._process: subprocess.Popen[bytes] | None = None

    def start(self, timeout_s: float = 60) -> Alertmanager:
        binary = shutil.which(BINARY)
        if binary is None:
            raise AlertmanagerError(f"{BINARY} is not on PATH; install Debian's prometheus-alertmanager "
                                    "(.ci/install does)")  # fmt: skip
        command = [binary, f"--config.file={self.config_file}", f"--storage.path={self.workdir / 'data'}",
                   f"--web.listen-address={self.address}", "--cluster.listen-address="]  # fmt: skip
        self._process = process.spawn(command, log=self.log_file, cwd=self.workdir)

        def probe() -> str | None:
            try:
                with urllib.request.urlopen(f"{self.url}/-/ready", timeout=2) as r:
                    return None if r.status == 200 else f"/-/ready answered {r.status}"
            except OSError as e:
                return str(e)

        try:
            process.wait_ready(self._process, self.port, probe, name=f"Alertmanager on {self.address}",
                               timeout_s=timeout_s, error=AlertmanagerError,
                               logs=lambda: process.log_tail(self.log_file))  # fmt: skip
        except BaseException:
            process.kill(self._process)
            raise
        return self

    def stop(self, timeout_s: float = 30) -> None:
        if self._process is not None:
            process.terminate(self._process, timeout_s)
