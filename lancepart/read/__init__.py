"""Snapshot reads and partition pruning through ``__manifest``."""
