"""The Python worker daemon: Spark's zips of a pip-installed pyspark leave the workers' path, so
they import pyspark's bytecode; a Spark distribution's zips stay where Spark put them."""

from __future__ import annotations

from pathlib import Path

import pyspark
import pytest

from lakecluster.python_daemon import without_installed_pyspark_zips


def _installed(site: Path, *, py4j: bool = True) -> tuple[str, str]:
    """A pip-installed pyspark under ``site`` (py4j beside it when ``py4j``); its two zips."""
    lib = site / "pyspark" / "python" / "lib"
    lib.mkdir(parents=True)
    (site / "pyspark" / "__init__.py").write_text("")
    if py4j:
        (site / "py4j").mkdir()
        (site / "py4j" / "__init__.py").write_text("")
    zips = (lib / "pyspark.zip", lib / "py4j-0.10.9.9-src.zip")
    for z in zips:
        z.write_bytes(b"")
    return str(zips[0]), str(zips[1])


def test_the_zips_of_the_installed_pyspark_leave_the_path(tmp_path: Path) -> None:
    site = tmp_path / "site-packages"
    pyspark_zip, py4j_zip = _installed(site)
    path = [pyspark_zip, py4j_zip, "/tmp/user-files", str(site)]
    assert without_installed_pyspark_zips(path) == ["/tmp/user-files", str(site)]


def test_a_site_packages_reached_through_a_symlink_is_the_same(tmp_path: Path) -> None:
    """SPARK_HOME (hence the zips' entries) is a real path; the interpreter's path may not be."""
    site = tmp_path / "real" / "site-packages"
    pyspark_zip, py4j_zip = _installed(site)
    (tmp_path / "venv").symlink_to(tmp_path / "real")
    linked = str(tmp_path / "venv" / "site-packages")
    assert without_installed_pyspark_zips([pyspark_zip, py4j_zip, linked]) == [linked]


def test_a_stray_py4j_directory_is_no_py4j(tmp_path: Path) -> None:
    site = tmp_path / "site-packages"
    pyspark_zip, py4j_zip = _installed(site, py4j=False)
    (site / "py4j").mkdir()  # no __init__.py: a namespace directory, not the package
    assert without_installed_pyspark_zips([pyspark_zip, py4j_zip, str(site)]) == [str(site), py4j_zip]


def test_py4js_zip_moves_to_the_end_when_py4j_is_not_installed_beside_pyspark(tmp_path: Path) -> None:
    site = tmp_path / "site-packages"
    pyspark_zip, py4j_zip = _installed(site, py4j=False)
    path = [pyspark_zip, py4j_zip, str(site)]
    assert without_installed_pyspark_zips(path) == [str(site), py4j_zip]


@pytest.mark.parametrize("layout", ["a Spark distribution", "the package not on the path"])
def test_other_zips_stay_where_spark_put_them(tmp_path: Path, layout: str) -> None:
    site = tmp_path / "site-packages"
    pyspark_zip, py4j_zip = _installed(site)
    if layout == "a Spark distribution":  # $SPARK_HOME/python/lib/*.zip, no package at $SPARK_HOME
        (site / "pyspark" / "__init__.py").unlink()
        path = [pyspark_zip, py4j_zip, str(site)]
    else:
        path = [pyspark_zip, py4j_zip, "/elsewhere"]
    assert without_installed_pyspark_zips(path) == path


@pytest.mark.integration
def test_a_sessions_python_tasks_import_the_installed_pyspark(spark) -> None:  # type: ignore[no-untyped-def]
    def where(_):  # type: ignore[no-untyped-def]
        import sys

        import pyspark as worker_pyspark

        yield worker_pyspark.__file__, [p for p in sys.path if p.endswith(".zip") and "pyspark" in p]

    [(file, zips)] = spark.sparkContext.parallelize([0], 1).mapPartitions(where).collect()
    assert file == pyspark.__file__, "the worker compiled pyspark from Spark's zip"
    assert zips == []
