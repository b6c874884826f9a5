"""The driver's class-data-sharing archive on the machine's real JDK: the first JVM writes it at
exit, the next maps it, and a damaged or abandoned archive never stops a JVM from starting."""

from __future__ import annotations

import logging
import os
import subprocess
import time
import zipfile
from pathlib import Path

import pytest

from lakecluster import class_archive
from lakecluster.class_archive import ABANDONED_AFTER_S, ClassArchive, chosen_by_user, keep_at_exit
from lakecluster.jars import java_tool

# A JVM that runs until its stdin closes, as Spark's driver does (PythonGatewayServer).
WAIT_FOR_EOF = "class Wait { public static void main(String[] a) throws Exception { while (System.in.read() >= 0); } }"


def _compiled(directory: Path) -> str:
    """``WAIT_FOR_EOF`` compiled into a jar in ``directory`` (CDS archives classes from jars only;
    the source launcher would load javac's classes too)."""
    (directory / "Wait.java").write_text(WAIT_FOR_EOF)
    subprocess.run([java_tool("javac"), "-d", str(directory), str(directory / "Wait.java")], check=True, timeout=120)
    jar = directory / "wait.jar"
    with zipfile.ZipFile(jar, "w") as z:
        z.write(directory / "Wait.class", "Wait.class")
    return str(jar)


def _version(options: str, *log: str) -> subprocess.CompletedProcess[str]:
    command = [java_tool("java"), *options.split(), *log, "-version"]
    return subprocess.run(command, capture_output=True, text=True, timeout=120)


def test_the_first_jvm_writes_the_archive_at_exit_and_the_next_maps_it(tmp_path: Path) -> None:
    archive = ClassArchive.of(tmp_path / "cds")
    options, pending = archive.java_options()
    assert pending is not None and "-XX:ArchiveClassesAtExit" in options and archive.path is None
    command = [java_tool("java"), *options.split(), "-cp", _compiled(tmp_path), "Wait"]
    jvm = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    keep_at_exit(archive, pending, jvm)
    time.sleep(1)
    assert jvm.poll() is None, "the JVM waits for its stdin to close"
    class_archive.finish(jvm)  # closes the JVM's stdin, waits for the dump, keeps it
    assert jvm.returncode == 0
    kept = archive.path
    assert kept is not None and kept.name == f"{archive.stem}.{kept.stat().st_size}.jsa" and not pending.exists()
    assert list((tmp_path / "cds").iterdir()) == [kept]

    # A second first start (two processes started before either finished) keeps the archive there.
    second = tmp_path / "cds" / f"{archive.stem}.2-late.part"
    second.write_bytes(b"y" * 1000)
    assert archive.keep(second) == kept and not second.exists()

    options, pending = archive.java_options()
    assert pending is None and f"-XX:SharedArchiveFile={kept}" in options
    started = _version(options, "-Xlog:cds=info")
    assert started.returncode == 0, started.stderr
    assert "Mapped dynamic region" in started.stdout, started.stdout[-2000:]


def test_a_jvm_that_started_before_the_archive_was_kept_is_ended_not_waited_for(  # type: ignore[no-untyped-def]
    tmp_path: Path, caplog
) -> None:
    archive = ClassArchive.of(tmp_path / "cds")
    classes = _compiled(tmp_path)
    # Two drivers start on a machine with no archive: both are told to dump at exit.
    started = []
    for _ in range(2):
        options, pending = archive.java_options()
        assert pending is not None
        jvm = subprocess.Popen([java_tool("java"), *options.split(), "-cp", classes, "Wait"], stdin=subprocess.PIPE,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
        keep_at_exit(archive, pending, jvm)
        started.append((jvm, pending))
    (first, _), (second, second_pending) = started
    class_archive.finish(first)  # the first to exit writes the archive and keeps it
    kept = archive.path
    assert kept is not None
    kept_inode = kept.stat().st_ino

    caplog.set_level(logging.DEBUG, logger="lakecluster.class_archive")
    class_archive.finish(second)  # the second one's dump would be thrown away: it is not written
    assert second.poll() is not None
    assert not [r for r in caplog.records if "writing the JVM class archive" in r.getMessage()]
    assert any("already" in r.getMessage() for r in caplog.records)
    assert not second_pending.exists()
    assert list((tmp_path / "cds").iterdir()) == [kept] and kept.stat().st_ino == kept_inode


def test_finish_ends_only_the_jvm_it_is_given(tmp_path: Path) -> None:
    archive = ClassArchive.of(tmp_path)
    classes = _compiled(tmp_path)
    jvms = [subprocess.Popen([java_tool("java"), "-cp", classes, "Wait"], stdin=subprocess.PIPE) for _ in range(2)]
    try:
        for i, jvm in enumerate(jvms):
            keep_at_exit(archive, tmp_path / f"{i}.part", jvm)
        class_archive.finish(jvms[0])
        assert jvms[0].returncode == 0
        time.sleep(0.5)
        assert jvms[1].poll() is None, "another JVM's dump (the worker's own Spark) is left alone"
        class_archive.finish(jvms[1])
        assert jvms[1].returncode == 0
    finally:
        for jvm in jvms:
            if jvm.poll() is None:
                jvm.kill()
                jvm.wait()
    began = time.monotonic()
    class_archive.finish(jvms[0])  # nothing pending for it any more
    assert time.monotonic() - began < 0.1


def test_a_damaged_archive_costs_a_slower_start_not_a_failure(tmp_path: Path) -> None:
    archive = ClassArchive.of(tmp_path)
    _, pending = archive.java_options()
    assert pending is not None
    dumped = _version(f"-XX:ArchiveClassesAtExit={pending}")
    assert dumped.returncode == 0, dumped.stderr
    kept = archive.keep(pending)
    assert kept is not None and archive.path == kept
    whole = kept.read_bytes()

    # Bytes changed in place: the JVM rejects the archive's header and starts without it.
    kept.write_bytes(os.urandom(len(whole)))
    options, pending = archive.java_options()
    assert pending is None
    started = _version(options)
    assert started.returncode == 0 and "version" in started.stderr, started.stdout + started.stderr

    # Cut short (a JVM would die of SIGBUS mapping it): deleted, and the next JVM dumps anew.
    kept.write_bytes(whole[: len(whole) // 3])
    options, pending = archive.java_options()
    assert pending is not None and not kept.exists() and archive.path is None
    started = _version(options)
    assert started.returncode == 0, started.stdout + started.stderr
    assert archive.keep(pending) == kept == archive.path
    options, _ = archive.java_options()
    assert "Mapped dynamic region" in _version(options, "-Xlog:cds=info").stdout


def test_an_abandoned_dump_is_dropped_and_a_recent_one_left_to_its_writer(tmp_path: Path) -> None:
    archive = ClassArchive.of(tmp_path)
    abandoned = tmp_path / f"{archive.stem}.1-dead.part"
    recent = tmp_path / f"{archive.stem}.2-busy.part"
    for part in (abandoned, recent):
        part.write_bytes(b"x" * 10)
    old = time.time() - ABANDONED_AFTER_S - 60
    os.utime(abandoned, (old, old))
    _, pending = archive.java_options()
    assert not abandoned.exists() and recent.exists()
    assert pending is not None and pending.parent == tmp_path and pending != recent
    assert archive.keep(pending) is None, "nothing written yet: nothing to keep"
    assert archive.path is None


def test_options_that_already_choose_how_classes_are_shared_get_no_archive_of_ours() -> None:
    for options in ("-Xshare:off", "-XX:SharedArchiveFile=/opt/app.jsa", "-Xmx2g -XX:ArchiveClassesAtExit=/tmp/a.jsa"):
        assert chosen_by_user(options), options
    assert not chosen_by_user("-Dlog4j2.configurationFile=x -XX:TieredStopAtLevel=1")


def test_jars_reinstalled_in_place_get_another_archive(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The JVM maps an archive only while the class path's jars keep their sizes and times; a
    reinstall in the same directory (a fresh virtualenv at the same path) must not find the
    stale archive under its name, or every later start would run without sharing."""
    jars = tmp_path / "jars"
    jars.mkdir()
    (jars / "a.jar").write_bytes(b"a" * 10)
    (jars / "b.jar").write_bytes(b"b" * 20)
    (jars / "notes.txt").write_text("not on the class path")
    first = class_archive.class_path_stamp(jars)
    assert class_archive.class_path_stamp(jars) == first
    (jars / "notes.txt").write_text("changed")
    assert class_archive.class_path_stamp(jars) == first, "only the jars count"
    os.utime(jars / "b.jar", ns=(time.time_ns(), time.time_ns() + 10**9))  # same bytes, reinstalled
    assert class_archive.class_path_stamp(jars) != first
    # The driver's archive is named for its pyspark's jars as they are now.
    import pyspark

    assert class_archive.class_path_stamp(Path(pyspark.__file__).parent / "jars") != "?"
    before = ClassArchive.of(tmp_path / "cds").stem
    monkeypatch.setattr(class_archive, "class_path_stamp", lambda jars: "the same jars, reinstalled")
    assert ClassArchive.of(tmp_path / "cds").stem != before
