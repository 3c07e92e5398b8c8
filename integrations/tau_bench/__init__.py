"""Forensics against ground truth for imported benchmark runs (tau-bench)."""
