"""The key-prefixed column-stats index: per-file min/max of the clustering columns, kept in step with the Delta log."""
