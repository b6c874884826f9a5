"""A Spark standalone cluster on 127.0.0.1 for tests: one master and N workers.

Started with ``bin/spark-class`` from the pyspark wheel (it has no ``sbin/start-*.sh`` scripts),
every port picked free, each process under ``setpriv --pdeathsig`` (tests/services/process.py).
Ready when the master's JSON status lists every worker ALIVE.
"""

from __future__ import annotations

import json
import os
import sys
import time
import urllib.request
from pathlib import Path

import pyspark

from tests.services import process
from tests.services.ports import free_ports


class SparkClusterError(RuntimeError):
    """The standalone cluster could not be started."""


class SparkCluster:
    def __init__(self, workdir: Path, *, workers: int = 2, cores: int = 1, memory: str = "1200m") -> None:
        self.workdir = workdir
        self.workers = workers
        self.cores = cores
        self.memory = memory
        self.port, self.ui_port, *self.worker_ui_ports = free_ports(2 + workers)
        self._processes: list[tuple[str, object]] = []

    @property
    def master_url(self) -> str:
        return f"spark://127.0.0.1:{self.port}"

    def _env(self) -> dict[str, str]:
        # No AWS_* either: executors must get storage access from the application, not their host.
        env = {k: v for k, v in os.environ.items() if not k.startswith(("LAKECLUSTER_", "SPARK_", "AWS_"))}
        env["SPARK_HOME"] = str(Path(pyspark.__file__).parent)
        env["PYSPARK_PYTHON"] = sys.executable  # executors' Python workers import lakecluster
        env["SPARK_LOCAL_IP"] = "127.0.0.1"
        env["SPARK_DAEMON_JAVA_OPTS"] = process.TEST_JVM
        return env

    def start(self, timeout_s: float = 120) -> SparkCluster:
        spark_class = str(Path(pyspark.__file__).parent / "bin" / "spark-class")
        master = process.spawn(
            [spark_class, "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
             "--port", str(self.port), "--webui-port", str(self.ui_port)],
            log=self.workdir / "master.log", cwd=self.workdir, env=self._env(),
        )  # fmt: skip
        self._processes.append(("master", master))
        for i, ui_port in enumerate(self.worker_ui_ports):
            work = self.workdir / f"worker-{i}"
            work.mkdir(parents=True, exist_ok=True)
            worker = process.spawn(
                [spark_class, "org.apache.spark.deploy.worker.Worker", "--host", "127.0.0.1",
                 "--cores", str(self.cores), "--memory", self.memory, "--webui-port", str(ui_port),
                 "--work-dir", str(work), self.master_url],
                log=self.workdir / f"worker-{i}.log", cwd=self.workdir, env=self._env(),
            )  # fmt: skip
            self._processes.append((f"worker-{i}", worker))
        self._wait_ready(timeout_s)
        return self

    def status(self) -> dict:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.ui_port}/json/", timeout=5) as response:
            return json.loads(response.read())

    def _wait_ready(self, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        last = "master not answering"
        while time.monotonic() < deadline:
            for name, p in self._processes:
                if p.poll() is not None:  # type: ignore[attr-defined]
                    raise SparkClusterError(f"{name} exited while starting\n{self.log_tail(name)}")
            try:
                alive = [w for w in self.status().get("workers", []) if w.get("state") == "ALIVE"]
                if len(alive) == self.workers:
                    return
                last = f"{len(alive)} of {self.workers} workers alive"
            except OSError as e:
                last = str(e)
            except ValueError:  # JSON: the UI serves the master's HTML page there until /json/ is attached
                last = "master's status page not ready"
            time.sleep(0.5)
        raise SparkClusterError(f"cluster not ready after {timeout_s:g}s ({last})\n{self.log_tail('master')}")

    def log_tail(self, name: str) -> str:
        return process.log_tail(self.workdir / f"{name}.log")

    def stop(self) -> None:
        for _, p in reversed(self._processes):
            process.terminate(p, 20)  # type: ignore[arg-type]
        self._processes.clear()
