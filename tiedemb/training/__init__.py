"""Run plumbing: what every run needs around its model and data, one file per job (docs/architecture.md)."""
