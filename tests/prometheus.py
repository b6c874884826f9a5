"""A real Prometheus server (Debian's `prometheus` package) scraping one target every second.

`.ci/run` installs the package; the fixture fails, not skips, when the binary is missing, so a
machine without it cannot pass the metrics tests by not running them.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
import urllib.parse
import urllib.request
from collections.abc import Mapping, Sequence
from pathlib import Path

from tests.services.ports import free_port
from tests.services.process import spawn


class Prometheus:
    def __init__(self, url: str, target_port: int, process: subprocess.Popen[bytes]) -> None:
        self.url = url
        self.target_port = target_port  # the port a lakecluster process must serve /metrics on
        self.process = process

    def query(self, expr: str) -> dict[tuple[tuple[str, str], ...], float]:
        """Instant query: {sorted labels without __name__/instance/job: value}."""
        url = f"{self.url}/api/v1/query?" + urllib.parse.urlencode({"query": expr})
        with urllib.request.urlopen(url, timeout=10) as r:
            body = json.load(r)
        assert body["status"] == "success", body
        out = {}
        for sample in body["data"]["result"]:
            labels = tuple(sorted((k, v) for k, v in sample["metric"].items()
                                  if k not in ("__name__", "instance", "job")))  # fmt: skip
            out[labels] = float(sample["value"][1])
        return out

    def alerts(self) -> list[dict]:
        """Active alerts (pending and firing) as Prometheus's API lists them."""
        with urllib.request.urlopen(f"{self.url}/api/v1/alerts", timeout=10) as r:
            body = json.load(r)
        assert body["status"] == "success", body
        return list(body["data"]["alerts"])

    def value(self, expr: str) -> float | None:
        """The single value of ``expr``, or None while Prometheus has none."""
        result = self.query(expr)
        assert len(result) <= 1, result
        return next(iter(result.values()), None)

    def stop(self) -> None:
        self.process.terminate()
        self.process.wait(timeout=30)


def rules_held_for(source: Path, workdir: Path, hold: str) -> Path:
    """A copy of the rule file ``source`` in ``workdir`` with every alert's ``for`` set to ``hold``,
    so that a live test sees "fires" in seconds (the real durations have promtool unit tests)."""
    import yaml

    rules = yaml.safe_load(source.read_text())
    for group in rules["groups"]:
        for rule in group["rules"]:
            if "for" in rule:
                rule["for"] = hold
    held = workdir / source.name
    held.write_text(yaml.safe_dump(rules))
    return held


def start_prometheus(workdir: Path, timeout_s: float = 60, config_text: str | None = None,
                     args: Sequence[str] = (), env: Mapping[str, str] | None = None) -> Prometheus:  # fmt: skip
    """A Prometheus scraping 127.0.0.1:<target_port> every second as job ``lakecluster``, or
    configured by ``config_text`` (then ``target_port`` is 0); ``args`` are further command-line
    flags, ``env`` variables added to its environment."""
    binary = shutil.which("prometheus")
    if binary is None:
        raise RuntimeError("the prometheus binary is not on PATH; install Debian's `prometheus` (.ci/run does)")
    target_port, port = (free_port() if config_text is None else 0), free_port()
    config = workdir / "prometheus.yml"
    config.write_text(config_text or (
        "global:\n  scrape_interval: 1s\n  scrape_timeout: 900ms\n"
        "scrape_configs:\n  - job_name: lakecluster\n"
        f"    static_configs:\n      - targets: ['127.0.0.1:{target_port}']\n"
    ))  # fmt: skip
    # Started as the other test servers are: it dies with this process (a killed test run leaves no
    # Prometheus behind).
    process = spawn([binary, f"--config.file={config}", f"--storage.tsdb.path={workdir / 'data'}",
                     f"--web.listen-address=127.0.0.1:{port}", *args],
                    log=workdir / "prometheus.log", cwd=workdir, env={**os.environ, **(env or {})})  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"prometheus exited with {process.returncode}: see {workdir / 'prometheus.log'}")
        try:
            with urllib.request.urlopen(f"{url}/-/ready", timeout=2) as r:
                if r.status == 200:
                    return Prometheus(url, target_port, process)
        except OSError:
            time.sleep(0.2)
    process.kill()
    raise RuntimeError(f"prometheus not ready after {timeout_s}s")
