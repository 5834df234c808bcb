"""Parameter counts in every run's metrics, so reports never need to rebuild a model to know its size.

The embedding-dimension study sets accuracy against parameters: total, and the part that lives
in the embedding (token, position and segment tables, the d_e -> hidden projection and the
embedding norm). A tied output matrix is the token table and is counted once.
"""

from __future__ import annotations

import lightning as L
from lightning.pytorch.callbacks import Callback
from torch import nn

from tiedemb.training.metric_names import PARAMS_EMBEDDING, PARAMS_TOTAL


def parameter_counts(model: nn.Module) -> dict[str, float]:
    """``params/total``, ``params/embedding`` and ``params/non_embedding`` of ``model``.

    ``model`` is a LightningModule or a plain network; its embedding is found as the submodule
    named ``embedding`` (``Transformer`` and ``SequenceClassifier`` both have one). Shared
    parameters count once, as ``nn.Module.parameters`` yields them once.
    """
    total = sum(parameter.numel() for parameter in model.parameters())
    embedding = next((module for name, module in model.named_modules() if name.rsplit(".", 1)[-1] == "embedding"), None)
    in_embedding = sum(parameter.numel() for parameter in embedding.parameters()) if embedding is not None else 0
    return {
        PARAMS_TOTAL: float(total),
        PARAMS_EMBEDDING: float(in_embedding),
        "params/non_embedding": float(total - in_embedding),
    }


class ParameterCounts(Callback):
    """Logs ``parameter_counts`` of the trained module at the start of fit and of test."""

    def _log(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        counts = parameter_counts(pl_module)
        for logger in trainer.loggers:
            logger.log_metrics(counts, step=trainer.global_step)

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._log(trainer, pl_module)

    def on_test_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._log(trainer, pl_module)
