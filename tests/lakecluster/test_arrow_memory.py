"""lakecluster's processes allocate Arrow buffers from jemalloc unless the user chose a pool."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pytest

from lakecluster import arrow_memory
from lakecluster.index.spec import IndexSpec
from lakecluster.index.sync import rebuild
from lakecluster.table import LakeTable
from tests.index.tables import append, batch


def _has(name: str) -> bool:
    try:
        getattr(pa, f"{name}_memory_pool")()
    except NotImplementedError:
        return False
    return True


@pytest.fixture
def mimalloc_process(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """A process whose default pool is pyarrow's mimalloc and that has chosen nothing yet."""
    if not (_has("mimalloc") and _has("jemalloc")):
        pytest.skip("this pyarrow lacks mimalloc or jemalloc")
    before = pa.default_memory_pool()
    monkeypatch.delenv("ARROW_DEFAULT_MEMORY_POOL", raising=False)
    monkeypatch.setattr(arrow_memory, "_chosen", False)
    pa.set_memory_pool(pa.mimalloc_memory_pool())
    yield
    pa.set_memory_pool(before)


def test_an_index_rebuild_allocates_from_jemalloc(mimalloc_process: None, tmp_path: Path) -> None:
    append(tmp_path / "t", batch(0, 40, seed=1), 0)
    rebuild(IndexSpec.for_location(LakeTable.at(str(tmp_path / "t"))))
    assert pa.default_memory_pool().backend_name == "jemalloc"
    assert pa.array(range(1000)).to_numpy().sum() == 499_500  # buffers of either pool stay usable


def test_a_pool_the_user_chose_is_kept(mimalloc_process: None, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ARROW_DEFAULT_MEMORY_POOL", "mimalloc")
    assert arrow_memory.use_preferred_pool() == "mimalloc"
