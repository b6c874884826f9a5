"""The bulk record-batch decoder against kafka-python's own per-record decoder, on batches built by
kafka-python's producer-side builders (no broker): same records, same next fetch offset."""

from __future__ import annotations

import struct
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kafka import TopicPartition
from kafka.consumer.fetcher import Fetcher
from kafka.record import MemoryRecords
from kafka.record.default_records import DefaultRecordBatchBuilder
from kafka.record.legacy_records import LegacyRecordBatchBuilder
from kafka.record.util import calc_crc32c

from lakecluster.errors import SourceError
from lakecluster.stream.kafka_batches import CorruptBatchError, Transactions, decode

TP = TopicPartition("t", 0)
GZIP = 1

Record = tuple[int | None, bytes | None, bytes | None, list[tuple[str, bytes | None]]]


def v2_batch(
    base_offset: int,
    records: list[Record],
    *,
    compression: int = 0,
    offset_step: int = 1,
    producer_id: int = -1,
    transactional: bool = False,
    extra_attributes: int = 0,
) -> bytes:
    """A magic-2 batch as kafka-python's producer writes it; offset deltas 0, step, 2·step, ..."""
    builder = DefaultRecordBatchBuilder(
        magic=2,
        compression_type=compression,
        is_transactional=transactional,
        producer_id=producer_id,
        producer_epoch=0 if producer_id >= 0 else -1,
        base_sequence=0 if producer_id >= 0 else -1,
        batch_size=2**30,
    )
    for i, (timestamp, key, value, headers) in enumerate(records):
        assert builder.append(i * offset_step, timestamp=timestamp, key=key, value=value, headers=headers)
    buf = builder.build()
    struct.pack_into(">q", buf, 0, base_offset)  # set by the broker, outside the CRC
    if extra_attributes:
        (attributes,) = struct.unpack_from(">h", buf, 21)
        struct.pack_into(">h", buf, 21, attributes | extra_attributes)
        struct.pack_into(">I", buf, 17, calc_crc32c(memoryview(buf)[21:]))
    return bytes(buf)


def control_batch(offset: int, producer_id: int, abort: bool) -> bytes:
    """A transaction marker: one control record whose key is (version 0, type 0 abort / 1 commit)."""
    key = struct.pack(">hh", 0, 0 if abort else 1)
    value = struct.pack(">hi", 0, 0)
    return v2_batch(offset, [(1, key, value, [])], producer_id=producer_id, transactional=True, extra_attributes=0x20)


def kafka_python(buf: bytes, fetch_offset: int, **kwargs: Any) -> tuple[list[tuple[Any, ...]], int]:
    """What kafka-python's consumer returns for this fetch response: the reference."""
    part = Fetcher.PartitionRecords(fetch_offset, TP, MemoryRecords(buf), **kwargs)
    rows = [(r.offset, -1 if r.timestamp is None else r.timestamp, r.key, r.value) for r in part.take()]
    return rows, part.next_fetch_offset


def ours(buf: bytes, fetch_offset: int, **kwargs: Any) -> tuple[list[tuple[Any, ...]], int]:
    decoded = decode(buf, fetch_offset, where="t[0]", **kwargs)
    r = decoded.records
    assert r.offsets.dtype == np.int64 and r.timestamps.dtype == np.int64
    rows = list(zip(r.offsets.tolist(), r.timestamps.tolist(), r.keys.to_pylist(), r.values.to_pylist(), strict=True))
    return rows, decoded.next_offset


# Lengths around the varint size steps (zigzag: 1 -> 2 bytes at 64, 2 -> 3 bytes at 8192).
sizes = st.one_of(st.integers(0, 70), st.sampled_from([63, 64, 65, 127, 128, 8191, 8192, 8193]))
payload = st.one_of(
    st.none(), st.binary(max_size=80), sizes.map(lambda n: bytes(range(256)) * (n // 256) + bytes(n % 256))
)
headers = st.lists(st.tuples(st.text(max_size=8), st.one_of(st.none(), st.binary(max_size=20))), max_size=3)
timestamps = st.one_of(st.integers(0, 2**42), st.just(1_700_000_000_000))
record = st.tuples(timestamps, payload, payload, headers).filter(lambda r: r[1] is not None or r[2] is not None)
batches = st.lists(
    st.tuples(st.lists(record, min_size=1, max_size=12), st.sampled_from([0, GZIP]), st.sampled_from([1, 1, 3])),
    min_size=1,
    max_size=5,
)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(batches=batches, skip=st.integers(0, 40), cut=st.integers(1, 100))
def test_matches_kafka_python_on_any_batches(batches: list[Any], skip: int, cut: int) -> None:
    """Null/empty/long keys and values, headers, negative timestamp deltas, gzip, offset gaps
    (compaction), a fetch offset inside the first batch, and a response cut inside its last batch."""
    buf, base, last = b"", 100, b""
    for records, compression, step in batches:
        last = v2_batch(base, records, compression=compression, offset_step=step)
        buf += last
        base += (len(records) - 1) * step + 1 + 7  # a gap between batches too
    first_records, _, first_step = batches[0]
    fetch_offset = 100 + min(skip, (len(first_records) - 1) * first_step)  # the broker starts at its batch
    if len(batches) > 1 and cut < len(last):
        buf = buf[:-cut]  # the broker cut the response at its byte limit
    assert ours(buf, fetch_offset) == kafka_python(buf, fetch_offset)


def test_gzip_batch_is_decompressed() -> None:
    records: list[Record] = [(1000 + i, f"k{i}".encode(), b"abc" * 200, []) for i in range(50)]
    buf = v2_batch(0, records, compression=GZIP)
    (attributes,) = struct.unpack_from(">h", buf, 21)
    assert attributes & 0x07 == GZIP, "the builder must really have compressed the batch"
    assert ours(buf, 0) == kafka_python(buf, 0)
    assert len(ours(buf, 0)[0]) == 50


def test_log_append_time_uses_the_batch_max_timestamp() -> None:
    buf = v2_batch(5, [(1000, b"a", b"1", []), (3000, b"b", b"2", []), (2000, None, b"3", [])], extra_attributes=0x08)
    rows, _ = ours(buf, 0)
    assert [r[1] for r in rows] == [3000, 3000, 3000]
    assert (rows, 8) == kafka_python(buf, 0)


def test_control_batches_are_skipped_but_move_the_position() -> None:
    buf = v2_batch(0, [(1, b"a", b"1", []), (2, b"b", b"2", [])], producer_id=7, transactional=True)
    buf += control_batch(2, producer_id=7, abort=False)
    buf += control_batch(3, producer_id=8, abort=True)
    rows, next_offset = ours(buf, 0)
    assert [r[0] for r in rows] == [0, 1]
    assert next_offset == 4
    assert (rows, next_offset) == kafka_python(buf, 0)
    only_markers = control_batch(10, producer_id=7, abort=False)
    assert ours(only_markers, 10) == ([], 11) == kafka_python(only_markers, 10)


def test_read_committed_drops_aborted_transactions() -> None:
    class Aborted:  # the shape of a FetchResponse's aborted_transactions entries
        def __init__(self, producer_id: int, first_offset: int) -> None:
            self.producer_id, self.first_offset = producer_id, first_offset

    buf = v2_batch(0, [(1, b"a", b"kept", [])], producer_id=1, transactional=True)
    buf += v2_batch(1, [(1, b"b", b"aborted", []), (1, b"c", b"aborted", [])], producer_id=2, transactional=True)
    buf += control_batch(3, producer_id=1, abort=False)
    buf += control_batch(4, producer_id=2, abort=True)
    buf += v2_batch(5, [(1, b"d", b"kept again", [])], producer_id=2, transactional=True)
    aborted = [Aborted(2, 1)]
    rows, next_offset = ours(buf, 0, transactions=Transactions.from_response(aborted))
    assert [r[3] for r in rows] == [b"kept", b"kept again"]
    assert next_offset == 6
    assert (rows, next_offset) == kafka_python(buf, 0, isolation_level=1, aborted_transactions=aborted)
    uncommitted, _ = ours(buf, 0)
    assert [r[3] for r in uncommitted] == [b"kept", b"aborted", b"aborted", b"kept again"]


@pytest.mark.parametrize("magic", [0, 1])
def test_old_message_formats_fall_back_to_kafka_python(magic: int) -> None:
    builder = LegacyRecordBatchBuilder(magic=magic, compression_type=0, batch_size=2**20)
    for i in range(5):
        builder.append(i, timestamp=1000 + i if magic else None, key=None if i == 2 else b"k", value=b"v%d" % i)
    buf = bytes(builder.build())
    buf += v2_batch(5, [(2000, b"new", b"format", [])])
    rows, next_offset = ours(buf, 1)
    assert [r[0] for r in rows] == [1, 2, 3, 4, 5]
    assert (rows, next_offset) == kafka_python(buf, 1)


def test_flipped_byte_fails_the_crc_check() -> None:
    buf = bytearray(v2_batch(0, [(1, b"key", b"value" * 10, [("h", b"x")]) for _ in range(3)]))
    for at in (17, 30, 70, len(buf) - 1):  # the CRC itself, a header field, a record, the last byte
        corrupt = bytearray(buf)
        corrupt[at] ^= 0x01
        with pytest.raises(CorruptBatchError, match="failed its CRC check") as e:
            decode(bytes(corrupt), 0, where="t[0]")
        assert isinstance(e.value, SourceError)
        assert "t[0]" in str(e.value) and "offset 0" in str(e.value)


def test_malformed_batch_with_valid_crc_raises_instead_of_yielding_garbage() -> None:
    """With check_crcs off (or a producer bug), structural checks still catch bad records."""
    good = v2_batch(0, [(1, b"key", b"value", []) for _ in range(4)])
    # Record count says 5 records where there are 4.
    extra = bytearray(good)
    struct.pack_into(">i", extra, 57, 5)
    struct.pack_into(">I", extra, 17, calc_crc32c(memoryview(extra)[21:]))
    with pytest.raises(CorruptBatchError):
        decode(bytes(extra), 0)
    # The first record's length grows by one byte: lengths no longer add up to the batch.
    longer = bytearray(good)
    longer[61] += 2  # zigzag: +1
    with pytest.raises(CorruptBatchError):
        decode(bytes(longer), 0, check_crcs=False)
    # A key length pointing past its record.
    bad_key = bytearray(good)
    key_len_at = 61 + 1 + 1 + 1 + 1  # length, attributes, timestamp delta, offset delta
    assert bad_key[key_len_at] == 6  # zigzag(3) for b"key"
    bad_key[key_len_at] = 40
    with pytest.raises(CorruptBatchError, match="outside"):
        decode(bytes(bad_key), 0, check_crcs=False)


def test_unknown_codec_is_a_clear_error() -> None:
    buf = v2_batch(0, [(1, b"k", b"v", [])], extra_attributes=0x05)
    with pytest.raises(CorruptBatchError, match="codec 5"):
        decode(buf, 0)


def test_empty_and_truncated_responses() -> None:
    assert ours(b"", 42) == ([], 42)
    buf = v2_batch(42, [(1, b"k", b"v", [])])
    assert ours(buf[:-1], 42) == ([], 42) == kafka_python(buf[:-1], 42)
