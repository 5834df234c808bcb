"""The names of the metrics the modules and the training monitor log, and the report reads back."""

from __future__ import annotations


# -- the language-model modules (modules/pretrain.py) ----------------------------------------------
def eval_name(stage: str, metric: str, split_suffix: str = "") -> str:
    return f"{stage}/{metric}{split_suffix}"


def loss_name(stage: str) -> str:
    """Per token for language models."""
    return eval_name(stage, "loss")


TRAIN_LOSS = loss_name("train")
VAL_LOSS = loss_name("val")
VAL_OOD_LOSS = loss_name("val_ood")
"""The loss of the out-of-domain validation text, where the data has one."""
INIT_LOSS = "init/loss"
"""The loss of the untouched model on the first training batch (dropout off), at step 0."""
INIT_LOSS_PREDICTED = "init/loss_pred"
"""The initial loss ``tiedemb.theory`` predicts, at step 0."""


def baseline_name(kind: str, ood: bool = False) -> str:
    """An add-one n-gram loss (``unigram``, ``bigram``) of the (out-of-domain) validation text."""
    return f"data/{'ood_' if ood else ''}{kind}_loss"


UNIGRAM_LOSS = baseline_name("unigram")
"""The add-one unigram loss of the validation text, the bar the step targets are read against."""
BIGRAM_LOSS = baseline_name("bigram")
LOG_N = "init/log_n"
"""ln of the vocabulary size, the loss of a uniform prediction, logged at step 0."""
PARAMS_TOTAL = "params/total"
PARAMS_EMBEDDING = "params/embedding"
TRAIN_FLOPS_PER_SEC = "train/device/flops_per_sec"
TRAIN_BATCHES_PER_SEC = "train/device/batches_per_sec"
"""What Lightning's ThroughputMonitor logs per device (modules/throughput.py)."""
ZERO_SHOT = "zero_shot"
"""The prefix of the zero-shot probe's metrics (``zero_shot/auroc``, ``_low``, ``_high``, ``examples``)."""


def kept_name(table: str) -> str:
    """The share of a table's energy a narrowing to a smaller d_e keeps."""
    return f"narrow/kept_{table}"


TOKENIZER_FINGERPRINT = "tokenizer_fingerprint"
"""The logged setting (hparams.yaml, W&B's config) naming the tokenizer a pretraining run read."""
MAJORITY_PREFIX = "data/majority/"
"""A fine-tuning run's start: each dev metric of always answering the training set's most frequent
label (``data/majority/accuracy``, ``data/majority/f1``, ``data/majority/accuracy_matched``)."""

# -- the training monitor (training/monitor.py) ---------------------------------------------------
GRAD_NORM_TOTAL = "train/grad_norm/total"
"""Before the optimiser step (after unscaling, before clipping)."""
GRAD_NORM_PARTS = ("embedding", "encoder", "head")
"""Parts whose gradient norms are logged apart (a tied matrix counts in ``embedding``)."""


def grad_norm_name(part: str) -> str:
    return f"train/grad_norm/{part}"


ROW_NORM_MEAN = "embedding/row_norm_mean"
ROW_NORM_STD = "embedding/row_norm_std"
"""The mean L2 norm of the token table's rows, and their standard deviation."""
SELF_LOGIT_MARGIN = "embedding/self_logit_margin"
"""On a fixed probe batch, the mean over positions of the logit of the input token itself minus the
log-sum-exp of every other logit: above 0, the model would predict the token it was given (the
pull a tied output matrix exerts, h_i . w_i with w_i the token's own row)."""
EFFECTIVE_RANK = "val/embedding_effective_rank"
"""The effective rank of the token table (exp of the entropy of its normalised singular values), at every validation."""

STEP_TARGETS = (0.25, 0.5, 1.0)
"""Targets ``t`` in nats below the unigram loss: the step at which the validation loss first reaches ``unigram - t``."""
