"""The compaction loop: re-clusters fragmented file groups by a Hilbert or Z key, commits each rewrite atomically."""
