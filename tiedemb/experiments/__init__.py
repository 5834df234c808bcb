"""Experiments: sweeps of ordinary runs, and the reports read back from their folders alone (docs/files.md)."""
