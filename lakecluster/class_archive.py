"""The driver JVM's class-data-sharing archive (the JDK's dynamic CDS): later starts map the classes
Spark, Delta and their libraries loaded instead of reading, parsing and verifying them again.

A driver JVM loads some twenty thousand classes before its first query; on 2 cores that is about
half of the time before a SparkSession is ready. The first driver that finds no archive records
its classes when it exits (``-XX:ArchiveClassesAtExit``) into a file of its own; the Python process
waits for that exit and moves the finished file into place; every later driver with the same JDK
and jars maps it (``-XX:SharedArchiveFile``). The JVM checks the archive against its own build and
class path and runs without it when they differ (``-Xshare:auto``, the default), so a stale or
damaged archive costs a slower start, never a failure (a truncated one it cannot survive: the
file's name says its size, see :class:`ClassArchive`). A dump interrupted by a kill leaves a
``.part`` file that a later start deletes. Drivers that started before any archive existed (the
first minute on a new machine, several at once) would each dump one at exit; once another process
has kept one, their dumps are worth nothing and they are ended instead of waited for.
"""

from __future__ import annotations

import atexit
import hashlib
import logging
import os
import subprocess
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from lakecluster.jars import cache_dir, java_tool

log = logging.getLogger(__name__)

# A dump takes seconds; a .part file older than this belongs to a JVM that died while dumping.
ABANDONED_AFTER_S = 900
# How long an exiting process waits for its JVM to write the archive (once per JDK and Spark).
DUMP_WAIT_S = 120
# How long a JVM whose dump is not needed gets for its shutdown hooks (temporary directories)
# before it is killed; it is killed at once when its dump has begun (the hooks have run).
HOOKS_WAIT_S = 3
# The JVM reports every class it cannot archive (generated ones, old bytecode) as a warning.
_QUIET = "-Xlog:cds*=off"


def chosen_by_user(java_options: str) -> bool:
    """Whether JVM options already say how classes are shared (``-Xshare``, an archive of the
    user's own): lakecluster then adds none of its own."""
    return any(flag in java_options for flag in ("-Xshare", "SharedArchiveFile", "ArchiveClassesAtExit"))


def class_path_stamp(jars: Path) -> str:
    """Name, size and modification time of every jar in ``jars`` (the driver's class path).

    The JVM maps an archive only while each jar of the class path it was dumped with has the
    same size and modification time, and otherwise runs without it, silently. A reinstall in the
    same place (a new virtualenv, ``pip install --force-reinstall``) changes the times: the
    archive's name must change with them, or the stale one would be kept and every start would
    go without sharing.
    """
    try:
        entries = sorted(os.scandir(jars), key=lambda e: e.name)
    except OSError:
        return "?"
    stamps = []
    for entry in entries:
        if entry.name.endswith(".jar"):
            try:
                st = entry.stat()
            except OSError:
                continue
            stamps.append(f"{entry.name}:{st.st_size}:{st.st_mtime_ns}")
    return hashlib.sha256("\n".join(stamps).encode()).hexdigest()


@dataclass(frozen=True)
class ClassArchive:
    """The archive of one JDK and one pyspark installation: ``<directory>/<stem>.<bytes>.jsa``.

    The name carries the size the dump had when its JVM finished: the JVM crashes (SIGBUS) on a
    truncated archive instead of ignoring it, so a file of another size is deleted, never mapped.
    """

    directory: Path
    stem: str

    @classmethod
    def of(cls, directory: Path) -> ClassArchive:
        """The archive for the JDK Spark will start and pyspark's jars (the driver's class path),
        in ``directory``. Classes from ``spark.jars`` (Delta, hadoop-aws, ...) are archived too
        and the JVM checks each against the jar it loads it from, so one archive serves every jar
        set."""
        import pyspark

        java = os.path.realpath(java_tool("java"))  # the java Spark's launcher runs
        try:
            built = str(os.stat(java).st_mtime_ns)
        except OSError:
            built = "?"
        home = os.path.dirname(pyspark.__file__)
        identity = "\n".join([java, built, pyspark.__version__, home, class_path_stamp(Path(home) / "jars")])
        return cls(directory, f"driver-{hashlib.sha256(identity.encode()).hexdigest()[:16]}")

    @classmethod
    def in_jars_cache(cls, configured: str | None) -> ClassArchive:
        """:meth:`of` in the jars cache (``spark.jars_cache``; None: the default), where drivers
        look for it."""
        return cls.of(cache_dir(configured) / "cds")

    @property
    def path(self) -> Path | None:
        """The finished archive, if there is one whole (a damaged one is deleted)."""
        for found in self.directory.glob(f"{self.stem}.*.jsa"):
            size = found.name.removeprefix(f"{self.stem}.").removesuffix(".jsa")
            try:
                if size.isdigit() and found.stat().st_size == int(size):
                    return found
                found.unlink()
            except OSError:  # another process replaced or deleted it meanwhile
                pass
        return None

    def java_options(self) -> tuple[str, Path | None]:
        """The JVM options of a driver about to start, and the file it dumps its classes into at
        exit (None when it maps the finished archive)."""
        self._drop_abandoned()
        finished = self.path
        if finished is not None:
            return f"-XX:SharedArchiveFile={finished} {_QUIET}", None
        self.directory.mkdir(parents=True, exist_ok=True)
        pending = self.directory / f"{self.stem}.{os.getpid()}-{uuid.uuid4().hex[:8]}.part"
        return f"-XX:ArchiveClassesAtExit={pending} {_QUIET}", pending

    def keep(self, pending: Path) -> Path | None:
        """Name a dump whose JVM exited normally as the archive (a rename: a starting JVM sees
        the whole file or none); returns it. When another process kept one first, the dump is
        deleted and that one returned."""
        try:
            size = pending.stat().st_size
        except OSError:
            return None
        if size == 0:
            return None
        if (first := self.path) is not None:
            pending.unlink(missing_ok=True)
            return first
        kept = self.directory / f"{self.stem}.{size}.jsa"
        os.replace(pending, kept)
        return kept

    def _drop_abandoned(self) -> None:
        now = time.time()
        for part in self.directory.glob(f"{self.stem}.*.part"):
            try:
                if now - part.stat().st_mtime > ABANDONED_AFTER_S:
                    part.unlink()
            except OSError:  # another process dropped or kept it first
                pass


@dataclass(frozen=True)
class _Dump:
    archive: ClassArchive
    pending: Path
    jvm: subprocess.Popen[bytes]
    before_exit: Callable[[], None] | None


_dumps: list[_Dump] = []


def keep_at_exit(archive: ClassArchive, pending: Path, jvm: subprocess.Popen[bytes],
                 before_exit: Callable[[], None] | None = None) -> None:  # fmt: skip
    """Have :func:`finish` (called at interpreter exit, or by a caller that leaves without
    finalising) keep ``jvm``'s dump into ``pending`` as the archive. ``before_exit`` runs before
    the JVM is told to exit (Spark's context stops, whose threads would report the exit as errors).
    """
    if not _dumps:
        atexit.register(finish)
    _dumps.append(_Dump(archive, pending, jvm, before_exit))


def finish(jvm: subprocess.Popen[bytes] | None = None) -> None:
    """End the JVM (each one, without ``jvm``) that still has to write its archive: it exits when
    its stdin closes; wait for the dump and keep it. Without a pending dump, returns at once."""
    for dump in [d for d in _dumps if jvm is None or d.jvm is jvm]:
        _dumps.remove(dump)
        if dump.jvm.poll() is None:
            needed = dump.archive.path is None  # None: no other process has kept one meanwhile
            if needed:
                log.info("writing the JVM class archive (once per JDK and Spark) in %s", dump.archive.directory)
            else:
                log.debug("a class archive is already in %s: not waiting for this JVM's", dump.archive.directory)
            if dump.before_exit is not None:
                try:
                    dump.before_exit()
                except Exception as error:  # a JVM already going: its exit is all there is to wait for
                    log.debug("before the JVM's exit: %s", error)
            try:
                if dump.jvm.stdin is not None:
                    dump.jvm.stdin.close()
                if not needed:
                    _end_without_dump(dump)
                    continue
                dump.jvm.wait(timeout=DUMP_WAIT_S)
            except (OSError, subprocess.TimeoutExpired):
                continue  # the JVM finishes alone; a later start drops the unfinished file
        if dump.jvm.returncode == 0:
            dump.archive.keep(dump.pending)


def _end_without_dump(dump: _Dump) -> None:
    """Let an exiting JVM run its shutdown hooks, then kill it before (or while) it writes a dump
    nobody needs; delete what it wrote."""
    deadline = time.monotonic() + HOOKS_WAIT_S
    while dump.jvm.poll() is None and time.monotonic() < deadline and not dump.pending.exists():
        time.sleep(0.05)
    if dump.jvm.poll() is None:
        dump.jvm.kill()
        dump.jvm.wait()
    dump.pending.unlink(missing_ok=True)
