"""The Arrow memory pool of a process that rewrites rows in Spark tasks.

pyarrow's default pool (mimalloc in its wheels) keeps what a task freed for its next
allocations, and a Spark Python worker runs task after task (count, split, write) with different
shapes: on SSB's wide rows a worker held 150 MiB more than with jemalloc, whose pages are handed
back to the system soon after they are freed (``docs/benchmarks.md``, "Production size, bounded
task memory"). Where pyarrow is built without jemalloc (Windows wheels) the default pool stays.
"""

from __future__ import annotations

import functools

import pyarrow as pa

DECAY_MS = 0  # jemalloc hands freed pages back at once: a task's peak is what it holds


@functools.cache
def use_returning_pool() -> str:
    """Make jemalloc the process's default Arrow pool, once; the pool's name."""
    try:
        pool = pa.jemalloc_memory_pool()
        pa.jemalloc_set_decay_ms(DECAY_MS)
    except (NotImplementedError, pa.ArrowNotImplementedError):
        return pa.default_memory_pool().backend_name
    pa.set_memory_pool(pool)
    return pool.backend_name
