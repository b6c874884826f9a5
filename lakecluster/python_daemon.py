"""The Python worker daemon of lakecluster's Spark sessions (``spark.python.daemon.module``):
pyspark's own daemon, run with pyspark imported from the installed package.

Spark puts ``$SPARK_HOME/python/lib/pyspark.zip`` and py4j's zip first on every Python worker's
path. Python keeps no bytecode for modules imported from a zip, so each daemon, and each worker it
forks, compiles the pyspark modules it imports from source (0.4-0.5 CPU seconds a process), and a
worker re-reads the zips' directories at every task (pyspark's ``setup_spark_files`` invalidates
the import caches: 55 ms a task). When the zips are those of a pip-installed pyspark
(``SPARK_HOME`` is the package's own directory), they hold the same code as the installed package,
and they leave the path (py4j's stays, at the end, if py4j is not installed beside pyspark). A Spark
distribution's zips (``SPARK_HOME`` elsewhere) stay where they are: a pyspark installed beside it
may be another version.

Nothing is imported before the path is settled; pyspark's daemon then runs as it would under
``python -m pyspark.daemon`` (it reads the worker module from ``sys.argv`` itself).
"""

from __future__ import annotations

import os
import sys
from importlib.machinery import PathFinder


def installed_pyspark_zips(path: list[str]) -> list[str]:
    """The entries of ``path`` that are zips of a pip-installed pyspark whose package is importable
    from ``path`` itself: ``<site>/pyspark/python/lib/*.zip`` with ``<site>`` on ``path``."""
    entries = {os.path.realpath(p) for p in path if p}  # SPARK_HOME is a real path, sys.path may not be
    found = []
    for entry in path:
        lib = os.path.dirname(os.path.realpath(entry))
        package = os.path.dirname(os.path.dirname(lib))
        if (entry.endswith(".zip") and lib.endswith(os.path.join("pyspark", "python", "lib"))
                and os.path.isfile(os.path.join(package, "__init__.py"))
                and os.path.dirname(package) in entries):  # fmt: skip
            found.append(entry)
    return found


def without_installed_pyspark_zips(path: list[str]) -> list[str]:
    """``path`` without the zips of the installed pyspark; a zip holding a package found nowhere
    else on ``path`` as a regular package (py4j when only pyspark is installed) moves to the end
    instead."""
    zips = installed_pyspark_zips(path)
    kept = [p for p in path if p not in zips]
    for entry in zips:
        name = os.path.basename(entry).split("-")[0].removesuffix(".zip")  # pyspark, py4j
        spec = PathFinder.find_spec(name, kept)
        if spec is None or spec.origin is None:  # none, or a stray namespace directory
            kept.append(entry)
    return kept


def main() -> None:
    kept = without_installed_pyspark_zips(sys.path)
    for entry in set(sys.path) - set(kept):
        sys.path_importer_cache.pop(entry, None)  # else every task's cache reset re-reads the zip
    sys.path[:] = kept
    from pyspark import daemon

    daemon.manager()


if __name__ == "__main__":
    main()
