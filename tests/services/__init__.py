"""Real services the tests (and benchmarks) run against: Apache Kafka (KRaft) and an S3 server (SeaweedFS)."""
