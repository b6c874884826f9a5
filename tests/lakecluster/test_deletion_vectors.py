"""Deletion vectors decoded as the Delta protocol writes them: inline and in files, both
RoaringBitmapArray layouts, a file's identity in the log.

The vectors of real tables (written by delta-spark's DELETE, UPDATE and MERGE) are read in
tests/lakecluster/test_shared_table_reads.py; these build the bytes from the protocol's layout."""

from __future__ import annotations

import struct
import uuid
import zlib
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.fs as pafs
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pyroaring import BitMap, BitMap64

from lakecluster.table.deletion_vectors import (
    NATIVE_MAGIC,
    PORTABLE_MAGIC,
    DeletionVector,
    DeletionVectorError,
    bitmap_rows,
    descriptors,
    file_key,
    file_keys,
    live_mask,
    unique_ids,
    z85_decode,
)

_Z85 = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ.-:+=^!/*?&<>()[]{}@%$#"


def z85_encode(data: bytes) -> str:
    """Z85 of ``data`` padded with zeros to whole 4-byte blocks (as Delta pads inline vectors)."""
    data += b"\0" * (-len(data) % 4)
    out = []
    for (value,) in struct.iter_unpack(">I", data):
        out.append("".join(_Z85[(value // 85**i) % 85] for i in range(4, -1, -1)))
    return "".join(out)


def portable(rows: list[int]) -> bytes:
    return struct.pack("<i", PORTABLE_MAGIC) + BitMap64(rows).serialize()


def vector_file(path: Path, bitmaps: list[bytes]) -> list[int]:
    """A deletion vector file holding ``bitmaps`` (format version 1); the offset of each."""
    out, offsets = bytearray([1]), []
    for data in bitmaps:
        offsets.append(len(out))
        out += struct.pack(">i", len(data)) + data + struct.pack(">I", zlib.crc32(data))
    path.write_bytes(bytes(out))
    return offsets


def test_z85_decodes_the_protocol_alphabet_and_refuses_other_text() -> None:
    assert z85_decode("HelloWorld", 8) == bytes.fromhex("864FD26FB559F75B")  # the Z85 spec's example
    assert z85_decode(z85_encode(b"abcdef"), 6) == b"abcdef"
    with pytest.raises(DeletionVectorError, match="alphabet"):
        z85_decode("Hello~orld", 8)
    with pytest.raises(DeletionVectorError, match="whole number"):
        z85_decode("Hell", 3)


@settings(max_examples=50, deadline=None)
@given(st.lists(st.integers(0, (1 << 40) - 1), max_size=300))
def test_both_bitmap_layouts_give_the_rows_sorted(rows: list[int]) -> None:
    expected = np.array(sorted(set(rows)), dtype=np.uint64)
    assert np.array_equal(bitmap_rows(portable(rows)), expected)
    # Delta's older native layout: a count, then each 32-bit bitmap with its size; its index is the high word.
    highs = sorted({r >> 32 for r in rows})
    native = bytearray(struct.pack("<ii", NATIVE_MAGIC, (highs[-1] + 1) if highs else 0))
    for high in range(highs[-1] + 1 if highs else 0):
        part = BitMap([r & 0xFFFFFFFF for r in rows if r >> 32 == high]).serialize()
        native += struct.pack("<i", len(part)) + part
    assert np.array_equal(bitmap_rows(bytes(native)), expected)


def test_an_inline_vector_and_its_identity() -> None:
    data = portable([3, 4, 7, 11, 18, 29])
    inline = DeletionVector.of({"storageType": "i", "pathOrInlineDv": z85_encode(data), "sizeInBytes": len(data),
                                "cardinality": 6})  # fmt: skip
    assert inline is not None
    assert inline.rows(None, "").tolist() == [3, 4, 7, 11, 18, 29]
    assert inline.unique_id == f"i{z85_encode(data)}"
    assert DeletionVector.of(inline.to_log()) == inline
    assert DeletionVector.of(None) is None and DeletionVector.of({}) is None
    lying = DeletionVector.of({**inline.to_log(), "cardinality": 5})
    assert lying is not None
    with pytest.raises(DeletionVectorError, match="holds 6 rows"):
        lying.rows(None, "")


def test_a_vector_in_a_file_named_by_its_uuid(tmp_path: Path) -> None:
    """Several vectors in one file, found by offset under the random prefix's folder; a damaged
    one fails its checksum instead of deleting the wrong rows."""
    fs = pafs.LocalFileSystem()
    ident = uuid.uuid4()
    (tmp_path / "ab").mkdir()
    file = tmp_path / "ab" / f"deletion_vector_{ident}.bin"
    first, second = portable([0, 5]), portable([1, 2, 3])
    offsets = vector_file(file, [first, second])
    encoded = z85_encode(ident.bytes)
    vectors = [DeletionVector("u", f"ab{encoded}", offset, len(data), n)
               for offset, data, n in zip(offsets, [first, second], [2, 3], strict=True)]  # fmt: skip
    assert vectors[0].file(str(tmp_path)) == str(file)
    assert vectors[0].rows(fs, str(tmp_path)).tolist() == [0, 5]
    assert vectors[1].rows(fs, str(tmp_path)).tolist() == [1, 2, 3]
    assert vectors[0].unique_id != vectors[1].unique_id  # one file, two vectors: told apart by offset
    absolute = DeletionVector("p", f"file:{file}", offsets[1], len(second), 3)
    assert absolute.rows(fs, str(tmp_path)).tolist() == [1, 2, 3]
    damaged = bytearray(file.read_bytes())
    damaged[offsets[1] + 6] ^= 0xFF
    file.write_bytes(bytes(damaged))
    with pytest.raises(DeletionVectorError, match="checksum"):
        vectors[1].rows(fs, str(tmp_path))
    gone = DeletionVector("u", z85_encode(uuid.uuid4().bytes), 1, 10, 1)
    with pytest.raises(DeletionVectorError, match="cannot be read"):
        gone.rows(fs, str(tmp_path))


def test_file_keys_tell_a_path_with_a_vector_from_the_path_without() -> None:
    vector = DeletionVector("u", "x" * 20, 1, 40, 3)
    paths = pa.array(["a.parquet", "a.parquet", "b.parquet"])
    described = descriptors([None, vector.to_log(), None])
    keys = file_keys(paths, described).to_pylist()
    assert keys == [file_key("a.parquet", None), file_key("a.parquet", vector), "b.parquet"]
    assert keys[0] != keys[1]
    assert unique_ids(described).to_pylist() == [None, "u" + "x" * 20 + "@1", None]


def test_live_mask_drops_the_deleted_positions_of_a_slice_of_the_file() -> None:
    deleted = np.array([0, 5, 9, 10, 30], dtype=np.uint64)
    assert np.flatnonzero(~live_mask(deleted, 5, 10)).tolist() == [0, 4, 5]  # rows 5, 9, 10
    assert live_mask(deleted, 11, 5).all()
