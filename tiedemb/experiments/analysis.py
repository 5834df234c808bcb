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
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from tiedemb.errors import UserError

DEFAULT_PAIRS: tuple[tuple[str, str], ...] = (
    ("good", "great"), ("big", "large"), ("begin", "start"), ("small", "little"), ("fast", "quick"),
    ("happy", "glad"), ("end", "finish"), ("buy", "purchase"), ("answer", "reply"), ("child", "kid"),
    ("talk", "speak"), ("close", "shut"), ("rich", "wealthy"), ("sick", "ill"), ("smart", "clever"),
    ("often", "frequently"), ("show", "display"), ("choose", "select"), ("maybe", "perhaps"), ("road", "street"),
)
RANDOM_PAIRS = 2000
TOKEN_KEY_SUFFIX = "embedding.token.weight"


@dataclass
class EmbeddingAnalysis:
    vocab_size: int
    embedding_dim: int
    effective_rank: float
    isotropy: float
    random_pair_cosine: float
    synonym_cosine: float | None = None  # None without a tokenizer, or with no usable pair
    synonym_pairs: int = 0

    @property
    def effective_rank_share(self) -> float:
        return self.effective_rank / self.embedding_dim


def effective_rank(matrix: Tensor) -> float:
    """exp of the entropy of the normalised singular values; 0 for an all-zero matrix."""
    singular = torch.linalg.svdvals(matrix.double())
    total = singular.sum()
    if total <= 0:
        return 0.0
    p = singular / total
    p = p[p > 0]
    return float(torch.exp(-(p * p.log()).sum()))


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


def analyse(matrix: Tensor, tokenizer: Any | None = None, pairs: Sequence[tuple[str, str]] = DEFAULT_PAIRS,
            excluded_ids: Sequence[int] = ()) -> EmbeddingAnalysis:
    """Every analysis of one token embedding matrix. ``excluded_ids``: special tokens, kept out of random pairs."""
    matrix = matrix.detach().float().cpu()
    n, width = matrix.shape
    keep = torch.ones(n, dtype=torch.bool)
    keep[list(excluded_ids)] = False
    result = EmbeddingAnalysis(vocab_size=n, embedding_dim=width, effective_rank=effective_rank(matrix),
                               isotropy=isotropy(matrix),
                               random_pair_cosine=mean_cosine(matrix, random_pairs(keep.nonzero().squeeze(1))))
    if tokenizer is not None:
        ids = synonym_ids(tokenizer, pairs)
        ids = ids[(ids < n).all(dim=1)] if len(ids) else ids
        if len(ids):
            result.synonym_cosine, result.synonym_pairs = mean_cosine(matrix, ids), len(ids)
    return result


# --------------------------------------------------------------------------- checkpoints and tokenizers


def token_embedding(checkpoint: str | Path) -> Tensor:
    """The token embedding matrix in a Lightning checkpoint (or a plain state dict file)."""
    path = Path(checkpoint).expanduser()
    if not path.is_file():
        raise UserError(f"checkpoint {str(checkpoint)!r} does not exist")
    try:
        content = torch.load(path, map_location="cpu", weights_only=True, mmap=True)
    except Exception as error:  # noqa: BLE001 - every unreadable file gets the same message
        raise UserError(f"checkpoint {str(checkpoint)!r} could not be read: {str(error).splitlines()[0]}") from None
    state = content.get("state_dict", content) if isinstance(content, dict) else {}
    keys = [key for key in state if key.endswith(TOKEN_KEY_SUFFIX)]
    if not keys:
        raise UserError(f"checkpoint {str(checkpoint)!r} has no token embedding (a key ending in {TOKEN_KEY_SUFFIX!r})")
    return state[sorted(keys, key=len)[0]]


def load_tokenizer(name: str | None) -> Any | None:
    """The tokenizer at a local path (or in the local hub cache); ``None`` when it cannot be had offline."""
    if not name:
        return None
    from transformers import AutoTokenizer

    try:
        return AutoTokenizer.from_pretrained(name, local_files_only=True)
    except Exception:  # noqa: BLE001 - no tokenizer just means no synonym analysis
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


def analyse_checkpoint(checkpoint: str | Path, tokenizer_name: str | None = None,
                       pairs: Sequence[tuple[str, str]] = DEFAULT_PAIRS) -> EmbeddingAnalysis:
    tokenizer = load_tokenizer(tokenizer_name or _tokenizer_beside(Path(checkpoint)))
    special = list(getattr(tokenizer, "all_special_ids", []) or [])
    return analyse(token_embedding(checkpoint), tokenizer, pairs, excluded_ids=special)


def _tokenizer_beside(checkpoint: Path) -> str | None:
    """The tokenizer named by the run's saved config (``config.yaml`` in a folder above the checkpoint)."""
    import yaml

    for folder in checkpoint.resolve().parents:
        config = folder / "config.yaml"
        if config.is_file():
            try:
                data = (yaml.safe_load(config.read_text(encoding="utf-8")) or {}).get("data") or {}
            except yaml.YAMLError:
                return None
            return (data.get("init_args") or {}).get("tokenizer")
    return None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tiedemb.experiments.analysis", description=__doc__.split("\n\n")[0])
    parser.add_argument("checkpoint", type=Path)
    parser.add_argument("--tokenizer", help="tokenizer folder or cached hub name; default: the one the run's config names")
    parser.add_argument("--pairs", help="near-synonym pairs, e.g. good:great,big:large (default: a built-in list of 20)")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args(argv)
    try:
        pairs = parse_pairs(args.pairs) if args.pairs else DEFAULT_PAIRS
        result = analyse_checkpoint(args.checkpoint, args.tokenizer, pairs)
    except UserError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps({**asdict(result), "effective_rank_share": result.effective_rank_share}))
        return 0
    print(f"token embedding       {result.vocab_size} x {result.embedding_dim}")
    print(f"effective rank        {result.effective_rank:.1f} ({100 * result.effective_rank_share:.1f}% of d_e)")
    print(f"isotropy              {result.isotropy:.4f} (1 = isotropic)")
    print(f"random-pair cosine    {result.random_pair_cosine:+.4f}")
    if result.synonym_cosine is None:
        print("near-synonym cosine   n/a (no tokenizer, or no pair of single-token words)")
    else:
        gap = result.synonym_cosine - result.random_pair_cosine
        print(f"near-synonym cosine   {result.synonym_cosine:+.4f} over {result.synonym_pairs} pairs ({gap:+.4f} vs random)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
