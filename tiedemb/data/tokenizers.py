"""Loading tokenizers from a local directory or the Hugging Face hub, finding a run's, and training new ones."""

from __future__ import annotations

import hashlib
import logging
import os
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from filelock import FileLock
from transformers import AutoTokenizer, PreTrainedTokenizerBase, PreTrainedTokenizerFast

from tiedemb.data.catalog import prepare_hint
from tiedemb.errors import UserError, first_line
from tiedemb.training.files import atomic_directory, disk_full_is_reported
from tiedemb.training.hub import hub_access, spelled_as_path

log = logging.getLogger("tiedemb.data")

DISK_REMEDY = "set data.cache_dir to a folder on a larger disk"

#: Special tokens of the trained tokenizers, in id order (so ``[PAD]`` / ``<pad>`` is id 0).
SPECIALS_BY_KIND: dict[str, dict[str, str]] = {
    "wordpiece": {
        "pad_token": "[PAD]",
        "unk_token": "[UNK]",
        "cls_token": "[CLS]",
        "sep_token": "[SEP]",
        "mask_token": "[MASK]",
    },
    "bpe": {
        "pad_token": "<pad>",
        "unk_token": "<unk>",
        "bos_token": "<s>",
        "eos_token": "</s>",
        "mask_token": "<mask>",
    },
}
#: Byte-level BPE starts from all 256 byte symbols, so they count against the vocabulary.
BYTE_ALPHABET_SIZE = 256


def load_tokenizer(name_or_path: str | os.PathLike) -> PreTrainedTokenizerBase:
    """Load a tokenizer from a directory or a hub name, with the padding and truncation some
    ``tokenizer.json`` files preset switched off (tiedemb pads and truncates explicitly)."""
    text = str(name_or_path)
    path = Path(text).expanduser()
    looks_local = path.exists() or spelled_as_path(text)  # else a hub name or org/name
    if looks_local and not path.is_dir():
        raise UserError(f"tokenizer directory {text!r} does not exist{prepare_hint(path)}")
    try:
        if looks_local:
            tokenizer = AutoTokenizer.from_pretrained(str(path), trust_remote_code=False)
        else:
            with hub_access() as online:
                tokenizer = AutoTokenizer.from_pretrained(text, trust_remote_code=False)
    except OSError as error:
        reason = "" if looks_local or online else " (the hub cannot be reached, or HF_HUB_OFFLINE is set)"
        raise UserError(
            f"could not load tokenizer {text!r}{reason}: {first_line(error)}. "
            "Pass a local tokenizer directory (one holding tokenizer.json or vocab.txt), "
            "a hub name already in the local cache, or leave `tokenizer` unset to train one on the training text."
        ) from None
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is not None:
        backend.no_padding()
        backend.no_truncation()
    return tokenizer


TOKENIZER_STATE = "tokenizer_fingerprint"  # the key of the fingerprint in a checkpoint's data state


def recorded_fingerprint(checkpoint: Mapping[str, Any]) -> str | None:
    """The fingerprint of the tokenizer a pretraining checkpoint recorded, if any (Lightning stores
    the data module's state under its class name)."""
    for value in checkpoint.values():
        if isinstance(value, Mapping) and isinstance(value.get(TOKENIZER_STATE), str):
            return value[TOKENIZER_STATE]
    return None


def has_no_tokenizer(checkpoint: Mapping[str, Any]) -> bool:
    """Whether the run trained on the embedded corpus (only PretrainData records ``synthetic_tokens``)."""
    data = checkpoint.get("datamodule_hyper_parameters") or {}
    return not (data.get("tokenizer") or data.get("dataset") or data.get("train_files")) and "synthetic_tokens" in data


def tokenizer_fingerprint(tokenizer: PreTrainedTokenizerBase) -> str:
    """A short hash of everything that decides the ids a tokenizer produces."""
    digest = hashlib.sha256()
    backend = getattr(tokenizer, "backend_tokenizer", None)
    digest.update(
        backend.to_str().encode() if backend is not None else repr(sorted(tokenizer.get_vocab().items())).encode()
    )
    digest.update(repr(sorted(tokenizer.special_tokens_map.items())).encode())
    return digest.hexdigest()[:16]


def configure_for_objective(tokenizer: PreTrainedTokenizerBase, objective: str) -> int:
    """Make sure the tokens an objective needs are set; return the document separator id (mlm:
    ``sep``, needing ``pad`` and ``mask``; clm: ``eos`` or ``sep``, padding with it as GPT-2 does)."""
    name = getattr(tokenizer, "name_or_path", "") or "the tokenizer"
    if objective == "clm":
        separator = tokenizer.eos_token if tokenizer.eos_token_id is not None else tokenizer.sep_token
        if separator is None:
            raise UserError(f"tokenizer {name!r} has neither an eos nor a sep token to separate documents with")
        if tokenizer.pad_token_id is None:
            tokenizer.pad_token = separator
        return int(tokenizer.convert_tokens_to_ids(separator))
    missing = [kind for kind in ("pad", "mask") if getattr(tokenizer, f"{kind}_token_id") is None]
    if missing:
        raise UserError(
            f"tokenizer {name!r} has no {' or '.join(missing)} token, which mlm needs; pass a BERT-style tokenizer"
        )
    separator = tokenizer.sep_token_id if tokenizer.sep_token_id is not None else tokenizer.eos_token_id
    if separator is None:
        raise UserError(f"tokenizer {name!r} has neither a sep nor an eos token to separate documents with")
    return int(separator)


def check_vocab_size(kind: str, vocab_size: int | None) -> int:
    """``vocab_size`` if a ``kind`` tokenizer can be trained to that size."""
    if vocab_size is None:
        raise UserError(
            "pass either `tokenizer` (a hub name or local directory) or `vocab_size` to train one on the training text"
        )
    needed = len(SPECIALS_BY_KIND[kind]) + (BYTE_ALPHABET_SIZE if kind == "bpe" else 0) + 1
    if vocab_size < needed:
        detail = f"{len(SPECIALS_BY_KIND[kind])} special tokens" + (
            f" plus the {BYTE_ALPHABET_SIZE}-byte alphabet" if kind == "bpe" else ""
        )
        raise UserError(
            f"vocab_size={vocab_size} is too small for a {kind} tokenizer: "
            f"it needs at least {needed} ({detail} plus one learned token)"
        )
    return vocab_size


def train_tokenizer(
    texts: Iterable[str], *, kind: str, vocab_size: int, save_dir: Path, length: int | None = None
) -> PreTrainedTokenizerFast:
    """A ``kind`` ("wordpiece" or "bpe") tokenizer of ``vocab_size`` tokens trained on ``texts`` and
    saved in ``save_dir``, or the one already there (``texts`` unread): key it by source, kind and size."""
    check_vocab_size(kind, vocab_size)
    save_dir = Path(save_dir)
    save_dir.parent.mkdir(parents=True, exist_ok=True)
    # Training is not deterministic: two trainings of the same text number tokens of equal count
    # differently. Cells run side by side that share a cache must share one tokenizer, so the
    # first trains it while the others wait for it, then read it. The lock files sit in a folder
    # of their own, so the tokenizers folder holds tokenizers only.
    locks = save_dir.parent.parent / "locks"
    locks.mkdir(parents=True, exist_ok=True)
    with FileLock(locks / f"{save_dir.parent.name}-{save_dir.name}.lock"):
        if (save_dir / "tokenizer.json").is_file():
            log.info("reusing the %s tokenizer in %s", kind, save_dir)
            return load_tokenizer(save_dir)
        return _train_and_save(texts, kind, vocab_size, save_dir, length)


def _train_and_save(
    texts: Iterable[str], kind: str, vocab_size: int, save_dir: Path, length: int | None
) -> PreTrainedTokenizerFast:
    """A BERT-style WordPiece or GPT-2-style byte-level BPE tokenizer trained on ``texts``, saved whole
    or not at all."""
    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers

    specials, show = list(SPECIALS_BY_KIND[kind].values()), sys.stderr.isatty()
    if kind == "bpe":
        backend = Tokenizer(models.BPE())
        backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        backend.decoder = decoders.ByteLevel()
        backend.post_processor = processors.ByteLevel(trim_offsets=False)
        alphabet = pre_tokenizers.ByteLevel.alphabet()
        trainer = trainers.BpeTrainer(
            vocab_size=vocab_size, special_tokens=specials, initial_alphabet=alphabet, show_progress=show
        )
    else:
        backend = Tokenizer(models.WordPiece(unk_token="[UNK]"))
        backend.normalizer = normalizers.BertNormalizer(lowercase=True)
        backend.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
        backend.decoder = decoders.WordPiece(prefix="##")
        backend.post_processor = processors.TemplateProcessing(
            single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B:1 [SEP]:1", special_tokens=[("[CLS]", 2), ("[SEP]", 3)]
        )
        # Capping the alphabet keeps a small vocabulary from overflowing with rare characters.
        alphabet = min(1000, vocab_size - len(specials))
        trainer = trainers.WordPieceTrainer(
            vocab_size=vocab_size, special_tokens=specials, limit_alphabet=alphabet, show_progress=show
        )
    backend.train_from_iterator(texts, trainer=trainer, length=length)
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=backend, **SPECIALS_BY_KIND[kind])
    if len(tokenizer) != vocab_size:
        log.warning(
            "the %s tokenizer has %d tokens, not %d: the training text is too small for more",
            kind,
            len(tokenizer),
            vocab_size,
        )
    with (
        disk_full_is_reported(save_dir.parent, "the trained tokenizer", DISK_REMEDY),
        atomic_directory(save_dir, "tokenizer.json") as staging,
    ):
        tokenizer.save_pretrained(staging)
    log.info("trained a %s tokenizer of %d tokens, saved in %s", kind, len(tokenizer), save_dir)
    return tokenizer
