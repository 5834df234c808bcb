"""``python -m tiedemb.export CHECKPOINT OUT``: a tiedemb checkpoint as a transformers model folder.

OUT gets ``config.json``, ``model.safetensors``, the run's tokenizer and a model card
(``README.md``), and loads with transformers' Auto classes without ``trust_remote_code``; which
class and how the weights map is ``tiedemb.weights.export_plan``. The folder is filled beside OUT
and renamed at the end, so a failure leaves nothing; an OUT that is not empty is never touched.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from tiedemb.errors import UserError, first_line
from tiedemb.options import add_weights_only
from tiedemb.training.exits import CommandParser, report_user_errors
from tiedemb.weights.export_plan import BERT_MODEL, OUTPUT_WEIGHT, ExportPlan, plan_export
from tiedemb.weights.source import checkpoint_kind

EXPORT_COMPLETE = "config.json"
"""The file whose presence marks a written export folder."""
MODEL_CARD = "README.md"
CAUSAL_INPUTS = ["input_ids", "attention_mask"]
"""What a causal LM's tokenizer hands the model: no token types, which GPT-NeoX's forward does not take."""


def task_labels(hparams: Mapping[str, Any]) -> tuple[str, ...] | None:
    """Class names of the GLUE task a classifier was fine-tuned on, if it is one tiedemb knows."""
    from tiedemb.data.glue_tasks import TASKS

    task = TASKS.get(str(hparams.get("task") or "").lower())
    if task is None or task.num_labels != hparams.get("num_labels"):
        return None
    return task.label_names


def load_run_tokenizer(name: str, vocab_size: int, described: str):
    """The tokenizer at ``name``, checked to have the model's vocabulary size."""
    from tiedemb.data.tokenizers import load_tokenizer

    try:
        tokenizer = load_tokenizer(name)
    except UserError as error:
        raise UserError(
            f"{described} {name!r} could not be loaded ({first_line(error).split('. ')[0].rstrip('.')}); "
            "pass --tokenizer PATH_OR_NAME, or --no-tokenizer to export the weights alone"
        ) from None
    if len(tokenizer) != vocab_size:
        raise UserError(
            f"{described} {name!r} has {len(tokenizer)} tokens, but the model's vocabulary has {vocab_size}; "
            "pass the tokenizer the model was trained with as --tokenizer"
        )
    return tokenizer


def find_tokenizer(checkpoint: Mapping[str, Any], path: Path, origin: str):
    """The tokenizer the run used, found from the data settings its checkpoint recorded
    (``tiedemb.data.tokenizers.run_tokenizer``: from the folder the run started in, or the current one)."""
    from tiedemb.data.tokenizers import has_no_tokenizer, run_tokenizer

    if has_no_tokenizer(checkpoint):
        vocab_size = (checkpoint.get("hyper_parameters") or {}).get("vocab_size")
        raise UserError(
            f"checkpoint {origin!r} was trained on the embedded synthetic corpus, which has no tokenizer; "
            "pass --no-tokenizer to export the weights alone (token ids are the corpus's word ids), or "
            f"--tokenizer with a tokenizer of {vocab_size} tokens"
        )
    try:
        return run_tokenizer(checkpoint, path)
    except UserError as error:
        found = first_line(error).split(". ")[0].rstrip(".")
        raise UserError(f"{found}; pass --tokenizer PATH_OR_NAME, or --no-tokenizer") from None


def build_model(plan: ExportPlan):
    """The transformers model of ``plan``, holding its weights."""
    import transformers

    config = getattr(transformers, plan.config_class)(**plan.config)
    if plan.model_class == BERT_MODEL:
        # Without the classifier's pooler there is none to write: a random one must not pass for trained.
        has_pooler = any(key.startswith("pooler.") for key in plan.state)
        model = transformers.BertModel(config, add_pooling_layer=has_pooler)
    else:
        model = getattr(transformers, plan.model_class)(config)
    result = model.load_state_dict(named_for(model, plan.state), strict=False)
    # The word table and the bias BERT's decoder ties to; a causal LM's output tied to its input table.
    tied = {"cls.predictions.decoder.weight", "cls.predictions.decoder.bias", OUTPUT_WEIGHT}
    parameters = {name for name, _ in model.named_parameters(remove_duplicate=False)}
    missing = [key for key in result.missing_keys if key not in tied and key in parameters]
    if missing or result.unexpected_keys:
        raise RuntimeError(
            f"the exported weights do not fill {plan.model_class}: missing {missing[:3]}, "
            f"unexpected {result.unexpected_keys[:3]}"
        )
    model.tie_weights()
    return model.eval()


def named_for(model, state: dict) -> dict:
    """``state`` with the output matrix under the name ``model`` gives it (GPT-NeoX's was ``embed_out``
    before transformers 5)."""
    if OUTPUT_WEIGHT not in state or model.get_output_embeddings() is None:
        return state
    weight = model.get_output_embeddings().weight
    name = next(name for name, parameter in model.named_parameters(remove_duplicate=False) if parameter is weight)
    return {(name if key == OUTPUT_WEIGHT else key): value for key, value in state.items()}


def check_out(out: Path) -> None:
    """Refuse an OUT that holds anything: nothing is ever written over."""
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise UserError(f"output {str(out)!r} exists and is not an empty folder; pass a new or empty folder")


def write_folder(plan: ExportPlan, tokenizer, out: Path, card: str) -> None:
    """Model, config, tokenizer and model card, filled in a sibling folder and renamed to ``out`` at the end."""
    from tiedemb.training.files import atomic_directory, ordinary_permissions
    from tiedemb.weights.bert import no_progress_bars

    model = build_model(plan)
    check_out(out)  # again: the folder may have been filled while the weights were mapped
    with no_progress_bars(), atomic_directory(out, EXPORT_COMPLETE) as staging:
        model.save_pretrained(str(staging))
        if tokenizer is not None:
            tokenizer.save_pretrained(str(staging))
        (staging / MODEL_CARD).write_text(card, encoding="utf-8")
        ordinary_permissions(staging)


def for_causal_lm(plan: ExportPlan, tokenizer) -> None:
    """A causal export's config gets the tokenizer's bos and eos ids (generation stops at eos), and
    the tokenizer hands the model no token types."""
    if tokenizer is None or not plan.causal:
        return
    eos = tokenizer.eos_token_id if tokenizer.eos_token_id is not None else tokenizer.sep_token_id
    plan.config.update(bos_token_id=tokenizer.bos_token_id, eos_token_id=eos)
    tokenizer.model_input_names = list(CAUSAL_INPUTS)
    tokenizer.init_kwargs["model_input_names"] = list(CAUSAL_INPUTS)  # what save_pretrained writes


def export(args: argparse.Namespace) -> str:
    """Write the export folder; returns the exported class's name."""
    from tiedemb.training.checkpoints import read_checkpoint
    from tiedemb.weights.model_card import model_card

    out = Path(args.out).expanduser()
    check_out(out)
    if args.tokenizer is not None and args.no_tokenizer:
        raise UserError("pass either --tokenizer or --no-tokenizer, not both")
    checkpoint = read_checkpoint(args.checkpoint, weights_only=args.weights_only)
    origin = str(args.checkpoint)
    if not isinstance(checkpoint, dict) or not checkpoint.get("state_dict"):
        raise UserError(f"checkpoint {origin!r} holds no model weights (state_dict)")
    hparams = dict(checkpoint.get("hyper_parameters") or {})
    kind = checkpoint_kind(checkpoint)
    if kind is None:
        raise UserError(
            f"checkpoint {origin!r} is neither a GlueModule's nor a PretrainModule's (no model.classifier "
            "or model.head weights)"
        )
    labels = task_labels(hparams) if kind == "glue" else None
    plan = plan_export(hparams, checkpoint["state_dict"], kind, labels, origin)
    vocab_size = int(plan.config["vocab_size"])
    if args.no_tokenizer:
        tokenizer = None
    elif args.tokenizer is not None:
        tokenizer = load_run_tokenizer(args.tokenizer, vocab_size, "--tokenizer")
    else:
        tokenizer = find_tokenizer(checkpoint, Path(args.checkpoint), origin)
    for_causal_lm(plan, tokenizer)
    card = model_card(checkpoint, plan.model_class, f"./{out.name}", tokenizer is not None)
    write_folder(plan, tokenizer, out, card)
    print(f"wrote {out} ({plan.model_class}{'' if tokenizer is not None else ', no tokenizer'})")
    return plan.model_class


def parser() -> CommandParser:
    parser = CommandParser(
        prog="tiedemb export",
        description="Write a tiedemb checkpoint as a transformers model folder (config.json, "
        "model.safetensors, tokenizer, README.md model card) that AutoModel* classes load without "
        "trust_remote_code (BERT for masked-LM and GLUE models; GPT-NeoX for next-token models).",
    )
    parser.add_argument("checkpoint", help="a GlueModule or PretrainModule .ckpt file")
    parser.add_argument("out", help="the folder to write (new or empty)")
    parser.add_argument(
        "--tokenizer", default=None, help="tokenizer directory or hub name; default: the one the run used"
    )
    parser.add_argument("--no-tokenizer", action="store_true", help="write the model without a tokenizer")
    add_weights_only(parser)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    result = report_user_errors(lambda: export(args))
    return result if isinstance(result, int) else 0


if __name__ == "__main__":
    sys.exit(main())
