"""python -m tiedemb.export of next-token models: transformers causal LMs that give tiedemb's logits,
the model card and modes every export gets, and what is refused.

The study's variants are built from their own config files at configs/scale/tiny.yaml's size without
training, and their weights then moved off their initial values: the recipe starts residual branches
at zero, which would hide a misplaced attention or MLP weight. One real run on made-up text checks
the whole path, with the tokenizer it trained.
"""

from __future__ import annotations

import json
import os
import random
import stat
from pathlib import Path

import pytest
import torch
from export_helpers import refused, save_module
from run_dirs import run_checkpoint

from tiedemb import GlueModule, PretrainModule
from tiedemb.cli import main as cli_main
from tiedemb.export import build_model
from tiedemb.export import main as export
from tiedemb.weights.export_plan import plan_export

ROOT = Path(__file__).resolve().parents[1]
CONFIGS = ROOT / "configs"
TINY = CONFIGS / "scale" / "tiny.yaml"
QUIET = [
    "--trainer.logger=false",
    "--trainer.enable_progress_bar=false",
    "--trainer.enable_model_summary=false",
    "--trainer.num_sanity_val_steps=0",
]
WORDS = "the a cat dog man woman sat ran saw sees big small red on under near house park and with .".split()
SMALL = dict(
    vocab_size=50,
    hidden_size=16,
    num_layers=2,
    num_heads=2,
    intermediate_size=32,
    max_position_embeddings=32,
    objective="clm",
    position="rope",
    norm_position="pre",
    type_vocab_size=0,
    dropout=0.0,
    attention_dropout=0.0,
)
BERT_HEAD = dict(
    objective="mlm",
    position="learned",
    norm_position="post",
    type_vocab_size=2,
    head="tied_orth",
    head_bias=True,
    head_activation="gelu",
    head_norm=True,
    output_bias=True,
)


def shaken(module: PretrainModule, seed: int = 0) -> PretrainModule:
    """``module`` with every weight moved off its initial value (zero branches, unit norms), in eval mode."""
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for parameter in module.parameters():
            parameter.add_(0.2 * torch.randn(parameter.shape, generator=generator))
    return module.eval()


def assert_same_logits(module: PretrainModule, folder: Path) -> None:
    """The folder, loaded by ``AutoModelForCausalLM``, gives the module's logits at every real position
    of a right-padded batch (tiedemb's padding side)."""
    from transformers import AutoModelForCausalLM

    theirs = AutoModelForCausalLM.from_pretrained(str(folder)).eval()
    input_ids = torch.randint(0, module.config.vocab_size, (2, 24), generator=torch.Generator().manual_seed(1))
    mask = torch.ones_like(input_ids)
    mask[1, 17:] = 0
    with torch.no_grad():
        expected = module.model(input_ids).logits
        actual = theirs(input_ids=input_ids, attention_mask=mask).logits
    torch.testing.assert_close(actual[mask.bool()], expected[mask.bool()], atol=1e-4, rtol=0)


def exported_config(folder: Path) -> dict:
    return json.loads((folder / "config.json").read_text())


# --------------------------------------------------------------------------- the study's variants


def variant_checkpoint(tmp_path: Path, config: str, overrides: list[str]) -> tuple[Path, PretrainModule]:
    """A variant config at the tiny size, built (not trained) by the command line, weights shaken, saved."""
    cli = cli_main(
        [
            "--config",
            str(CONFIGS / config),
            "--config",
            str(TINY),
            *overrides,
            *QUIET,
            f"--trainer.default_root_dir={tmp_path / 'run'}",
        ],
        run=False,
    )
    module = shaken(cli.model)
    return save_module(tmp_path / "clm.ckpt", module, "tiedemb.PretrainModule", dict(cli.datamodule.hparams)), module


VARIANTS = [  # config, overrides, whether input table and output matrix stay one tied matrix
    ("tied_orth.yaml", [], False),
    ("tied_shuffle.yaml", [], False),
    ("tied_shuffle.yaml", ["--model.shuffle=channel_shuffle", "--model.shuffle_groups=4"], False),
    ("untied.yaml", [], False),
    ("tied.yaml", [], False),  # the embedding norm is folded into the input table: the two differ
    ("tied.yaml", ["--model.embedding_norm=false"], True),  # a plain tie
    ("tied_scaled_init.yaml", ["--model.embedding_norm=false"], True),
    ("tied_t5.yaml", [], False),
    ("tied_mup.yaml", ["--model.hidden_size=32"], False),  # mup:64 at width 32: logits x 2
    ("tied_gemma.yaml", [], False),
]


@pytest.mark.end_to_end
@pytest.mark.parametrize(
    "config, overrides, tied",
    VARIANTS,
    ids=[f"{config.removesuffix('.yaml')}{''.join(overrides)}" for config, overrides, _ in VARIANTS],
)
def test_each_study_variant_exports_as_gpt_neox_with_its_logits(config, overrides, tied, tmp_path):
    checkpoint, module = variant_checkpoint(tmp_path, config, overrides)
    out = tmp_path / "out"
    assert export([str(checkpoint), str(out), "--no_tokenizer"]) == 0
    exported = exported_config(out)
    assert exported["architectures"] == ["GPTNeoXForCausalLM"] and exported["use_parallel_residual"] is False
    assert exported["tie_word_embeddings"] is tied
    assert_same_logits(module, out)
    assert (out / "README.md").is_file()


# --------------------------------------------------------------------------- the other layouts


LAYOUTS = [  # settings over SMALL, the class that holds them
    (dict(norm="rmsnorm", activation="silu", rope_base=500.0, head="tied_orth"), "LlamaForCausalLM"),
    (dict(norm="rmsnorm", head="tied_shuffle", embedding_dim=8, output_scale="rsqrt_d"), "LlamaForCausalLM"),
    (
        dict(position="learned", embedding_norm=False, embedding_dim=8, type_vocab_size=2, head="tied"),
        "GPT2LMHeadModel",
    ),
    (dict(position="learned", embedding_norm=False, activation="relu", head="untied"), "GPT2LMHeadModel"),
    (dict(position="none", head="tied_shuffle"), "GPTNeoXForCausalLM"),
    (dict(head="tied_orth", embedding_dim=8, type_vocab_size=2, embedding_scale="sqrt_d"), "GPTNeoXForCausalLM"),
    (dict(head="tied", embedding_dim=8, activation="tanh", output_scale=0.5), "GPTNeoXForCausalLM"),
]


@pytest.mark.parametrize(
    "settings, model_class",
    LAYOUTS,
    ids=[f"{cls}-{'-'.join(map(str, settings.values()))}" for settings, cls in LAYOUTS],
)
def test_rmsnorm_learned_positions_and_factorised_embeddings_map_exactly(settings, model_class):
    torch.manual_seed(0)
    module = shaken(PretrainModule(**{**SMALL, **settings}))
    plan = plan_export(dict(module.hparams), module.state_dict(), "pretrain", None, None, "test")
    assert plan.model_class == model_class
    theirs = build_model(plan)
    input_ids = torch.randint(0, 50, (3, 20), generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        torch.testing.assert_close(
            theirs(input_ids=input_ids).logits, module.model(input_ids).logits, atol=1e-4, rtol=0
        )


# --------------------------------------------------------------------------- a trained run, with its tokenizer


@pytest.fixture(scope="module")
def clm_checkpoint(tmp_path_factory) -> Path:
    """tied_orth at the tiny size, trained a few steps on made-up text with the BPE tokenizer the run trains."""
    root = tmp_path_factory.mktemp("clm_export")
    rng = random.Random(0)
    text = root / "text.txt"
    text.write_text("\n".join(" ".join(rng.choice(WORDS) for _ in range(rng.randint(6, 14))) for _ in range(400)))
    cli_main(
        [
            "fit",
            "--config",
            str(CONFIGS / "tied_orth.yaml"),
            "--config",
            str(TINY),
            f"--data.train_files=[{text}]",
            "--data.vocab_size=300",
            f"--data.cache_dir={root / 'cache'}",
            "--trainer.max_steps=4",
            "--trainer.val_check_interval=4",
            "--trainer.limit_val_batches=1",
            *QUIET,
            f"--trainer.default_root_dir={root}",
        ]
    )
    return run_checkpoint(root)


@pytest.mark.end_to_end
def test_a_trained_run_exports_with_its_tokenizer_and_generates(clm_checkpoint, tmp_path):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    out = tmp_path / "tiny-clm"
    assert export([str(clm_checkpoint), str(out)]) == 0  # the tokenizer the run trained, found in its cache
    ours = PretrainModule.load_from_checkpoint(clm_checkpoint).eval()
    theirs = AutoModelForCausalLM.from_pretrained(str(out)).eval()
    tokenizer = AutoTokenizer.from_pretrained(str(out))
    assert exported_config(out)["eos_token_id"] == tokenizer.eos_token_id is not None
    batch = tokenizer(
        ["the cat sat on the red house", "a big dog ran near the park and the man"], padding=True, return_tensors="pt"
    )
    assert set(batch) == {"input_ids", "attention_mask"}  # no token types for GPT-NeoX's forward
    with torch.no_grad():
        expected = ours.model(batch["input_ids"]).logits
        actual = theirs(**batch).logits
    mask = batch["attention_mask"].bool()
    torch.testing.assert_close(actual[mask], expected[mask], atol=1e-4, rtol=0)
    generated = theirs.generate(**tokenizer(["the dog"], return_tensors="pt"), max_new_tokens=3, do_sample=False)
    assert generated.shape[1] > 2
    card = (out / "README.md").read_text()
    assert "license: apache-2.0" in card and "AutoModelForCausalLM.from_pretrained('./tiny-clm')" in card
    assert "| head | `tied_orth` |" in card and "| objective | `clm` |" in card and "| hidden_size | `64` |" in card
    assert "val/loss (best)" in card and "| global_step | `4` |" in card
    assert "`['text.txt']`" in card and str(clm_checkpoint.parents[2]) not in card  # file names, not local paths


# --------------------------------------------------------------------------- model card and modes


def small_checkpoint(tmp_path: Path, name: str, **settings) -> Path:
    torch.manual_seed(0)
    return save_module(tmp_path / f"{name}.ckpt", PretrainModule(**{**SMALL, **settings}), "tiedemb.PretrainModule")


@pytest.mark.end_to_end
def test_a_bert_export_gets_a_model_card_with_the_runs_settings_and_metrics(tmp_path):
    scores = {"monitor": "val/loss", "best_model_score": torch.tensor(2.5), "current_score": torch.tensor(2.75)}
    callbacks = {"ResumableCheckpoint{'monitor': 'val/loss'}": scores}
    data = {"train_files": ["/home/someone/corpus/books.txt"], "vocab_size": 50, "block_size": 32, "num_workers": 4}
    module = PretrainModule(**{**SMALL, **BERT_HEAD})
    checkpoint = save_module(
        tmp_path / "mlm.ckpt", module, "tiedemb.PretrainModule", data, callbacks=callbacks, global_step=120
    )
    out = tmp_path / "mlm"
    assert export([str(checkpoint), str(out), "--no_tokenizer"]) == 0
    card = (out / "README.md").read_text()
    metadata = card.split("---\n")[1]
    assert card.startswith("---\n") and "license: apache-2.0\n" in metadata and "pipeline_tag: fill-mask" in metadata
    assert "AutoModelForMaskedLM.from_pretrained('./mlm')" in card and "holds no tokenizer" in card
    assert "| head | `tied_orth` |" in card and "| objective | `mlm` |" in card and "| head_norm | `True` |" in card
    assert "| val/loss (best) | `2.5` |" in card and "| val/loss (at this checkpoint) | `2.75` |" in card
    assert "| global_step | `120` |" in card and "| block_size | `32` |" in card
    assert "`['books.txt']`" in card and "/home/someone" not in card and "num_workers" not in card
    assert "| shuffle |" not in card and "| rope_base |" not in card  # settings this model does not read


def modes(folder: Path) -> dict[str, int]:
    return {str(path.relative_to(folder)): stat.S_IMODE(path.stat().st_mode) for path in [folder, *folder.rglob("*")]}


@pytest.mark.end_to_end
@pytest.mark.parametrize(
    "umask, file_mode, folder_mode", [(0o022, 0o644, 0o755), (0o027, 0o640, 0o750)], ids=["umask-022", "umask-027"]
)
def test_exported_folders_and_files_get_the_modes_the_umask_gives(
    umask, file_mode, folder_mode, tmp_path, tiny_tokenizer_dir
):
    from transformers import AutoTokenizer

    vocab = len(AutoTokenizer.from_pretrained(str(tiny_tokenizer_dir)))
    causal = small_checkpoint(tmp_path, "clm", vocab_size=vocab)
    bert = small_checkpoint(tmp_path, "mlm", **{**BERT_HEAD, "vocab_size": vocab})
    previous = os.umask(umask)
    try:
        for checkpoint in (causal, bert):
            out = tmp_path / checkpoint.stem
            assert export([str(checkpoint), str(out), "--tokenizer", str(tiny_tokenizer_dir)]) == 0
            found = modes(out)
            assert {"model.safetensors", "README.md", "tokenizer.json"} <= set(found)
            assert {
                name: mode
                for name, mode in found.items()
                if mode != (folder_mode if (out / name).is_dir() else file_mode)
            } == {}
    finally:
        os.umask(previous)


# --------------------------------------------------------------------------- refusals


CAUSAL_REFUSALS = [
    (dict(norm_position="post"), "model.norm_position='post'"),
    (dict(head="tied_orth", head_activation="gelu"), "model.head_activation='gelu'"),
    (dict(head="tied_orth", head_norm=True), "model.head_norm=true"),
    (dict(head="tied_orth", head_bias=True), "model.head_bias=true"),
    (dict(output_bias=True), "model.output_bias=true"),
    (dict(position="learned"), "model.embedding_norm=true with model.position='learned'"),
    (
        dict(position="learned", embedding_norm=False, norm="rmsnorm"),
        "model.norm='rmsnorm' with model.position='learned'",
    ),
    (dict(position="none", norm="rmsnorm"), "model.position='none' with model.norm='rmsnorm'"),
]


@pytest.mark.end_to_end
@pytest.mark.parametrize("settings, named", CAUSAL_REFUSALS, ids=[named for _, named in CAUSAL_REFUSALS])
def test_next_token_models_no_causal_lm_holds_are_refused_naming_the_setting(settings, named, tmp_path, capsys):
    checkpoint = small_checkpoint(tmp_path, "clm", **settings)
    message = refused(capsys, [str(checkpoint), "--no_tokenizer"], tmp_path / "out")
    assert named in message and "no transformers causal-LM class" in message


@pytest.mark.end_to_end
@pytest.mark.parametrize(
    "settings, requested, named, fitting",
    [
        ({}, "LlamaForCausalLM", "model.norm='layernorm'", "GPTNeoXForCausalLM"),
        ({}, "GPT2LMHeadModel", "model.position='rope'", "GPTNeoXForCausalLM"),
        (dict(norm="rmsnorm"), "GPTNeoXForCausalLM", "model.norm='rmsnorm'", "LlamaForCausalLM"),
        (
            dict(position="learned", embedding_norm=False),
            "GPTNeoXForCausalLM",
            "model.position='learned'",
            "GPT2LMHeadModel",
        ),
    ],
)
def test_a_causal_class_that_does_not_fit_is_refused_naming_the_one_that_does(
    settings, requested, named, fitting, tmp_path, capsys
):
    checkpoint = small_checkpoint(tmp_path, "clm", **settings)
    message = refused(capsys, [str(checkpoint), "--no_tokenizer", "--model_class", requested], tmp_path / "out")
    assert f"cannot be a {requested}" in message and named in message and f"export it as {fitting}" in message


@pytest.mark.end_to_end
def test_bert_for_next_token_and_a_causal_lm_for_masked_or_glue_models_are_refused(tmp_path, capsys):
    clm = small_checkpoint(tmp_path, "clm")
    message = refused(capsys, [str(clm), "--no_tokenizer", "--model_class", "BertModel"], tmp_path / "a")
    assert "model.objective='clm'" in message and "no transformers BERT class" in message and "causal LM" in message
    mlm = small_checkpoint(tmp_path, "mlm", **BERT_HEAD)
    message = refused(capsys, [str(mlm), "--no_tokenizer", "--model_class", "GPTNeoXForCausalLM"], tmp_path / "b")
    assert "model.objective='mlm'" in message and "BertForMaskedLM" in message
    glue = save_module(
        tmp_path / "glue.ckpt",
        GlueModule(num_labels=2, task="mrpc", **{key: value for key, value in SMALL.items() if key != "objective"}),
        "tiedemb.GlueModule",
    )
    message = refused(capsys, [str(glue), "--no_tokenizer", "--model_class", "LlamaForCausalLM"], tmp_path / "c")
    assert "GLUE classifier" in message and "BertForSequenceClassification" in message
