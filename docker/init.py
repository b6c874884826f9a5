"""Prepares the compose deployment's storage and broker, then exits: the S3 bucket of
``table.path`` and the Kafka topics of ``source.kafka.topics``. Safe to run again (both are
created only when missing). Usage: ``python init.py lakecluster.toml [--partitions N]``."""

from __future__ import annotations

import argparse
import time
from urllib.parse import urlsplit

from pyarrow import fs

from lakecluster import storage
from lakecluster.config import load_config
from lakecluster.stream.kafka import client_kwargs
from lakecluster.table import LakeTable


def create_bucket(config_path: str) -> str:
    config = load_config(config_path)
    s = storage.S3Settings.of(config.storage)
    endpoint = urlsplit(s.endpoint or "https://s3.amazonaws.com")
    s3 = fs.S3FileSystem(region=s.region or "us-east-1", endpoint_override=endpoint.netloc, scheme=endpoint.scheme,
                         access_key=s.access_key_id, secret_key=s.secret_access_key, allow_bucket_creation=True)
    bucket = LakeTable(config).uri.removeprefix("s3://").split("/", 1)[0]
    if s3.get_file_info(bucket).type == fs.FileType.NotFound:
        s3.create_dir(bucket)
    return bucket


def create_topics(config_path: str, partitions: int, timeout_s: float = 120) -> list[str]:
    from kafka import KafkaAdminClient
    from kafka.admin import NewTopic
    from kafka.errors import KafkaError, TopicAlreadyExistsError

    k = load_config(config_path).source.kafka
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            admin = KafkaAdminClient(**client_kwargs(k))
            break
        except KafkaError:  # the broker is still starting
            if time.monotonic() > deadline:
                raise
            time.sleep(2)
    try:
        existing = set(admin.list_topics())
        missing = [t for t in k.topics if t not in existing]
        if missing:
            try:
                admin.create_topics([NewTopic(t, num_partitions=partitions, replication_factor=1) for t in missing])
            except TopicAlreadyExistsError:
                pass  # another init got there first
        return list(k.topics)
    finally:
        admin.close()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("config")
    p.add_argument("--partitions", type=int, default=4)
    args = p.parse_args()
    print(f"bucket {create_bucket(args.config)} ready", flush=True)
    print(f"topics {', '.join(create_topics(args.config, args.partitions))} ready", flush=True)


if __name__ == "__main__":
    main()
