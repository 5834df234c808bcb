"""``tiedemb generate RUN --prompt TEXT``: a next-token run's model continues a prompt.

RUN is a run folder (``runs/<name>``: its ``checkpoints/best.ckpt``, else ``last.ckpt``;
``--checkpoint`` picks another) or a ``.ckpt`` file, from any folder. The prompt is encoded with
the run's own tokenizer (``tiedemb.data.text.run_tokenizer``) and the continuation printed as text.
A run of the embedded Markov corpus has no tokenizer: its prompt is token ids separated by spaces
(``--prompt "5 17 3"``) and the continuation is printed as ids. Sampling: ``--temperature``
(0: greedy), ``--top-k``, ``--top-p``, ``--seed``; generation stops at ``--max-new-tokens`` or at
the tokenizer's end-of-text token.

Refused in one line, exit status 2, nothing written: a GLUE run, a masked-token (``mlm``) run, a
missing run or checkpoint, an empty prompt, a prompt of ids outside the vocabulary.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from tiedemb.errors import UserError
from tiedemb.options import NonNegativeFloat, PositiveInt, UnitFraction, add_run_checkpoint_options, number_type
from tiedemb.training.exits import CommandParser, report_user_errors


def model_kind(checkpoint: dict[str, Any]) -> str:
    """``glue``, ``clm`` or ``mlm``: what the checkpoint's model was trained for."""
    from tiedemb.weights.source import checkpoint_kind

    if checkpoint_kind(checkpoint) == "glue":
        return "glue"
    return "clm" if (checkpoint.get("hyper_parameters") or {}).get("objective") == "clm" else "mlm"


def refuse_other_kinds(kind: str, origin: str) -> None:
    if kind == "glue":
        raise UserError(
            f"{origin!r} is a GLUE classifier, which does not generate text; `tiedemb predict {origin} "
            "--input pairs.tsv` labels sentence pairs with it"
        )
    if kind == "mlm":
        raise UserError(
            f"{origin!r} is a masked-token (model.objective=mlm) run, which fills in masked tokens and does "
            "not continue text; generate takes a next-token run (model.objective=clm)"
        )


def prompt_ids(prompt: str, tokenizer, vocab_size: int) -> list[int]:
    """The prompt as token ids: encoded by the run's tokenizer, or read as ids where it has none."""
    if not prompt.strip():
        raise UserError("--prompt is empty; give the text the model continues")
    if tokenizer is not None:
        ids = tokenizer(prompt, add_special_tokens=False)["input_ids"]
        if not ids:
            raise UserError(f"--prompt {prompt!r} encodes to no tokens with the run's tokenizer")
        return list(ids)
    try:
        ids = [int(token) for token in prompt.split()]
    except ValueError:
        raise UserError(
            f"--prompt {prompt!r}: this run trained on the embedded Markov corpus, which has no tokenizer; "
            f"give token ids separated by spaces (0 to {vocab_size - 1}), e.g. --prompt '5 17 3'"
        ) from None
    if any(not 0 <= token < vocab_size for token in ids):
        raise UserError(f"--prompt {prompt!r}: token ids run from 0 to {vocab_size - 1}")
    return ids


def next_token_scores(logits, temperature: float, top_k: int | None, top_p: float | None):
    """The last position's logits (B, vocab) through transformers' own temperature, top-k and top-p
    (nucleus) warpers: the tokens they rule out set to -inf."""
    from transformers import TemperatureLogitsWarper, TopKLogitsWarper, TopPLogitsWarper

    scores = TemperatureLogitsWarper(temperature)(None, logits.float())
    if top_k is not None:
        scores = TopKLogitsWarper(top_k)(None, scores)
    if top_p is not None and top_p < 1.0:
        scores = TopPLogitsWarper(top_p)(None, scores)
    return scores


def continue_tokens(
    model, input_ids, max_new_tokens: int, *, temperature=1.0, top_k=None, top_p=None, stop_id=None, generator=None
):
    """``input_ids`` (1, T) followed by up to ``max_new_tokens`` new ids, stopping after ``stop_id``.

    No key/value cache: each new token runs the model over the whole context again (the last
    ``max_position_embeddings`` tokens), which costs nothing worth saving at the sizes tiedemb
    trains and keeps the model's own forward the only code path. ``temperature`` 0 is greedy.
    """
    import torch

    window = model.config.max_position_embeddings
    ids = input_ids
    with torch.no_grad():
        for _ in range(max_new_tokens):
            logits = model(ids[:, -window:]).logits[:, -1, :]
            if temperature == 0:
                chosen = logits.argmax(dim=-1, keepdim=True)
            else:
                probabilities = torch.softmax(next_token_scores(logits, temperature, top_k, top_p), dim=-1)
                chosen = torch.multinomial(probabilities, 1, generator=generator)
            ids = torch.cat([ids, chosen.to(ids.dtype)], dim=1)
            if stop_id is not None and int(chosen) == stop_id:
                break
    return ids


def generate(args: argparse.Namespace) -> str:
    """The prompt and its continuation, as text (or ids)."""
    import torch

    from tiedemb.data.text import run_tokenizer
    from tiedemb.data.tokenizers import has_no_tokenizer
    from tiedemb.modules.pretrain import PretrainModule
    from tiedemb.training.checkpoints import read_checkpoint
    from tiedemb.training.run_checkpoint import run_checkpoint

    path = run_checkpoint(args.run, args.checkpoint)
    checkpoint = read_checkpoint(path, weights_only=args.weights_only)
    refuse_other_kinds(model_kind(checkpoint), str(args.run))
    tokenizer = None if has_no_tokenizer(checkpoint) else run_tokenizer(checkpoint, path)
    vocab_size = int((checkpoint.get("hyper_parameters") or {}).get("vocab_size") or 0)
    ids = prompt_ids(args.prompt, tokenizer, vocab_size)
    module = PretrainModule.load_from_checkpoint(path, map_location="cpu", weights_only=args.weights_only).eval()
    del checkpoint
    stop = None if tokenizer is None else (tokenizer.eos_token_id or tokenizer.sep_token_id)
    generator = torch.Generator().manual_seed(args.seed)
    output = continue_tokens(
        module.model,
        torch.tensor([ids]),
        args.max_new_tokens,
        temperature=args.temperature,
        top_k=args.top_k,
        top_p=args.top_p,
        stop_id=stop,
        generator=generator,
    )[0].tolist()
    if tokenizer is None:
        return " ".join(map(str, output))
    return tokenizer.decode(output, skip_special_tokens=True)


def parser() -> CommandParser:
    parser = CommandParser(
        prog="tiedemb generate",
        description="Continue a prompt with a next-token run's model and its tokenizer (a run of the embedded "
        "corpus: token ids in, token ids out).",
    )
    parser.add_argument("run", help="a run folder (runs/<name>) or a .ckpt file")
    parser.add_argument("--prompt", required=True, help="the text to continue (embedded corpus: token ids)")
    parser.add_argument(
        "--max-new-tokens", type=number_type(PositiveInt), default=40, help="tokens to add at most (default 40)"
    )
    parser.add_argument(
        "--temperature",
        type=number_type(NonNegativeFloat),
        default=1.0,
        help="sampling temperature; 0 picks the most likely token each time (default 1)",
    )
    parser.add_argument("--top-k", type=number_type(PositiveInt), default=None, help="draw from the k likeliest tokens")
    parser.add_argument(
        "--top-p", type=number_type(UnitFraction), default=None, help="draw from the likeliest tokens holding this mass"
    )
    parser.add_argument("--seed", type=int, default=0, help="the random seed of the draws (default 0)")
    add_run_checkpoint_options(parser)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    result = report_user_errors(lambda: generate(args))
    if isinstance(result, int):  # the exit status of a user error, already reported
        return result
    print(result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
