"""The JVM jars lakecluster runs with: named by Maven coordinates, resolved once, cached on disk.

Versions are not written here: they follow the Python packages pinned in ``pyproject.toml``
(delta-spark's jar has the delta-spark package's version, Spark's Kafka source the pyspark
version, hadoop-aws the Hadoop version bundled in pyspark), so the Python and JVM sides cannot
drift apart.

Resolution uses Apache Ivy, the resolver Spark itself uses for ``spark.jars.packages`` (its jar
ships inside pyspark), run once per set of coordinates; the resulting file list is kept under the
cache folder and handed to Spark as ``spark.jars``. Handing Spark the packages instead costs an Ivy
resolution at every JVM start (about 10 s here, measured), which every CLI invocation would pay.

The cache also holds the jars of lakecluster's own Java classes, compiled on first use from the
sources shipped with the package (:func:`compiled_jar`): ``lakecluster-logstore-<digest>.jar`` from
``jvm/`` here (``ConditionalCreateLogStore.java``, the Delta LogStore that makes commits from several
processes safe on local disks and S3, see docs/storage.md; ``ActionLines.java``), and the workload
listener's, from ``workload/jvm/``.
"""

from __future__ import annotations

import contextlib
import fcntl
import glob
import hashlib
import importlib.metadata
import json
import os
import re
import shutil
import subprocess
import tempfile
import zipfile
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from xml.sax.saxutils import quoteattr

from lakecluster import progress
from lakecluster.errors import JarResolutionError
from lakecluster.sizes import human_bytes

SCALA = "2.13"
DEFAULT_CACHE = Path.home() / ".cache" / "lakecluster" / "jars"
LOGSTORE_CLASS = "lakecluster.delta.ConditionalCreateLogStore"
_JVM_SOURCES = Path(__file__).parent / "jvm"

# Transitive dependencies pyspark already ships (same or newer versions): a second copy on the
# classpath would shadow Spark's (delta-spark pulls parquet 1.16 and jackson 2.13, Spark has
# parquet 1.17 and jackson 2.21).
SPARK_PROVIDED = (
    "org.apache.parquet:*",
    "org.apache.hadoop:hadoop-client-api",
    "org.apache.hadoop:hadoop-client-runtime",
    "org.slf4j:*",
    "org.apache.logging.log4j:*",
    "com.fasterxml.jackson.core:*",
    "org.roaringbitmap:*",
    "com.github.luben:zstd-jni",
    "org.xerial.snappy:snappy-java",
    "at.yawk.lz4:lz4-java",
    "org.lz4:lz4-java",
    "io.airlift:aircompressor",
    "commons-pool:commons-pool",
    "com.google.code.findbugs:jsr305",
    "org.scala-lang:*",
    "org.scala-lang.modules:*",
    "org.apache.spark:spark-tags_2.13",
    "org.apache.avro:*",  # spark-avro's Avro, and its xz
    "org.tukaani:xz",
)


@dataclass(frozen=True)
class Coordinate:
    group: str
    artifact: str
    version: str

    def __str__(self) -> str:
        return f"{self.group}:{self.artifact}:{self.version}"


def cache_dir(configured: str | None = None) -> Path:
    """Where resolved jars live: ``spark.jars_cache`` or ``~/.cache/lakecluster/jars``."""
    return Path(configured).expanduser() if configured else DEFAULT_CACHE


def spark_version() -> str:
    import pyspark

    return pyspark.__version__


def delta_version() -> str:
    try:
        return importlib.metadata.version("delta-spark")
    except importlib.metadata.PackageNotFoundError:
        raise JarResolutionError("the delta-spark package is not installed (pip install lakecluster)") from None


def hadoop_version() -> str:
    """The Hadoop version bundled in pyspark (hadoop-aws must match it exactly)."""
    import pyspark

    jars = glob.glob(os.path.join(os.path.dirname(pyspark.__file__), "jars", "hadoop-client-api-*.jar"))
    match = re.search(r"hadoop-client-api-(.+)\.jar$", jars[0]) if jars else None
    if match is None:
        raise JarResolutionError("cannot tell pyspark's Hadoop version: no hadoop-client-api jar in pyspark/jars")
    return match.group(1)


def spark_coordinates(*, kafka: bool = True, s3: bool = False) -> list[Coordinate]:
    """The packages a lakecluster SparkSession needs: Delta always, Kafka (and spark-avro, which
    decodes Avro records) and S3 on demand."""
    spark_minor = ".".join(spark_version().split(".")[:2])
    out = [Coordinate("io.delta", f"delta-spark_{spark_minor}_{SCALA}", delta_version())]
    if kafka:
        out.append(Coordinate("org.apache.spark", f"spark-sql-kafka-0-10_{SCALA}", spark_version()))
        out.append(Coordinate("org.apache.spark", f"spark-avro_{SCALA}", spark_version()))
    if s3:
        out.append(Coordinate("org.apache.hadoop", "hadoop-aws", hadoop_version()))
    return out


def java_tool(name: str) -> str:
    """``java`` or ``javac`` from JAVA_HOME, else from PATH."""
    home = os.environ.get("JAVA_HOME")
    if home and os.access(os.path.join(home, "bin", name), os.X_OK):
        return os.path.join(home, "bin", name)
    found = shutil.which(name)
    if found is None:
        what = "a Java 17 JDK" if name == "javac" else "Java 17"
        raise JarResolutionError(f"'{name}' not found: install {what} (Debian: openjdk-17-jdk-headless) "
                                 "or set JAVA_HOME")  # fmt: skip
    return found


def _ivy_jar() -> str:
    import pyspark

    found = sorted(glob.glob(os.path.join(os.path.dirname(pyspark.__file__), "jars", "ivy-*.jar")))
    if not found:
        raise JarResolutionError("Apache Ivy is missing from pyspark/jars; reinstall pyspark")
    return found[-1]


@contextlib.contextmanager
def cache_lock(directory: Path) -> Iterator[None]:
    """Serialise the processes that fill one cache folder (a test suite starts several)."""
    directory.mkdir(parents=True, exist_ok=True)
    with open(directory / ".lock", "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _ivy_module(coordinates: Sequence[Coordinate], excludes: Sequence[str]) -> str:
    deps = "".join(
        f"    <dependency org={quoteattr(c.group)} name={quoteattr(c.artifact)} rev={quoteattr(c.version)}"
        ' conf="default->default"/>\n'
        for c in coordinates
    )
    rules = []
    for ex in excludes:
        group, _, artifact = ex.partition(":")
        module = f" module={quoteattr(artifact)}" if artifact not in ("", "*") else ""
        rules.append(f"    <exclude org={quoteattr(group)}{module}/>\n")
    return (
        '<ivy-module version="2.0">\n  <info organisation="lakecluster" module="runtime"/>\n'
        f"  <dependencies>\n{deps}{''.join(rules)}  </dependencies>\n</ivy-module>\n"
    )


def resolve(
    coordinates: Sequence[Coordinate],
    *,
    cache_dir: Path = DEFAULT_CACHE,
    excludes: Sequence[str] = (),
    timeout_s: float = 900,
) -> list[Path]:
    """Local jar files of ``coordinates`` and their dependencies, resolved on first use.

    The first call for a set of coordinates runs Ivy (Maven Central); later calls read the list
    kept in ``cache_dir`` and touch no network. A list whose files have gone is resolved again.
    """
    key = hashlib.sha256(json.dumps([sorted(map(str, coordinates)), sorted(excludes)]).encode()).hexdigest()[:16]
    listing = cache_dir / f"resolved-{key}.json"
    found = _cached(listing)
    if found is not None:
        return found
    with cache_lock(cache_dir):
        found = _cached(listing)
        if found is not None:
            return found
        target = cache_dir / f"lib-{key}"
        with tempfile.TemporaryDirectory(prefix="lakecluster-ivy-") as tmp:
            module = Path(tmp) / "ivy.xml"
            module.write_text(_ivy_module(coordinates, excludes))
            command = [
                java_tool("java"), "-jar", _ivy_jar(), "-ivy", str(module), "-m2compatible",
                "-cache", str(cache_dir / "ivy-cache"), "-confs", "default", "-sync",
                "-retrieve", str(target) + "/[organisation]__[artifact]-[revision](-[classifier]).[ext]",
            ]  # fmt: skip
            ivy_cache = cache_dir / "ivy-cache"
            before = _bytes_under(ivy_cache)
            try:
                with progress.phase(f"fetching {len(coordinates)} jar(s) and their dependencies from Maven Central",
                                    lambda: f"{human_bytes(_bytes_under(ivy_cache) - before)} so far"):  # fmt: skip
                    done = subprocess.run(command, capture_output=True, text=True, timeout=timeout_s)
            except subprocess.TimeoutExpired:
                names = ", ".join(map(str, coordinates))
                raise JarResolutionError(f"resolving {names} took over {timeout_s:.0f}s") from None
        if done.returncode != 0:
            tail = "\n".join((done.stdout + done.stderr).strip().splitlines()[-15:])
            raise JarResolutionError(
                f"could not resolve {', '.join(map(str, coordinates))} from Maven Central (is it reachable?):\n{tail}"
            )
        jars = sorted(str(p) for p in target.glob("*.jar"))
        listing.write_text(json.dumps({"coordinates": [str(c) for c in coordinates], "jars": jars}, indent=1))
        return [Path(j) for j in jars]


def _bytes_under(directory: Path) -> int:
    """The bytes of the files under ``directory`` (0 when it does not exist yet)."""
    return sum(p.stat().st_size for p in directory.rglob("*") if p.is_file())


def _cached(listing: Path) -> list[Path] | None:
    try:
        jars = [Path(j) for j in json.loads(listing.read_text())["jars"]]
    except (OSError, ValueError, KeyError):
        return None
    return jars if jars and all(j.is_file() for j in jars) else None


def logstore_jar(classpath: Sequence[Path], *, cache_dir: Path = DEFAULT_CACHE) -> Path:
    """The core's Java classes (``jvm/*.java``: the ``ConditionalCreateLogStore``, ``ActionLines``),
    compiled against ``classpath`` (Delta's jars) and Spark's."""
    return compiled_jar("lakecluster-logstore", _JVM_SOURCES, classpath, cache_dir=cache_dir)


def compiled_jar(name: str, sources_dir: Path, classpath: Sequence[Path], *, cache_dir: Path = DEFAULT_CACHE) -> Path:
    """The ``*.java`` files of ``sources_dir`` compiled with javac against ``classpath`` and
    pyspark's jars into ``<cache_dir>/<name>-<digest>.jar``: built once per version of the sources
    (their digest names the jar), by one process at a time."""
    sources = sorted(sources_dir.glob("*.java"))
    if not sources:
        raise JarResolutionError(f"no Java sources in {sources_dir}: the package is installed incompletely")
    digest = hashlib.sha256(b"".join(p.name.encode() + b"\0" + p.read_bytes() for p in sources)).hexdigest()
    jar = cache_dir / f"{name}-{digest[:16]}.jar"
    if jar.is_file():
        return jar
    with cache_lock(cache_dir):
        if jar.is_file():
            return jar
        import pyspark

        spark_jars = os.path.join(os.path.dirname(pyspark.__file__), "jars", "*")
        with tempfile.TemporaryDirectory(prefix="lakecluster-javac-") as tmp:
            done = subprocess.run(
                [java_tool("javac"), "--release", "17", "-nowarn", "-d", tmp,
                 "-cp", os.pathsep.join([*map(str, classpath), spark_jars]), *map(str, sources)],
                capture_output=True, text=True,
            )  # fmt: skip
            if done.returncode != 0:
                names = ", ".join(p.name for p in sources)
                raise JarResolutionError(f"compiling {names} failed:\n{done.stderr[-2000:]}")
            partial = jar.with_suffix(".partial")
            with zipfile.ZipFile(partial, "w", zipfile.ZIP_DEFLATED) as z:
                for path in sorted(Path(tmp).rglob("*.class")):
                    z.write(path, path.relative_to(tmp).as_posix())
            partial.replace(jar)
    return jar


def spark_jars(*, s3: bool, cache_dir: Path = DEFAULT_CACHE) -> list[Path]:
    """Every jar a lakecluster SparkSession is started with (resolving on first use)."""
    jars = resolve(spark_coordinates(s3=s3), cache_dir=cache_dir, excludes=SPARK_PROVIDED)
    return [*jars, logstore_jar(jars, cache_dir=cache_dir)]
