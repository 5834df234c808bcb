"""Analyses of a token embedding matrix E (n x d_e), from any checkpoint.

``python -m tiedemb.experiments.analysis CKPT [--tokenizer DIR] [--pairs good:great,big:large]``

- **Effective rank** (Roy & Vetterli, 2007): with singular values s_k and p_k = s_k / sum(s),
  erank = exp(-sum p_k ln p_k). It is d_e for a matrix whose singular values are all equal and
  r for one with r equal non-zero values; a trained embedding's is far below d_e when many
  dimensions carry little.
- **Isotropy** (Mu & Viswanath, 2018): with the partition function Z(c) = sum_i exp(c . w_i),
  isotropy = min_c Z(c) / max_c Z(c) over the unit eigenvectors c of E^T E. It is 1 when the
  vectors spread evenly in every direction and tends to 0 when they share a dominant direction.
  The mean cosine of random token pairs is reported beside it (0 for isotropic vectors).
- **Near-synonyms**: the mean cosine similarity of word pairs such as good/great against that of
  random token pairs. Pairs whose words are not single tokens of the run's tokenizer are left out.
  Frequent tokens crowd together in a trained embedding whatever they mean, so the fair baseline
  is **frequency-matched** random pairs: for each word of a pair, tokens of about the same
  frequency rank in the run's training text (the ``train_files`` its config names, or
  ``--frequency-text``). The gap between the two is the crowding that meaning explains.
- **The embedding as the encoder sees it**: the token table through the d_e -> hidden projection
  and the embedding norm (rows of norm(E P^T)); its effective rank says how many directions the
  encoder actually receives, which a projection can neither add nor, if well-conditioned, remove.
"""

from __future__ import annotations

import functools
import json
import sys
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from tiedemb.errors import UserError
from tiedemb.options import add_weights_only
from tiedemb.training.exits import CommandParser, report_user_errors
from tiedemb.training.monitor import effective_rank

DEFAULT_PAIRS: tuple[tuple[str, str], ...] = (
    ("good", "great"),
    ("big", "large"),
    ("begin", "start"),
    ("small", "little"),
    ("fast", "quick"),
    ("happy", "glad"),
    ("end", "finish"),
    ("buy", "purchase"),
    ("answer", "reply"),
    ("child", "kid"),
    ("talk", "speak"),
    ("close", "shut"),
    ("rich", "wealthy"),
    ("sick", "ill"),
    ("smart", "clever"),
    ("often", "frequently"),
    ("show", "display"),
    ("choose", "select"),
    ("maybe", "perhaps"),
    ("road", "street"),
)
RANDOM_PAIRS = 2000
MATCHED_PER_PAIR = 64  # frequency-matched random pairs drawn per near-synonym pair
MATCH_WINDOW = 0.01  # a matched token's frequency rank is within this share of the vocabulary
FREQUENCY_TEXT_CHARS = 8_000_000  # enough text for stable ranks of the frequent words the pairs use
TOKEN_KEY_SUFFIX = "embedding.token.weight"
PROJECTION_KEY_SUFFIX = "embedding.projection.weight"
NORM_KEY_SUFFIX = "embedding.norm.weight"


@dataclass
class EmbeddingAnalysis:
    vocab_size: int
    embedding_dim: int
    effective_rank: float
    isotropy: float
    random_pair_cosine: float
    synonym_cosine: float | None = None  # None without a tokenizer, or with no usable pair
    synonym_pairs: int = 0
    matched_random_cosine: float | None = None  # frequency-matched baseline; None without token counts
    encoder_input_effective_rank: float | None = None  # of norm(E P^T); None without the embedding's weights

    @property
    def synonym_gap(self) -> float | None:
        """Near-synonym cosine minus the frequency-matched baseline (the uniform one without counts)."""
        if self.synonym_cosine is None:
            return None
        baseline = self.matched_random_cosine if self.matched_random_cosine is not None else self.random_pair_cosine
        return self.synonym_cosine - baseline

    @property
    def effective_rank_share(self) -> float:
        return self.effective_rank / self.embedding_dim


def isotropy(matrix: Tensor) -> float:
    """min over max of the partition function over the eigenvectors of E^T E (log domain: no overflow)."""
    rows = matrix.double()
    _, vectors = torch.linalg.eigh(rows.T @ rows)
    log_z = torch.logsumexp(rows @ vectors, dim=0)  # one log Z(c) per eigenvector c
    return float(torch.exp(log_z.min() - log_z.max()))


def mean_cosine(matrix: Tensor, pairs: Tensor) -> float:
    """Mean cosine similarity of the rows indexed by ``pairs`` (k x 2)."""
    a, b = matrix[pairs[:, 0]].double(), matrix[pairs[:, 1]].double()
    return float(torch.nn.functional.cosine_similarity(a, b, dim=-1).mean())


def random_pairs(candidates: Tensor, count: int = RANDOM_PAIRS, seed: int = 0) -> Tensor:
    """``count`` pairs of distinct ids drawn from ``candidates`` with a fixed seed."""
    generator = torch.Generator().manual_seed(seed)
    first = candidates[torch.randint(len(candidates), (count,), generator=generator)]
    second = candidates[torch.randint(len(candidates), (count,), generator=generator)]
    keep = first != second
    return torch.stack([first[keep], second[keep]], dim=1)


def synonym_ids(tokenizer: Any, pairs: Sequence[tuple[str, str]]) -> Tensor:
    """Token-id pairs of the word pairs whose words are each one token (k x 2, maybe empty)."""
    found = []
    for first, second in pairs:
        ids = [tokenizer.encode(word, add_special_tokens=False) for word in (first, second)]
        if all(len(word_ids) == 1 for word_ids in ids) and ids[0] != ids[1]:
            found.append([ids[0][0], ids[1][0]])
    return torch.tensor(found, dtype=torch.long).reshape(-1, 2)


def frequency_matched_pairs(
    pairs: Tensor,
    counts: Tensor,
    excluded: Tensor,
    per_pair: int = MATCHED_PER_PAIR,
    window: float = MATCH_WINDOW,
    seed: int = 0,
) -> Tensor:
    """Random pairs whose two tokens have about the frequency ranks of each given pair's two tokens.

    ``counts``: occurrences of each token id in the training text; ``excluded``: a mask of ids
    never drawn (special tokens). Each word of a pair is replaced by a token drawn uniformly from
    the ``window`` share of the vocabulary nearest to it in frequency rank (at least 10 tokens).
    """
    generator = torch.Generator().manual_seed(seed)
    allowed = (~excluded).nonzero().squeeze(1)
    order = allowed[torch.argsort(counts[allowed].double(), descending=True, stable=True)]
    rank = torch.full((len(counts),), -1, dtype=torch.long)
    rank[order] = torch.arange(len(order))
    half = max(5, int(window * len(order) / 2))
    drawn = []
    for first, second in pairs.tolist():
        sides = []
        for token in (first, second):
            centre = int(rank[token]) if rank[token] >= 0 else 0
            low, high = max(0, centre - half), min(len(order), centre + half + 1)
            sides.append(order[low + torch.randint(high - low, (per_pair,), generator=generator)])
        keep = sides[0] != sides[1]
        drawn.append(torch.stack([sides[0][keep], sides[1][keep]], dim=1))
    return torch.cat(drawn) if drawn else torch.empty(0, 2, dtype=torch.long)


def encoder_input(
    matrix: Tensor, projection: Tensor | None, norm_weight: Tensor | None, norm_bias: Tensor | None, eps: float = 1e-12
) -> Tensor:
    """Token rows as the encoder receives them: E P^T, then the embedding's LayerNorm (or RMSNorm)."""
    rows = matrix.double() @ projection.double().T if projection is not None else matrix.double()
    if norm_weight is None:
        return rows
    if norm_bias is not None:
        return torch.nn.functional.layer_norm(rows, rows.shape[-1:], norm_weight.double(), norm_bias.double(), eps)
    return torch.nn.functional.rms_norm(rows, rows.shape[-1:], norm_weight.double(), eps)


def analyse(
    matrix: Tensor,
    tokenizer: Any | None = None,
    pairs: Sequence[tuple[str, str]] = DEFAULT_PAIRS,
    excluded_ids: Sequence[int] = (),
    counts: Tensor | None = None,
    encoder_rows: Tensor | None = None,
) -> EmbeddingAnalysis:
    """Every analysis of one token embedding matrix. ``excluded_ids``: special tokens, kept out of
    random pairs; ``counts``: token frequencies in the training text, for the frequency-matched
    baseline; ``encoder_rows``: the table as the encoder sees it (``encoder_input``)."""
    matrix = matrix.detach().float().cpu()
    n, width = matrix.shape
    keep = torch.ones(n, dtype=torch.bool)
    keep[list(excluded_ids)] = False
    if int(keep.sum()) < 2:
        # no pair of ordinary tokens to compare (a vocabulary of special tokens only): a report says so and goes on
        raise UserError(f"its vocabulary of {n} holds {int(keep.sum())} token(s) besides the special ones; too few")
    result = EmbeddingAnalysis(
        vocab_size=n,
        embedding_dim=width,
        effective_rank=effective_rank(matrix),
        isotropy=isotropy(matrix),
        random_pair_cosine=mean_cosine(matrix, random_pairs(keep.nonzero().squeeze(1))),
    )
    if tokenizer is not None:
        ids = synonym_ids(tokenizer, pairs)
        ids = ids[(ids < n).all(dim=1)] if len(ids) else ids
        if len(ids):
            result.synonym_cosine, result.synonym_pairs = mean_cosine(matrix, ids), len(ids)
            if counts is not None and len(counts) >= n:
                matched = frequency_matched_pairs(ids, counts[:n], ~keep)
                result.matched_random_cosine = mean_cosine(matrix, matched) if len(matched) else None
    if encoder_rows is not None:
        result.encoder_input_effective_rank = effective_rank(encoder_rows)
    return result


# --------------------------------------------------------------------------- checkpoints and tokenizers


def embedding_weights(checkpoint: str | Path, weights_only: bool = True) -> dict[str, Tensor | None]:
    """The token table, and the projection and embedding-norm weights where the model has them."""
    from tiedemb.training.checkpoints import load_checkpoint_file

    content = load_checkpoint_file(checkpoint, weights_only)  # a run's checkpoint or a bare state dict
    state = content.get("state_dict", content) if isinstance(content, dict) else {}
    keys = [key for key in state if key.endswith(TOKEN_KEY_SUFFIX)]
    if not keys:
        raise UserError(f"checkpoint {str(checkpoint)!r} has no token embedding (a key ending in {TOKEN_KEY_SUFFIX!r})")
    token_key = sorted(keys, key=len)[0]
    prefix = token_key[: -len(TOKEN_KEY_SUFFIX)]
    norm_key = prefix + NORM_KEY_SUFFIX
    return {
        "token": state[token_key],
        "projection": state.get(prefix + PROJECTION_KEY_SUFFIX),
        "norm_weight": state.get(norm_key),
        "norm_bias": state.get(norm_key.removesuffix("weight") + "bias"),
    }


def token_counts(
    tokenizer: Any, files: Sequence[str], vocab_size: int, max_chars: int = FREQUENCY_TEXT_CHARS
) -> Tensor | None:
    """Occurrences of each token id in up to ``max_chars`` of the given text files; ``None`` if none is readable."""
    counts = torch.zeros(vocab_size, dtype=torch.long)
    remaining, read_any = max_chars, False
    for name in files:
        path = Path(name).expanduser()
        if remaining <= 0 or not path.is_file() or path.suffix not in ("", ".txt"):
            continue
        with open(path, encoding="utf-8", errors="replace") as handle:
            lines = []
            for line in handle:
                lines.append(line)
                remaining -= len(line)
                if remaining <= 0:
                    break
        read_any = True
        for start in range(0, len(lines), 1000):
            # Whole lines, longer than the model's positions: only counted, never run through a
            # model, so transformers' "will result in indexing errors" warning does not apply.
            for ids in tokenizer(lines[start : start + 1000], add_special_tokens=False, verbose=False)["input_ids"]:
                counts += torch.bincount(torch.tensor(ids, dtype=torch.long), minlength=vocab_size)[:vocab_size]
    return counts if read_any else None


@functools.lru_cache(maxsize=8)  # a report analyses many runs of one tokenizer
def load_tokenizer(name: str | None) -> Any | None:
    """The tokenizer at a local path (or in the local hub cache); ``None`` when it cannot be had offline."""
    if not name:
        return None
    from transformers import AutoTokenizer

    try:
        return AutoTokenizer.from_pretrained(name, local_files_only=True)
    except Exception:
        return None


def parse_pairs(text: str) -> list[tuple[str, str]]:
    """``good:great,big:large`` -> [("good", "great"), ("big", "large")]."""
    pairs = []
    for item in filter(None, (part.strip() for part in text.split(","))):
        words = item.split(":")
        if len(words) != 2 or not all(words):
            raise UserError(f"--pairs: {item!r} is not a pair; write word:word, separated by commas")
        pairs.append((words[0].strip(), words[1].strip()))
    return pairs


def analyse_checkpoint(
    checkpoint: str | Path,
    tokenizer_name: str | None = None,
    pairs: Sequence[tuple[str, str]] = DEFAULT_PAIRS,
    frequency_files: Sequence[str] | None = None,
    weights_only: bool = True,
) -> EmbeddingAnalysis:
    """``frequency_files``: text whose token counts match random pairs to the synonyms' frequency;
    default the ``train_files`` of the run's saved config. ``weights_only=False`` unpickles a
    checkpoint holding Python objects (only for a file you trust)."""
    data = _data_beside(Path(checkpoint))
    name = tokenizer_name or data.get("tokenizer")
    tokenizer = load_tokenizer(name)
    special = list(getattr(tokenizer, "all_special_ids", []) or [])
    weights = embedding_weights(checkpoint, weights_only)
    matrix = weights["token"]
    files = list(frequency_files) if frequency_files is not None else list(data.get("train_files") or [])
    counts = _training_text_counts(name, tuple(files), matrix.shape[0]) if tokenizer is not None and files else None
    rows = encoder_input(matrix, weights["projection"], weights["norm_weight"], weights["norm_bias"])
    return analyse(matrix, tokenizer, pairs, excluded_ids=special, counts=counts, encoder_rows=rows)


@functools.lru_cache(maxsize=8)
def _training_text_counts(tokenizer_name: str, files: tuple[str, ...], vocab_size: int) -> Tensor | None:
    """``token_counts`` once per tokenizer and text: a sweep's runs share both, and the counts
    (read-only here) cost a pass of the tokenizer over megabytes of text."""
    return token_counts(load_tokenizer(tokenizer_name), files, vocab_size)


def _data_beside(checkpoint: Path) -> dict[str, Any]:
    """The data settings of the run's saved config (``config.yaml`` in a folder above the checkpoint),
    with relative paths made absolute against the folder the run was started from when known."""
    import yaml

    for folder in checkpoint.resolve().parents:
        config = folder / "config.yaml"
        if config.is_file():
            try:
                data = (yaml.safe_load(config.read_text(encoding="utf-8")) or {}).get("data") or {}
            except yaml.YAMLError:
                return {}
            settings = dict(data.get("init_args") or {})
            # A sweep cell records the folder its run started in: relative data paths are from there.
            workdir = _cell_workdir(folder)
            if workdir is not None and settings.get("train_files"):
                settings["train_files"] = [str(workdir / Path(name).expanduser()) for name in settings["train_files"]]
            return settings
    return {}


def _cell_workdir(folder: Path) -> Path | None:
    try:
        recorded = json.loads((folder / "cell.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    workdir = recorded.get("workdir") if isinstance(recorded, dict) else None
    return Path(workdir) if workdir else None


def parser() -> CommandParser:
    parser = CommandParser(prog="tiedemb analyse", description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "checkpoint", type=Path, help="a PretrainModule or GlueModule .ckpt file (its token table is analysed)"
    )
    parser.add_argument(
        "--tokenizer", help="tokenizer folder or cached hub name; default: the one the run's config names"
    )
    parser.add_argument(
        "--pairs", help="near-synonym pairs, e.g. good:great,big:large (default: a built-in list of 20)"
    )
    parser.add_argument(
        "--frequency-text",
        nargs="+",
        metavar="FILE",
        help="text for the frequency-matched baseline; default: the run's train_files",
    )
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    add_weights_only(parser)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    result = report_user_errors(
        lambda: analyse_checkpoint(
            args.checkpoint,
            args.tokenizer,
            parse_pairs(args.pairs) if args.pairs else DEFAULT_PAIRS,
            args.frequency_text,
            args.weights_only,
        )
    )
    if isinstance(result, int):  # the exit status of a user error, already reported
        return result
    if args.json:
        print(
            json.dumps(
                {
                    **asdict(result),
                    "effective_rank_share": result.effective_rank_share,
                    "synonym_gap": result.synonym_gap,
                }
            )
        )
        return 0
    print(f"token embedding       {result.vocab_size} x {result.embedding_dim}")
    print(f"effective rank        {result.effective_rank:.1f} ({100 * result.effective_rank_share:.1f}% of d_e)")
    print(f"isotropy              {result.isotropy:.4f} (1 = isotropic)")
    if result.encoder_input_effective_rank is not None:
        print(f"as the encoder sees it {result.encoder_input_effective_rank:.1f} (effective rank of norm(E P^T))")
    print(f"random-pair cosine    {result.random_pair_cosine:+.4f}")
    if result.matched_random_cosine is not None:
        print(
            f"frequency-matched     {result.matched_random_cosine:+.4f} (random pairs of the synonyms' frequency ranks)"
        )
    if result.synonym_cosine is None:
        print("near-synonym cosine   n/a (no tokenizer, or no pair of single-token words)")
    else:
        baseline = "frequency-matched" if result.matched_random_cosine is not None else "random"
        print(
            f"near-synonym cosine   {result.synonym_cosine:+.4f} over {result.synonym_pairs} pairs "
            f"({result.synonym_gap:+.4f} vs {baseline})"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
