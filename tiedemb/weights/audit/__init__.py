"""``tiedemb audit``'s work: does a transformers architecture start as a tied 2-gram model?

- ``families``: what the audit knows of each model_type (where the stream starts and ends, the
  input and output scales, the head's transform, the objective)
- ``build``: the config (local file or model_type with overrides), the size check, the model
- ``architecture``: the built model's facts and the theory's prediction for them
- ``tokens``: the batch and the positions scored
- ``measure``: the initial loss, the copy rate and the residual branches' ratio of one pass
- ``remedies``: the project's remedies applied to the same model
- ``run``: all of it for one architecture, as an ``Audit``; ``report``: the audit in words
"""
