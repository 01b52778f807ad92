"""Eviction: signals, thresholds, ranking and the eviction manager. Lands with the eviction issue."""
