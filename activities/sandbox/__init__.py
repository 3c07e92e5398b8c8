"""Sandboxed replay steps (rule 16): bubblewrap child processes brokered by the worker.

Kept empty on purpose: ``python -m activities.sandbox.child`` imports this package before it
sets its protocol channel aside.
"""
