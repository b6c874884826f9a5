"""The key-prefixed column-stats index (issue #4)."""
