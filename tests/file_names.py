"""What lakecluster's file names say, read one name at a time: the reference the vectorised
readers (``lakecluster.table.live_files``) are checked against."""

from __future__ import annotations

import re

_RUN_FILE = re.compile(r"part-g(\d+)-([0-9a-f]+)-")


def file_run(path: str) -> tuple[int, str | None]:
    """(generation, run id) from a data file name; generation 0 when not written by compaction."""
    m = _RUN_FILE.search(path.rsplit("/", 1)[-1])
    return (int(m.group(1)), m.group(2)) if m else (0, None)
