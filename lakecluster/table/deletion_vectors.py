"""Deletion vectors: the rows of a data file that a ``DELETE``, ``UPDATE`` or ``MERGE`` marked
deleted without rewriting the file (Delta protocol, "Deletion Vectors").

An ``add`` action may carry a descriptor (``deletionVector``): the deleted rows' positions in the
file, as a 64-bit Roaring bitmap stored inline in the log (Z85 text) or in a
``deletion_vector_<uuid>.bin`` file beside the data. A file's identity in the log is its path and
its descriptor's :attr:`DeletionVector.unique_id`: a ``DELETE`` removes ``(path, old vector)`` and
adds ``(path, new vector)`` in one commit. The file's live rows are its ``numRecords`` minus the
vector's :attr:`DeletionVector.cardinality`; its stats stay a bound of them.

Bitmaps are decoded by pyroaring (CRoaring's portable 64-bit format) straight into numpy arrays.
"""

from __future__ import annotations

import struct
import uuid
import zlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote, urlsplit

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyroaring import BitMap, BitMap64

from lakecluster.errors import TableError
from lakecluster.uris import bucket_key, data_file, is_s3

# The descriptor as the log writes it (a checkpoint's ``add.deletionVector`` struct).
DESCRIPTOR_TYPE = pa.struct([
    ("storageType", pa.string()), ("pathOrInlineDv", pa.string()), ("offset", pa.int32()),
    ("sizeInBytes", pa.int32()), ("cardinality", pa.int64()),
])  # fmt: skip

# The RoaringBitmapArray formats, told apart by their first four bytes (little endian).
PORTABLE_MAGIC = 1681511377
NATIVE_MAGIC = 1681511376
FILE_FORMAT_VERSION = 1  # first byte of a deletion vector file
_Z85 = b"0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ.-:+=^!/*?&<>()[]{}@%$#"
_Z85_VALUE = np.full(256, 255, dtype=np.uint8)
_Z85_VALUE[np.frombuffer(_Z85, dtype=np.uint8)] = np.arange(85, dtype=np.uint8)
_UUID_CHARS = 20  # a Z85-encoded UUID, after the optional random prefix of a 'u' descriptor


class DeletionVectorError(TableError):
    """A deletion vector the log names cannot be read (missing, corrupt, or of an unknown kind)."""


@dataclass(frozen=True)
class DeletionVector:
    """One ``deletionVector`` descriptor of an ``add`` or ``remove`` action."""

    storage_type: str  # 'u': a file named by a UUID, 'p': a file at an absolute path, 'i': inline
    path_or_inline: str
    offset: int | None
    size: int  # bytes of the serialized bitmap
    cardinality: int  # rows it deletes

    @classmethod
    def of(cls, descriptor: Mapping[str, Any] | None) -> DeletionVector | None:
        """The descriptor of a log action (its JSON object or a checkpoint row); None for none."""
        if not descriptor:
            return None
        offset = descriptor.get("offset")
        return cls(str(descriptor["storageType"]), str(descriptor["pathOrInlineDv"]),
                   None if offset is None else int(offset), int(descriptor["sizeInBytes"]),
                   int(descriptor["cardinality"]))  # fmt: skip

    @property
    def unique_id(self) -> str:
        """What tells two vectors of one file apart (the protocol's derived ``uniqueId``)."""
        head = f"{self.storage_type}{self.path_or_inline}"
        return head if self.offset is None else f"{head}@{self.offset}"

    def to_log(self) -> dict[str, Any]:
        """The descriptor as a log action holds it (for the ``remove`` of a file that has it)."""
        out: dict[str, Any] = {"storageType": self.storage_type, "pathOrInlineDv": self.path_or_inline}
        if self.offset is not None:
            out["offset"] = self.offset
        out.update(sizeInBytes=self.size, cardinality=self.cardinality)
        return out

    def file(self, table_root: str) -> str:
        """The vector's file under ``table_root`` (a path in the table's filesystem); not for inline ones."""
        if self.storage_type == "u":
            prefix, encoded = self.path_or_inline[:-_UUID_CHARS], self.path_or_inline[-_UUID_CHARS:]
            name = f"deletion_vector_{uuid.UUID(bytes=z85_decode(encoded, 16))}.bin"
            return f"{table_root}/{prefix}/{name}" if prefix else f"{table_root}/{name}"
        if self.storage_type == "p":
            return absolute_file(table_root, self.path_or_inline)
        raise DeletionVectorError(f"deletion vector of storage type {self.storage_type!r} has no file")

    def rows(self, fs: Any, table_root: str) -> np.ndarray:
        """The deleted rows' positions in the data file, sorted (uint64).

        Raises:
            DeletionVectorError: the vector cannot be read, fails its checksum, or does not hold
                ``cardinality`` rows.
        """
        if self.storage_type == "i":
            data = z85_decode(self.path_or_inline, self.size)
        elif self.storage_type in ("u", "p"):
            data = self._read_from_file(fs, self.file(table_root))
        else:
            raise DeletionVectorError(f"unknown deletion vector storage type {self.storage_type!r}")
        rows = bitmap_rows(data)
        if len(rows) != self.cardinality:
            raise DeletionVectorError(f"deletion vector {self.unique_id} holds {len(rows)} rows, "
                                      f"its descriptor says {self.cardinality}")  # fmt: skip
        return rows

    def _read_from_file(self, fs: Any, path: str) -> bytes:
        start = self.offset or 0
        try:
            with fs.open_input_file(path) as f:
                if start == 0:  # an offset of 0 points at the format version byte
                    if f.read(1) != bytes([FILE_FORMAT_VERSION]):
                        raise DeletionVectorError(f"{path} is not a deletion vector file of format version 1")
                    start = 1
                f.seek(start)
                head = f.read(4)
                body = f.read(self.size + 4)
        except (FileNotFoundError, OSError) as e:
            raise DeletionVectorError(f"deletion vector file {path} cannot be read: {e}") from e
        if len(head) < 4 or struct.unpack(">i", head)[0] != self.size or len(body) < self.size + 4:
            raise DeletionVectorError(f"deletion vector at {path}@{start} is not {self.size} bytes as its "
                                      "descriptor says")  # fmt: skip
        data, checksum = body[: self.size], struct.unpack(">I", body[self.size :])[0]
        if zlib.crc32(data) != checksum:
            raise DeletionVectorError(f"deletion vector at {path}@{start} fails its checksum")
        return data


def absolute_file(table_root: str, uri: str) -> str:
    """Where a file the log names by an absolute URI (``s3://bucket/key``, ``file:/path``) or by a
    path relative to the table lives, as a path in the table's filesystem."""
    if is_s3(uri):
        return unquote(bucket_key(uri))
    if uri.startswith("file:"):
        return unquote(urlsplit(uri).path)
    if uri.startswith("/"):
        return unquote(uri)
    return data_file(table_root, uri)


def z85_decode(text: str, size: int) -> bytes:
    """The first ``size`` bytes Z85 ``text`` encodes (5 characters per 4 bytes, big endian)."""
    raw = np.frombuffer(text.encode("ascii"), dtype=np.uint8)
    if len(raw) % 5:
        raise DeletionVectorError(f"Z85 text of {len(raw)} characters is not a whole number of blocks")
    digits = _Z85_VALUE[raw]
    if (digits == 255).any():
        raise DeletionVectorError("Z85 text holds a character outside its alphabet")
    blocks = digits.reshape(-1, 5).astype(np.uint64)
    values = blocks @ np.array([85**4, 85**3, 85**2, 85, 1], dtype=np.uint64)
    if (values >= 1 << 32).any():
        raise DeletionVectorError("Z85 block above 2^32")
    out = values.astype(">u4").tobytes()
    if size > len(out):
        raise DeletionVectorError(f"Z85 text holds {len(out)} bytes, {size} expected")
    return out[:size]


def bitmap_rows(data: bytes) -> np.ndarray:
    """The row positions of one serialized ``RoaringBitmapArray``, sorted (uint64): a magic
    number, then CRoaring's portable 64-bit bitmap (what Delta writes) or Delta's older native
    layout (a count, then each 32-bit bitmap with its size; the bitmap's index is its high word)."""
    magic = struct.unpack("<i", data[:4])[0] if len(data) >= 4 else None
    try:
        if magic == PORTABLE_MAGIC:
            return np.frombuffer(BitMap64.deserialize(data[4:]).to_array(), dtype=np.uint64)
        if magic == NATIVE_MAGIC:
            return _native_rows(data)
    except (ValueError, OSError, struct.error) as e:
        raise DeletionVectorError(f"deletion vector bitmap cannot be decoded: {e}") from e
    raise DeletionVectorError("deletion vector data does not start with a RoaringBitmapArray magic number")


def _native_rows(data: bytes) -> np.ndarray:
    count = struct.unpack_from("<i", data, 4)[0]
    at, parts = 8, []
    for high in range(count):
        size = struct.unpack_from("<i", data, at)[0]
        low = np.frombuffer(BitMap.deserialize(data[at + 4 : at + 4 + size]).to_array(), dtype=np.uint32)
        parts.append(low.astype(np.uint64) | np.uint64(high << 32))
        at += 4 + size
    return np.concatenate(parts) if parts else np.zeros(0, dtype=np.uint64)


def file_key(path: str, vector: DeletionVector | None) -> str:
    """A logical file's identity in the log, as one text: its path, and its vector's unique id
    after a NUL (a character no path holds) when it has one."""
    return path if vector is None else f"{path}\x00{vector.unique_id}"


def file_keys(paths: pa.Array | pa.ChunkedArray, vectors: pa.Array | pa.ChunkedArray) -> pa.Array:
    """:func:`file_key` of each (path, descriptor), vectorised."""
    if isinstance(paths, pa.ChunkedArray):
        paths = paths.combine_chunks()
    ids = unique_ids(vectors)
    return pc.if_else(pc.is_null(ids), paths, pc.binary_join_element_wise(paths, ids, "\x00"))


def unique_ids(descriptors: pa.Array | pa.ChunkedArray) -> pa.Array:
    """Each descriptor's :attr:`DeletionVector.unique_id` (null where there is none), vectorised."""
    if isinstance(descriptors, pa.ChunkedArray):
        descriptors = descriptors.combine_chunks()
    kind, path = pc.struct_field(descriptors, "storageType"), pc.struct_field(descriptors, "pathOrInlineDv")
    offset = pc.struct_field(descriptors, "offset").cast(pa.string())
    head = pc.binary_join_element_wise(kind, path, "")
    with_offset = pc.binary_join_element_wise(head, offset, "@")
    out = pc.if_else(pc.is_null(offset), head, with_offset)
    return pc.if_else(pc.is_valid(descriptors), out, pa.scalar(None, pa.string()))


def cardinalities(descriptors: pa.Array | pa.ChunkedArray) -> pa.Array:
    """Rows each descriptor deletes (0 where there is none)."""
    if isinstance(descriptors, pa.ChunkedArray):
        descriptors = descriptors.combine_chunks()
    counts = pc.struct_field(descriptors, "cardinality").cast(pa.int64())
    return pc.if_else(pc.is_valid(descriptors), pc.fill_null(counts, 0), pa.scalar(0, pa.int64()))


def descriptors(values: list[Mapping[str, Any] | None]) -> pa.Array:
    """Descriptors of JSON add actions (``add.get("deletionVector")``) as a :data:`DESCRIPTOR_TYPE` array."""
    return pa.array([dict(v) if v else None for v in values], DESCRIPTOR_TYPE)


def live_mask(deleted: np.ndarray, start: int, rows: int) -> np.ndarray:
    """Which of the file's rows ``start`` to ``start + rows`` are live, given its deleted positions."""
    mask = np.ones(rows, dtype=bool)
    lo, hi = np.searchsorted(deleted, [start, start + rows])
    mask[(deleted[lo:hi] - np.uint64(start)).astype(np.int64)] = False
    return mask
