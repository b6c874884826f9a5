"""``lakecluster produce``: the built-in generator's records, as JSON, into the configured Kafka topic.

For demos (the compose deployment's producer) and load tests: the same records ``source.kind =
"generator"`` yields, serialised the way a producer of the table's schema would, at a steady rate.
``malformed_every`` turns every n-th record into bytes that are not JSON, to see the quarantine work.
"""

from __future__ import annotations

import logging
import threading
import time

import pyarrow as pa

from lakecluster.config import Config
from lakecluster.stream.generator import GeneratorSettings, generate

log = logging.getLogger(__name__)

MALFORMED = b"{not json"


def json_values(config: Config, start: int, n: int, malformed_every: int = 0) -> list[bytes]:
    """Records ``start .. start+n`` of the generator as JSON lines (vectorised through pandas)."""
    g = config.source.generator
    batch = generate(start, start + n, GeneratorSettings(g.seed, g.brand_skew, g.scale_factor), config.table.columns)
    frame = batch.to_pandas()
    for field in batch.schema:
        name = field.name
        if pa.types.is_decimal(field.type) or pa.types.is_date(field.type):
            frame[name] = frame[name].astype(str)  # exact decimals and ISO dates, as strings
        elif pa.types.is_timestamp(field.type):
            frame[name] = frame[name].dt.strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    lines = frame.to_json(orient="records", lines=True).splitlines()
    if malformed_every <= 0:
        return [line.encode() for line in lines]
    return [MALFORMED if (start + i) % malformed_every == 0 else line.encode() for i, line in enumerate(lines)]


def produce(config: Config, *, rate: int, records: int = 0, malformed_every: int = 0,
            stop: threading.Event | None = None, start: int = 0) -> int:  # fmt: skip
    """Send records to the first configured topic at ``rate`` per second until ``records`` are sent
    (0: until ``stop`` is set). Returns how many were sent; every one is acknowledged by then."""
    from kafka import KafkaProducer

    from lakecluster.stream.kafka import client_kwargs

    k = config.source.kafka
    topic = k.topics[0]
    producer = KafkaProducer(**client_kwargs(k), linger_ms=50, acks="all",
                             retries=2**31 - 1, max_in_flight_requests_per_connection=1)  # fmt: skip
    stop = stop or threading.Event()
    sent = start
    chunk = max(1, rate // 4)  # four sends a second keep the rate smooth
    try:
        while not stop.is_set() and (records <= 0 or sent - start < records):
            began = time.monotonic()
            n = chunk if records <= 0 else min(chunk, records - (sent - start))
            for value in json_values(config, sent, n, malformed_every):
                producer.send(topic, value=value)
            producer.flush()
            sent += n
            stop.wait(max(0.0, n / rate - (time.monotonic() - began)))
    finally:
        producer.close()
    return sent - start
