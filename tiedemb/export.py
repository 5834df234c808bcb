"""``python -m tiedemb.export CHECKPOINT OUT``: a next-token tiedemb checkpoint as a transformers
GPT-NeoX folder.

OUT gets ``config.json``, ``model.safetensors``, the run's tokenizer and a model card
(``README.md``), and loads with ``AutoModelForCausalLM`` without ``trust_remote_code``; how the
weights map is ``tiedemb.weights.export_plan``. The folder is filled beside OUT and renamed at the
end, so a failure leaves nothing; an OUT that is not empty is never touched.
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
from tiedemb.weights.export_plan import NEOX, OUTPUT_WEIGHT, ExportPlan, plan_export
from tiedemb.weights.source import checkpoint_kind

EXPORT_COMPLETE = "config.json"
"""The file whose presence marks a written export folder."""
CAUSAL_INPUTS = ["input_ids", "attention_mask"]
"""What a causal LM's tokenizer hands the model: no token types, which GPT-NeoX's forward does not take."""
#: Settings that say how a run was executed, not what it learned from: left off the model card.
RUNTIME_SETTINGS = {"num_proc", "num_workers", "pin_memory", "cache_dir", "encoding_errors", "compile", "peak_flops"}


def export_tokenizer(args: argparse.Namespace, checkpoint: Mapping[str, Any], vocab_size: int):
    """The tokenizer to write: none with ``--no-tokenizer``, ``--tokenizer``'s (of the model's vocabulary
    size), else the run's, found from the data settings its checkpoint recorded (``run_tokenizer``)."""
    from tiedemb.data.tokenizers import has_no_tokenizer, load_tokenizer, run_tokenizer

    named = args.tokenizer
    if args.no_tokenizer:
        return None
    if named is None and has_no_tokenizer(checkpoint):
        raise UserError(
            f"checkpoint {str(args.checkpoint)!r} was trained on the embedded synthetic corpus, which has no "
            "tokenizer; pass --no-tokenizer to export the weights alone (token ids are the corpus's word ids), "
            f"or --tokenizer with a tokenizer of {vocab_size} tokens"
        )
    try:
        tokenizer = run_tokenizer(checkpoint, Path(args.checkpoint)) if named is None else load_tokenizer(named)
    except UserError as error:
        found = first_line(error).split(". ")[0].rstrip(".")
        failed = found if named is None else f"--tokenizer {named!r} could not be loaded ({found})"
        raise UserError(
            f"{failed}; pass --tokenizer PATH_OR_NAME, or --no-tokenizer to export the weights alone"
        ) from None
    if named is not None and len(tokenizer) != vocab_size:
        raise UserError(
            f"--tokenizer {named!r} has {len(tokenizer)} tokens, but the model's vocabulary has {vocab_size}; "
            "pass the tokenizer the model was trained with as --tokenizer"
        )
    return tokenizer


def build_model(plan: ExportPlan):
    """The ``GPTNeoXForCausalLM`` of ``plan``, holding its weights."""
    from transformers import GPTNeoXConfig, GPTNeoXForCausalLM

    model = GPTNeoXForCausalLM(GPTNeoXConfig(**plan.config))
    # The output matrix's name: ``embed_out`` before transformers 5, ``lm_head`` since (the last of
    # the names it has: tied, the input table's comes first).
    parameters = dict(model.named_parameters(remove_duplicate=False))
    output = [name for name, weight in parameters.items() if weight is model.get_output_embeddings().weight][-1]
    state = {(output if key == OUTPUT_WEIGHT else key): value for key, value in plan.state.items()}
    result = model.load_state_dict(state, strict=False)
    missing = [key for key in result.missing_keys if key != output and key in parameters]  # tied: the input table
    if missing or result.unexpected_keys:
        raise RuntimeError(
            f"the exported weights do not fill {NEOX}: missing {missing[:3]}, unexpected {result.unexpected_keys[:3]}"
        )
    model.tie_weights()
    return model.eval()


def shown(value: Any) -> Any:
    """``value`` for the model card: a local path as its last part (where a run's files lay is true
    nowhere else), lists and mappings looked into."""
    if isinstance(value, (list, tuple)):
        return [shown(item) for item in value]
    if isinstance(value, Mapping):
        return {str(key): shown(item) for key, item in value.items()}
    if isinstance(value, str) and (value.startswith(("/", "~", ".")) or Path(value).expanduser().exists()):
        return Path(value).name or value
    return value if value is None or isinstance(value, (str, int, float, bool)) else str(value)


def model_card(checkpoint: Mapping[str, Any], location: str, has_tokenizer: bool) -> str:
    """The folder's README.md: hub metadata, how to load it, the run's settings, step and monitored scores."""
    import yaml

    metrics = {}
    for state in (checkpoint.get("callbacks") or {}).values():
        if isinstance(state, Mapping) and state.get("monitor"):
            for key, when in (("best_model_score", "best"), ("current_score", "at this checkpoint")):
                if state.get(key) is not None:
                    metrics[f"{state['monitor']} ({when})"] = round(float(state[key]), 6)
    settings = {
        part: {
            key: shown(value)
            for key, value in (checkpoint.get(entry) or {}).items()
            if not key.startswith("_") and key not in RUNTIME_SETTINGS
        }
        for part, entry in (("model", "hyper_parameters"), ("data", "datamodule_hyper_parameters"))
    }
    training = {**settings, "global_step": checkpoint.get("global_step"), "metrics": metrics}
    loading = f"model = AutoModelForCausalLM.from_pretrained({location!r})"
    if has_tokenizer:
        loading += f"\ntokenizer = AutoTokenizer.from_pretrained({location!r})"
    else:
        loading += "\n# the folder holds no tokenizer: token ids are the ones the run was trained on"
    return (
        "---\nlicense: apache-2.0\nlibrary_name: transformers\npipeline_tag: text-generation\ntags: [tiedemb]\n---\n\n"
        f"# {Path(location).name}\n\n"
        f"A `{NEOX}` trained with tiedemb; it computes what the tiedemb model computed (to float rounding).\n\n"
        f"```python\nfrom transformers import AutoModelForCausalLM, AutoTokenizer\n\n{loading}\n```\n\n"
        f"## Training\n\nThe run's settings, step and monitored scores:\n\n"
        f"```yaml\n{yaml.safe_dump(training, sort_keys=False)}```\n\n## License\n\nApache-2.0.\n"
    )


def check_out(out: Path) -> None:
    """Refuse an OUT that holds anything: nothing is ever written over."""
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise UserError(f"output {str(out)!r} exists and is not an empty folder; pass a new or empty folder")


def export(args: argparse.Namespace) -> None:
    """Write the export folder: model, config, tokenizer and model card, filled in a sibling folder
    and renamed to OUT at the end."""
    from tiedemb.training.checkpoints import read_checkpoint
    from tiedemb.training.files import atomic_directory, ordinary_permissions
    from tiedemb.weights.bert import no_progress_bars

    out = Path(args.out).expanduser()
    check_out(out)
    if args.tokenizer is not None and args.no_tokenizer:
        raise UserError("pass either --tokenizer or --no-tokenizer, not both")
    checkpoint = read_checkpoint(args.checkpoint, weights_only=args.weights_only)
    origin = str(args.checkpoint)
    kind = checkpoint_kind(checkpoint) if isinstance(checkpoint, dict) and checkpoint.get("state_dict") else None
    if kind is None:
        raise UserError(f"checkpoint {origin!r} is neither a GlueModule's nor a PretrainModule's (no model weights)")
    plan = plan_export(dict(checkpoint.get("hyper_parameters") or {}), checkpoint["state_dict"], kind, origin)
    tokenizer = export_tokenizer(args, checkpoint, int(plan.config["vocab_size"]))
    if tokenizer is not None:  # generation stops at eos; GPT-NeoX's forward takes no token types
        eos = tokenizer.eos_token_id if tokenizer.eos_token_id is not None else tokenizer.sep_token_id
        plan.config.update(bos_token_id=tokenizer.bos_token_id, eos_token_id=eos)
        tokenizer.model_input_names = list(CAUSAL_INPUTS)
        tokenizer.init_kwargs["model_input_names"] = list(CAUSAL_INPUTS)  # what save_pretrained writes
    card = model_card(checkpoint, f"./{out.name}", tokenizer is not None)
    model = build_model(plan)
    check_out(out)  # again: the folder may have been filled while the weights were mapped
    with no_progress_bars(), atomic_directory(out, EXPORT_COMPLETE) as staging:
        model.save_pretrained(str(staging))
        if tokenizer is not None:
            tokenizer.save_pretrained(str(staging))
        (staging / "README.md").write_text(card, encoding="utf-8")
        ordinary_permissions(staging)
    print(f"wrote {out} ({NEOX}{'' if tokenizer is not None else ', no tokenizer'})")


def parser() -> CommandParser:
    parser = CommandParser(
        prog="tiedemb export",
        description="Write a next-token tiedemb checkpoint as a transformers GPT-NeoX folder (config.json, "
        "model.safetensors, tokenizer, README.md model card) that AutoModelForCausalLM loads without "
        "trust_remote_code.",
    )
    parser.add_argument("checkpoint", help="a next-token PretrainModule's .ckpt file")
    parser.add_argument("out", help="the folder to write (new or empty)")
    parser.add_argument(
        "--tokenizer", default=None, help="tokenizer directory or hub name; default: the one the run used"
    )
    parser.add_argument("--no-tokenizer", action="store_true", help="write the model without a tokenizer")
    add_weights_only(parser)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    return report_user_errors(lambda: export(args)) or 0


if __name__ == "__main__":
    sys.exit(main())
