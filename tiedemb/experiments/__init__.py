"""Experiments: sweeps of ordinary runs, and the reports read back from their folders (docs/files.md).

Nothing here trains: a report can be rebuilt anywhere from the run folders alone.
"""
