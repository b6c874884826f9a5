"""The streaming ingestion job: records from Kafka (or the built-in generator) into a Delta table,
with malformed records quarantined and per-column boundary sketches kept up to date."""
