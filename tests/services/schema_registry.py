"""A real schema registry on 127.0.0.1 for tests and benchmarks: Apicurio Registry, serving the
Confluent-compatible API (``/apis/ccompat/v6``) that Kafka's Avro producers and consumers speak.

Apicurio's jars come from Maven Central, fetched once per machine by Maven (its BOM has to be
imported, which Ivy cannot do) into ``~/.cache/lakecluster/jars/apicurio-registry-<version>/``,
and the server runs with ``java -cp``, which Quarkus runs in its dev mode: it builds the application
at every start, writing into the folder and into a temporary directory it cleans up at exit. So
every registry has a temporary directory of its own (one registry's exit once deleted another's
files while it started, and the other exited with code 1), and starts hold the folder's lock, one
at a time; the first start also fetches Quarkus's build-time jars into the folder's Maven
repository. A start takes about 7 s. Schemas live in the server's memory: a restarted registry is
empty.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from lakecluster.jars import DEFAULT_CACHE, cache_lock, java_tool
from tests.services import process
from tests.services.ports import free_port

VERSION = "2.1.5.Final"
API = "/apis/ccompat/v6"
# The registry's build imports the BOM of apicurio-registry; JSON Schema support needs an artifact
# Maven Central does not serve (everit's json-schema), and no test needs it.
WRAPPER_POM = f"""<?xml version="1.0" encoding="UTF-8"?>
<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>lakecluster.tests</groupId>
  <artifactId>schema-registry</artifactId>
  <version>1</version>
  <packaging>pom</packaging>
  <dependencyManagement>
    <dependencies>
      <dependency>
        <groupId>io.apicurio</groupId><artifactId>apicurio-registry</artifactId><version>{VERSION}</version>
        <type>pom</type><scope>import</scope>
      </dependency>
    </dependencies>
  </dependencyManagement>
  <dependencies>
    <dependency>
      <groupId>io.apicurio</groupId><artifactId>apicurio-registry-app</artifactId><version>{VERSION}</version>
      <exclusions>
        <exclusion><groupId>com.github.everit-org.json-schema</groupId><artifactId>*</artifactId></exclusion>
      </exclusions>
    </dependency>
  </dependencies>
</project>
"""
JVM_OPTIONS = ("-Xmx768m", "-Djava.awt.headless=true", "-XX:-UsePerfData", *process.TEST_JVM.split())


class SchemaRegistryError(RuntimeError):
    """The registry could not be fetched, started or reached."""


def registry_home(cache_dir: Path = DEFAULT_CACHE) -> Path:
    """The folder with the registry's jars (``lib/``) and Maven repository (``m2/``), filled on
    first use."""
    home = cache_dir / f"apicurio-registry-{VERSION}"
    if (home / "lib.complete").is_file():
        return home
    with cache_lock(cache_dir):
        if (home / "lib.complete").is_file():
            return home
        shutil.rmtree(home / "lib", ignore_errors=True)
        home.mkdir(parents=True, exist_ok=True)
        (home / "pom.xml").write_text(WRAPPER_POM)
        done = subprocess.run(
            ["mvn", "-q", "-B", f"-Dmaven.repo.local={home / 'm2'}", "dependency:copy-dependencies",
             f"-DoutputDirectory={home / 'lib'}"],
            cwd=home, capture_output=True, text=True,
        )  # fmt: skip
        if done.returncode != 0:
            raise SchemaRegistryError(f"fetching Apicurio Registry {VERSION} failed:\n{done.stdout[-3000:]}")
        (home / "lib.complete").write_text("")
    return home


class SchemaRegistry:
    """One Apicurio Registry whose log lives under ``workdir``; ``url`` is the Confluent-compatible
    API's root, the value of ``source.kafka.schema_registry.url``."""

    def __init__(self, workdir: Path, *, cache_dir: Path = DEFAULT_CACHE) -> None:
        self.workdir = workdir
        self.cache_dir = cache_dir
        self.home = registry_home(cache_dir)
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}{API}"
        self.log_file = workdir / "registry.log"
        self._process: subprocess.Popen[bytes] | None = None

    @classmethod
    def attached(cls, workdir: Path, port: int, *, cache_dir: Path = DEFAULT_CACHE) -> SchemaRegistry:
        """The registry another process started on ``port`` (``stop`` leaves it running)."""
        registry = cls(workdir, cache_dir=cache_dir)
        registry.port = port
        registry.url = f"http://127.0.0.1:{port}{API}"
        try:
            registry.get("/subjects")
        except OSError as error:
            raise SchemaRegistryError(f"the run's registry on {port} does not answer ({error})\n"
                                      f"{process.log_tail(registry.log_file)}") from None  # fmt: skip
        return registry

    def start(self, timeout_s: float = 180, *, owner: int | None = None) -> SchemaRegistry:
        """Starts the registry; it dies with this process, or with the process ``owner``."""
        tmp = self.workdir / "tmp"
        tmp.mkdir(exist_ok=True)
        command = [
            java_tool("java"), *JVM_OPTIONS, f"-Djava.io.tmpdir={tmp}",
            f"-Dquarkus.http.port={self.port}", "-Dquarkus.http.host=127.0.0.1",
            "-Dquarkus.console.enabled=false", "-Dplatform.quarkus.native.builder-image=none",
            f"-Dmaven.repo.local={self.home / 'm2'}", "-cp", str(self.home / "lib" / "*"),
            "io.apicurio.registry.RegistryQuarkusMain",
        ]  # fmt: skip
        with cache_lock(self.cache_dir):
            self._start(command, timeout_s, owner)
        return self

    def _start(self, command: list[str], timeout_s: float, owner: int | None) -> None:
        self._process = process.spawn(command, log=self.log_file, cwd=self.workdir, owner=owner)

        def probe() -> str | None:
            try:
                self.get("/subjects")
            except (OSError, SchemaRegistryError) as error:
                return str(error)
            return None

        try:
            process.wait_ready(self._process, self.port, probe, name="schema registry", timeout_s=timeout_s,
                               error=SchemaRegistryError, logs=lambda: process.log_tail(self.log_file))  # fmt: skip
        except BaseException:
            self.stop()
            raise

    def stop(self, timeout_s: float = 30) -> None:
        if self._process is not None:
            process.terminate(self._process, timeout_s)
            self._process = None

    # -- the Confluent-compatible API -------------------------------------------------------------

    def get(self, path: str) -> Any:
        with urllib.request.urlopen(self.url + path, timeout=10) as response:
            return json.load(response)

    def register(self, subject: str, schema: dict[str, Any] | str) -> int:
        """Registers ``schema`` (Avro) under ``subject``; returns its id (the same id for a schema
        registered before)."""
        text = schema if isinstance(schema, str) else json.dumps(schema)
        request = urllib.request.Request(
            f"{self.url}/subjects/{subject}/versions", data=json.dumps({"schema": text}).encode(),
            headers={"Content-Type": "application/vnd.schemaregistry.v1+json"}, method="POST",
        )  # fmt: skip
        try:
            with urllib.request.urlopen(request, timeout=10) as response:
                return int(json.load(response)["id"])
        except urllib.error.HTTPError as error:
            raise SchemaRegistryError(f"registering under {subject}: {error.code} {error.read()[:500]!r}") from None
