"""Experiments: sweeps of ordinary runs, and the reports read back from their folders.

- ``sweep_file``: the sweep file format, expanded into labelled cells
- ``cells``: validating and running a sweep's cells, one ``main.py`` process each
- ``stopping``: a sweep stopped by SIGTERM: the running stage stopped after its step, the cell recorded
- ``layout``: what a sweep's output folder holds
- ``runs``: reading run folders (the CSV metrics, settings and config Lightning's CSVLogger writes)
- ``sections``: the report's section kinds, which a sweep file's ``report:`` names
- ``aggregate``, ``evidence``, ``width_study``: the tables; ``plots``: the figures; ``report_writer``:
  report.md and the W&B report run

Nothing here trains: a report can be rebuilt anywhere from the run folders alone.
"""
