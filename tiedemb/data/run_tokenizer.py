"""The tokenizer a run's checkpoint was trained with, found from any folder.

A checkpoint records its data settings as the run was given them: a tokenizer folder
(``data.tokenizer``) or, for pretraining text, the cache the run trained its tokenizer into
(``data.cache_dir``), both relative to the folder the run started in. Each is looked for there
first, then in the current folder (``tiedemb.training.evaluation.locate``), so ``tiedemb generate
runs/x`` and ``tiedemb predict runs/x`` work from anywhere. The embedded Markov corpus has no
tokenizer: ``None``.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from tiedemb.errors import UserError
from tiedemb.training.evaluation import locate, run_folder

SYNTHETIC = "synthetic_tokens"
"""The data setting only the embedded corpus records: a run of it has no tokenizer."""


def has_no_tokenizer(checkpoint: Mapping[str, Any]) -> bool:
    """Whether the run trained on the embedded corpus (token ids are the corpus's word ids)."""
    data = checkpoint.get("datamodule_hyper_parameters") or {}
    return not (data.get("tokenizer") or data.get("dataset") or data.get("train_files")) and SYNTHETIC in data


def run_tokenizer(checkpoint: Mapping[str, Any], path: str | os.PathLike):
    """The run's tokenizer (checked against the model's vocabulary), or ``None`` for the embedded corpus."""
    from tiedemb.data.text import tokenizer_of_run
    from tiedemb.data.tokenizers import load_tokenizer, recorded_fingerprint

    if has_no_tokenizer(checkpoint):
        return None
    hparams = checkpoint.get("hyper_parameters") or {}
    vocab_size = int(hparams.get("vocab_size") or 0)
    data = dict(checkpoint.get("datamodule_hyper_parameters") or {})
    started = run_folder(checkpoint, path)
    for name in ("tokenizer", "cache_dir"):
        if data.get(name):
            data[name] = locate(str(data[name]), started) or data[name]
    found = tokenizer_of_run(
        data, vocab_size, str(hparams.get("objective") or "mlm"), fingerprint=recorded_fingerprint(checkpoint)
    )
    if found is None:
        cache = Path(str(data.get("cache_dir") or "data/cache")) / "tokenizers"
        raise UserError(
            f"the tokenizer the run of {str(path)!r} trained is not in {str(cache)!r} (its data.cache_dir); "
            "run from the folder the run was started in, or keep its cache"
        )
    tokenizer = load_tokenizer(found)
    if vocab_size and len(tokenizer) != vocab_size:
        raise UserError(
            f"the run's tokenizer {found!r} has {len(tokenizer)} tokens, but the model's vocabulary has {vocab_size}"
        )
    return tokenizer
