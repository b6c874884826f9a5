"""pyarrow's memory pool in lakecluster's processes: jemalloc where this pyarrow has it.

pyarrow's default pool on Linux is mimalloc. The compactor's start and the index rebuild of a
million-file table allocate gigabytes of fresh Arrow buffers (the checkpoint's columns, then the
index a column at a time); under mimalloc the rebuild spent 2.4-2.7 s of system CPU time on page
faults (most of them transparent huge pages, on a kernel in ``madvise`` mode), under jemalloc
0.6 s, with a peak 250-300 MiB lower (docs/benchmarks.md, "Scale, read by hand"). A pool the user
chose (``ARROW_DEFAULT_MEMORY_POOL``) is kept, and so is any pool other than mimalloc.
"""

from __future__ import annotations

import os
import threading

import pyarrow as pa

_LOCK = threading.Lock()
_chosen = False


def use_preferred_pool() -> str:
    """Make jemalloc the process's default Arrow pool (once; buffers already allocated keep their
    own pool, so switching is safe at any time); returns the pool's backend name."""
    global _chosen
    with _LOCK:
        if not _chosen:
            _chosen = True
            if "ARROW_DEFAULT_MEMORY_POOL" not in os.environ and pa.default_memory_pool().backend_name == "mimalloc":
                try:
                    pa.set_memory_pool(pa.jemalloc_memory_pool())
                except NotImplementedError:  # a pyarrow built without jemalloc (Windows wheels)
                    pass
    return pa.default_memory_pool().backend_name
