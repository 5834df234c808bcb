"""Weights from elsewhere made into tiedemb's (``source``, ``bert``, ``narrow``), and the way out
(``export_plan``: ``python -m tiedemb.export``)."""
