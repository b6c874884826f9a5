"""The compaction loop (issue #3): re-clusters fragmented file groups by a Hilbert or Z key."""
