"""Weights from elsewhere, made into tiedemb's: everything that reads or reshapes pretrained weights.

- ``source``: where training starts (a tiedemb checkpoint or BERT weights) in one neutral form,
  and the settings it fixes
- ``bert``: transformers' BERT names and settings as tiedemb's, and reading a BERT model
- ``narrow``: a pretrained embedding narrowed to a smaller d_e by truncated SVD
- ``export_plan``, ``model_card``: the way out: tiedemb's settings and weights in BERT's or
  GPT-NeoX's layout, and the model card (``python -m tiedemb.export``)
"""
