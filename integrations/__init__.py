"""Benchmark-specific code kept apart from the core."""
