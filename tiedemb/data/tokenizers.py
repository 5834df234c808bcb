"""Loading tokenizers from a local directory or the Hugging Face hub, training new ones, and keeping a run's.

``python -m tiedemb.data.tokenizers RUN OUT`` saves the tokenizer a pretraining run read as a
folder: a trained one lives in the run's cache, keyed by its text, and training it again numbers
its tokens differently; kept, other runs name it with ``--data.tokenizer=OUT`` whatever split of
the text they draw (the width study keeps its pilot's).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from filelock import FileLock
from transformers import AutoTokenizer, PreTrainedTokenizerBase, PreTrainedTokenizerFast

from tiedemb.data.preparing import file_sha256, prepare_hint
from tiedemb.errors import UserError, first_line
from tiedemb.training.exits import CommandParser, report_user_errors
from tiedemb.training.files import atomic_directory, disk_full_is_reported
from tiedemb.training.hub import hub_access, spelled_as_path

log = logging.getLogger("tiedemb.data")

DISK_REMEDY = "set data.cache_dir to a folder on a larger disk"
TEXT_COLUMN = "text"  # the field of JSON lines, parquet files and hub datasets that holds the text
VAL_FRACTION = 0.05  # documents held out when the source gives no validation text
TOKENIZER_KIND = {"mlm": "wordpiece", "clm": "bpe"}

# Special tokens of the trained tokenizers, in id order (so ``[PAD]`` / ``<pad>`` is id 0).
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
BYTE_ALPHABET_SIZE = 256  # byte-level BPE starts from all 256 byte symbols, counted in the vocabulary


def load_tokenizer(name_or_path: str | os.PathLike) -> PreTrainedTokenizerBase:
    """A tokenizer from a directory or a hub name, the padding and truncation some ``tokenizer.json``
    files preset switched off (tiedemb pads and truncates explicitly)."""
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
    """The fingerprint of the tokenizer a pretraining checkpoint recorded (in its data module's state), if any."""
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
    """The document separator id, the tokens ``objective`` needs checked (clm pads with it, as GPT-2 does)."""
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
    if vocab_size is None:
        raise UserError(
            "pass either `tokenizer` (a hub name or local directory) or `vocab_size` to train one on the training text"
        )
    needed = len(SPECIALS_BY_KIND[kind]) + (BYTE_ALPHABET_SIZE if kind == "bpe" else 0) + 1
    if vocab_size < needed:
        alphabet = f" plus the {BYTE_ALPHABET_SIZE}-byte alphabet" if kind == "bpe" else ""
        raise UserError(
            f"vocab_size={vocab_size} is too small for a {kind} tokenizer: it needs at least {needed} "
            f"({len(SPECIALS_BY_KIND[kind])} special tokens{alphabet} plus one learned token)"
        )
    return vocab_size


def train_tokenizer(texts: Iterable[str], *, kind: str, vocab_size: int, save_dir: Path) -> PreTrainedTokenizerFast:
    """A ``kind`` tokenizer trained on ``texts`` and saved in ``save_dir``, or the one there (``texts`` unread)."""
    save_dir = Path(save_dir)
    save_dir.parent.mkdir(parents=True, exist_ok=True)
    # Training is not deterministic: cells run side by side that share a cache must share one
    # tokenizer, so the first trains it while the others wait. The locks sit in a folder of their own.
    locks = save_dir.parent.parent / "locks"
    locks.mkdir(parents=True, exist_ok=True)
    with FileLock(locks / f"{save_dir.parent.name}-{save_dir.name}.lock"):
        if (save_dir / "tokenizer.json").is_file():
            log.info("reusing the %s tokenizer in %s", kind, save_dir)
            return load_tokenizer(save_dir)
        return _train_and_save(texts, kind, vocab_size, save_dir)


def _train_and_save(texts: Iterable[str], kind: str, vocab_size: int, save_dir: Path) -> PreTrainedTokenizerFast:
    """A BERT-style WordPiece or GPT-2-style byte-level BPE tokenizer trained on ``texts``, saved whole."""
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
    backend.train_from_iterator(texts, trainer=trainer)
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=backend, **SPECIALS_BY_KIND[kind])
    if len(tokenizer) != vocab_size:
        log.warning(
            "%s tokenizer of %d tokens, not %d: the training text is too small", kind, len(tokenizer), vocab_size
        )
    with (
        disk_full_is_reported(save_dir.parent, "the trained tokenizer", DISK_REMEDY),
        atomic_directory(save_dir, "tokenizer.json") as staging,
    ):
        tokenizer.save_pretrained(staging)
    log.info("trained a %s tokenizer of %d tokens, saved in %s", kind, len(tokenizer), save_dir)
    return tokenizer


def text_source(settings: Mapping[str, Any]) -> tuple[dict, list[Path], list[Path]]:
    """What decides the text a run reads (its trained tokenizer's key), and its training and validation files."""
    dataset = settings.get("dataset")
    train = expand_files(settings["train_files"], "train") if settings.get("train_files") else []
    val = expand_files(settings["val_files"], "val") if settings.get("val_files") else []
    source: dict = {"dataset": dataset, "config": settings.get("dataset_config")}
    source |= {"column": settings.get("text_column", TEXT_COLUMN), "train": file_identity(train)}
    source["val"] = file_identity(val)
    if dataset is not None and Path(dataset).expanduser().is_dir():  # a local folder: its files decide the text
        folder = Path(dataset).expanduser()
        source["files"] = file_identity(sorted(path for path in folder.rglob("*") if path.is_file()))
    if not val:  # the split itself may decide the validation text
        seed = settings["corpus_seed"] if "corpus_seed" in settings else settings.get("seed", 0)  # older runs: seed
        source |= {"val_fraction": settings.get("val_fraction", VAL_FRACTION), "seed": seed}
    return source, train, val


def expand_files(paths: list[str], role: str) -> list[Path]:
    """Existing ``.txt`` files, resolved and de-duplicated."""
    files = [Path(os.path.expanduser(str(path))) for path in paths]
    for path in files:
        if not path.is_file():
            raise UserError(f"{role} file {str(path)!r} does not exist{prepare_hint(path)}")
        if path.suffix.lower() != ".txt":
            raise UserError(
                f"{role} file {str(path)!r} is not a .txt file (one document a line); for JSON lines or parquet "
                "files, pass their folder as data.dataset (and the field holding the text as data.text_column)"
            )
    return list(dict.fromkeys(path.resolve() for path in files))


def file_identity(paths: list[Path]) -> list[tuple[str, int, str]]:
    """Path, size and content hash, not modification time: a touched copy finds the tokenizer trained on it."""
    return [(str(path), path.stat().st_size, file_sha256(path)) for path in paths]


def cache_key(parts: dict) -> str:
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()[:20]


def tokenizer_of_run(
    data: Mapping[str, Any], vocab_size: int, objective: str, fingerprint: str | None = None
) -> str | None:
    """Where a pretraining run's tokenizer is, from its recorded data settings: the one it named, or the
    one it trained in its ``data.cache_dir``; ``None`` for the embedded corpus, or when it is not found."""
    if data.get("tokenizer"):
        return str(data["tokenizer"])
    if not (data.get("dataset") or data.get("train_files")):
        return None
    kind = TOKENIZER_KIND[data.get("objective") or objective]
    cache = Path(data.get("cache_dir") or "data/cache").expanduser() / "tokenizers"
    candidates = sorted(cache.glob(f"{kind}-*"))  # one folder per requested size and text
    if fingerprint is None:  # without one, only the folder its text's key names (none once the text is gone)
        try:
            key = cache_key(text_source(data)[0])
        except UserError:
            return None
        candidates = [folder for folder in candidates if folder.name.endswith(f"-{key}")]
    for folder in candidates:
        if (folder / "tokenizer.json").is_file():
            found = load_tokenizer(folder)
            if len(found) == vocab_size and fingerprint in (None, tokenizer_fingerprint(found)):
                return str(folder)
    return None


def run_tokenizer(checkpoint: Mapping[str, Any], path: str | os.PathLike):
    """The tokenizer a run's checkpoint was trained with (``None``: the embedded corpus), found from any
    folder (its paths looked for where the run started first, then here)."""
    from tiedemb.training.evaluation import locate, run_folder

    if has_no_tokenizer(checkpoint):
        return None
    hparams = checkpoint.get("hyper_parameters") or {}
    vocab_size = int(hparams.get("vocab_size") or 0)
    data = dict(checkpoint.get("datamodule_hyper_parameters") or {})
    started = run_folder(checkpoint, path)
    for name in ("tokenizer", "cache_dir"):
        if data.get(name):
            data[name] = locate(str(data[name]), started) or data[name]
    objective = str(hparams.get("objective") or "mlm")
    found = tokenizer_of_run(data, vocab_size, objective, fingerprint=recorded_fingerprint(checkpoint))
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


def keep_tokenizer(source: str | Path, out: str | Path) -> Path:
    """Save the tokenizer of the run at ``source`` (a checkpoint, or a run's folder: its newest
    ``last*.ckpt``) into ``out``, which must be absent or empty; returns ``out``."""
    from tiedemb.training.checkpoints import last_checkpoints, read_checkpoint

    source, out = Path(source), Path(out)
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise UserError(f"{str(out)!r} already exists and is not an empty folder; a kept tokenizer is not overwritten")
    path = source if source.is_file() else next(iter(last_checkpoints([source])), None)
    if path is None:
        raise UserError(f"{str(source)!r} is neither a checkpoint file nor a run's folder with a last*.ckpt")
    tokenizer = run_tokenizer(read_checkpoint(path), path)  # the one of the run's recorded fingerprint
    if tokenizer is None:
        raise UserError(f"the run of {str(path)!r} trained on the embedded corpus, which has no tokenizer to keep")
    with atomic_directory(out, "tokenizer_config.json") as staging:
        tokenizer.save_pretrained(staging)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = CommandParser(prog="python -m tiedemb.data.tokenizers", description=__doc__.split("\n\n")[1])
    parser.add_argument("run", type=Path, help="a pretraining checkpoint, or a run's or sweep cell's folder")
    parser.add_argument("out", type=Path, help="the folder to save the tokenizer in (absent or empty)")
    args = parser.parse_args(argv)
    result = report_user_errors(lambda: keep_tokenizer(args.run, args.out))
    if isinstance(result, int):
        return result
    print(f"kept the run's tokenizer in {result}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
