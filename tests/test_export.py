"""python -m tiedemb.export: tiedemb checkpoints as transformers BERT and GPT-NeoX folders that give
tiedemb's outputs, the model card and modes every export gets, and what it refuses.

Trained checkpoints come from the real command line (module fixtures, shared between tests); the
refusals use small untrained modules saved the way Lightning saves them, since only their
settings matter. The study's variants are built from their own config files at
configs/scale/tiny.yaml's size without training, and their weights then moved off their initial
values: the recipe starts residual branches at zero, which would hide a misplaced attention or MLP
weight.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import yaml
from run_dirs import run_checkpoint

from tiedemb import GlueModule, PretrainModule
from tiedemb.cli import main as cli_main
from tiedemb.export import build_model
from tiedemb.export import main as export
from tiedemb.nn.config import ARCHITECTURE, TransformerConfig
from tiedemb.weights.export_plan import masked_lm_head_problem, plan_export
from tiedemb.weights.source import HEAD_SETTINGS, config_from_hparams

ROOT = Path(__file__).resolve().parents[1]
CONFIGS = ROOT / "configs"
TINY = CONFIGS / "scale" / "tiny.yaml"
QUIET = [
    "--trainer.logger=false",
    "--trainer.enable_progress_bar=false",
    "--trainer.enable_model_summary=false",
    "--trainer.num_sanity_val_steps=0",
]
BERT_HEAD = [
    "--model.objective=mlm",
    "--model.position=learned",
    "--model.type_vocab_size=2",
    "--model.norm_position=post",
    "--model.residual_init=standard",
    "--model.head=tied_orth",
    "--model.head_bias=true",
    "--model.head_activation=gelu",
    "--model.head_norm=true",
    "--model.output_bias=true",
    "--model.max_position_embeddings=64",
]
WORDS = "the a cat dog man woman sat ran saw sees big small red on under near house park and with .".split()
SMALL = dict(vocab_size=50, hidden_size=16, num_layers=1, num_heads=2, intermediate_size=32, max_position_embeddings=32)


def real_rows(hidden: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    return hidden[mask.bool()]


def save_module(path: Path, module: torch.nn.Module, class_path: str, data: dict | None = None, **extra) -> Path:
    """A checkpoint as Lightning writes one: hyperparameters, weights, the data's settings (and ``extra`` entries)."""
    torch.save(
        {
            "hyper_parameters": {**dict(module.hparams), "_class_path": class_path},
            "state_dict": module.state_dict(),
            "datamodule_hyper_parameters": data or {},
            **extra,
        },
        path,
    )
    return path


def refused(capsys, argv: list[str], out: Path) -> str:
    """The one error line of a refused export; nothing is written in OUT."""
    assert export([*argv[:1], str(out), *argv[1:]]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), lines
    assert not out.exists() or not any(out.iterdir())
    assert not [path for path in out.parent.iterdir() if path.name.startswith(f".{out.name}-")]  # no staging left
    return lines[0]


# --------------------------------------------------------------------------- trained checkpoints


@pytest.fixture(scope="module")
def glue_checkpoint(tmp_path_factory, glue_dir: Path, wordpiece_dir: Path) -> Path:
    """MRPC, a few steps, with a factorised embedding (d_e 16 < hidden 32)."""
    root = tmp_path_factory.mktemp("glue_export")
    cli_main(
        [
            "fit",
            "--config",
            str(CONFIGS / "glue" / "mrpc.yaml"),
            f"--data.data_dir={glue_dir}",
            f"--data.tokenizer={wordpiece_dir}",
            "--data.max_train_samples=32",
            "--data.batch_size=16",
            "--data.eval_batch_size=64",
            "--model.pretrained=null",
            "--model.hidden_size=32",
            "--model.num_layers=2",
            "--model.num_heads=2",
            "--model.intermediate_size=64",
            "--model.embedding_dim=16",
            "--model.learning_rate=1e-3",
            "--trainer.max_steps=2",
            "--trainer.limit_val_batches=1",
            "--trainer.val_check_interval=2",
            *QUIET,
            f"--trainer.default_root_dir={root}",
        ]
    )
    return run_checkpoint(root)


def fit_on_made_up_text(root: Path, vocab_size: int, *options: str) -> Path:
    """tied_orth at the tiny size, trained 4 steps on made-up text with the tokenizer the run trains; its checkpoint."""
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
            *options,
            f"--data.train_files=[{text}]",
            f"--data.vocab_size={vocab_size}",
            f"--data.cache_dir={root / 'cache'}",
            "--trainer.max_steps=4",
            "--trainer.val_check_interval=4",
            "--trainer.limit_val_batches=1",
            *QUIET,
            f"--trainer.default_root_dir={root}",
        ]
    )
    return run_checkpoint(root)


@pytest.fixture(scope="module")
def mlm_checkpoint(tmp_path_factory) -> Path:
    """BERT's masked-LM head on made-up text, with a WordPiece tokenizer the run trains itself."""
    return fit_on_made_up_text(tmp_path_factory.mktemp("mlm_export"), 120, *BERT_HEAD)


@pytest.mark.end_to_end
def test_factorised_glue_model_gives_its_logits_as_bert_for_sequence_classification(glue_checkpoint, tmp_path):
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    out = tmp_path / "mrpc"
    assert export([str(glue_checkpoint), str(out)]) == 0
    config = json.loads((out / "config.json").read_text())
    assert config["architectures"] == ["BertForSequenceClassification"] and config["hidden_size"] == 32
    assert config["id2label"] == {"0": "not_equivalent", "1": "equivalent"}
    ours = GlueModule.load_from_checkpoint(glue_checkpoint).eval()
    theirs = AutoModelForSequenceClassification.from_pretrained(str(out)).eval()
    tokenizer = AutoTokenizer.from_pretrained(str(out))
    batch = tokenizer(
        ["The cat sat on the mat.", "Stocks fell sharply on Monday in heavy trading."],
        ["A cat was sitting.", "Shares dropped."],
        padding=True,
        return_tensors="pt",
    )
    with torch.no_grad():
        expected = ours(batch["input_ids"], batch["attention_mask"], batch["token_type_ids"])
        torch.testing.assert_close(theirs(**batch).logits, expected, atol=1e-4, rtol=0)


@pytest.mark.end_to_end
def test_bert_head_mlm_model_gives_its_logits_as_bert_for_masked_lm_and_fills_masks(mlm_checkpoint, tmp_path):
    from transformers import AutoModelForMaskedLM, AutoTokenizer, pipeline

    out = tmp_path / "mlm"
    assert export([str(mlm_checkpoint), str(out)]) == 0  # the tokenizer the run trained, found in its cache
    assert json.loads((out / "config.json").read_text())["architectures"] == ["BertForMaskedLM"]
    ours = PretrainModule.load_from_checkpoint(mlm_checkpoint).eval()
    theirs = AutoModelForMaskedLM.from_pretrained(str(out)).eval()
    tokenizer = AutoTokenizer.from_pretrained(str(out))
    batch = tokenizer(
        ["the cat sat on the [MASK] .", "a big dog ran near the red house and the park"],
        padding=True,
        return_tensors="pt",
    )
    with torch.no_grad():
        expected = ours.model.head(
            ours.model.encode(batch["input_ids"], batch["attention_mask"], batch.get("token_type_ids"))
        )
        actual = theirs(**batch).logits
    mask = batch["attention_mask"]
    torch.testing.assert_close(real_rows(actual, mask), real_rows(expected, mask), atol=1e-4, rtol=0)
    answers = pipeline("fill-mask", model=str(out))("the dog [MASK] on the mat .")
    assert len(answers) == 5 and all(answer["token_str"] for answer in answers)


@pytest.mark.end_to_end
def test_an_exported_masked_lm_loads_back_into_pretrain_module_with_the_same_logits(mlm_checkpoint, tmp_path):
    out = tmp_path / "mlm"
    assert export([str(mlm_checkpoint), str(out)]) == 0
    trained = PretrainModule.load_from_checkpoint(mlm_checkpoint).eval()
    vocab = trained.config.vocab_size
    back = PretrainModule(vocab_size=vocab, pretrained=str(out)).eval()  # every other setting from the folder
    fixed = [*TransformerConfig.field_names_of(ARCHITECTURE), *HEAD_SETTINGS]
    assert {name: getattr(back.config, name) for name in fixed} == {
        name: getattr(trained.config, name) for name in fixed
    }
    generator = torch.Generator().manual_seed(0)
    input_ids = torch.randint(5, vocab, (3, 20), generator=generator)
    attention_mask = torch.ones_like(input_ids)
    attention_mask[2, 12:] = 0
    with torch.no_grad():
        expected = trained(input_ids, attention_mask).logits
        actual = back(input_ids, attention_mask).logits
    mask = attention_mask.bool()
    torch.testing.assert_close(actual[mask], expected[mask], atol=1e-5, rtol=0)


@pytest.mark.end_to_end
def test_fit_starts_from_an_exported_bert_for_masked_lm_folder(mlm_checkpoint, tmp_path):
    out = tmp_path / "mlm"
    assert export([str(mlm_checkpoint), str(out)]) == 0
    text = mlm_checkpoint.parents[2] / "text.txt"  # <root>/<run>/checkpoints/last.ckpt
    cli = cli_main(
        [
            "fit",
            "--config",
            str(CONFIGS / "continue" / "bert.yaml"),
            f"--model.pretrained={out}",
            f"--data.tokenizer={out}",
            f"--data.train_files=[{text}]",
            f"--data.cache_dir={tmp_path / 'cache'}",
            "--data.block_size=32",
            "--data.batch_size=4",
            "--model.warmup_steps=1",
            "--trainer.max_steps=3",
            "--trainer.val_check_interval=3",
            "--trainer.limit_val_batches=1",
            *QUIET,
            f"--trainer.default_root_dir={tmp_path / 'runs'}",
        ]
    )
    assert cli.trainer.global_step == 3
    trained = PretrainModule.load_from_checkpoint(mlm_checkpoint)
    for name in (
        "hidden_size",
        "num_layers",
        "max_position_embeddings",
        "head",
        "head_bias",
        "head_norm",
        "output_bias",
    ):
        assert cli.model.hparams[name] == trained.hparams[name], name  # from the folder, not the defaults
    saved = torch.load(next((tmp_path / "runs").rglob("last.ckpt")), map_location="cpu", weights_only=True)
    assert saved["hyper_parameters"]["hidden_size"] == trained.hparams.hidden_size
    # it started from the folder's weights: three steps at lr 5e-5 move them by far less than a fresh draw differs
    for name, value in cli.model.model.state_dict().items():
        start = trained.model.state_dict()[name]
        assert (value - start).abs().max() < 2e-3, name
    # Its checkpoint is evaluated from the checkpoint alone: the folder it started from is not read again.
    checkpoint = next((tmp_path / "runs").rglob("last.ckpt"))
    shutil.copytree(out, tmp_path / "tokenizer")
    validate = [
        "validate",
        "--config",
        str(CONFIGS / "continue" / "bert.yaml"),
        f"--data.tokenizer={tmp_path / 'tokenizer'}",
        f"--data.train_files=[{text}]",
        f"--data.cache_dir={tmp_path / 'cache'}",
        "--data.block_size=32",
        "--data.batch_size=4",
        "--trainer.limit_val_batches=2",
        *QUIET,
        f"--ckpt_path={checkpoint}",
    ]
    before = cli_main(validate).trainer.callback_metrics["val/loss"].item()
    shutil.rmtree(out)
    assert cli_main(validate).trainer.callback_metrics["val/loss"].item() == before


# --------------------------------------------------------------------------- refusals


def pretrain_checkpoint(tmp_path: Path, data: dict | None = None, **settings) -> Path:
    module = PretrainModule(**{**SMALL, "objective": "mlm", "position": "learned", "norm_position": "post", **settings})
    return save_module(tmp_path / "pretrain.ckpt", module, "tiedemb.PretrainModule", data)


def glue_module_checkpoint(tmp_path: Path, **settings) -> Path:
    module = GlueModule(num_labels=2, task="mrpc", **{**SMALL, **settings})
    return save_module(tmp_path / "glue.ckpt", module, "tiedemb.GlueModule")


BERT_HEAD_SETTINGS = dict(head="tied_orth", head_bias=True, head_activation="gelu", head_norm=True, output_bias=True)
#: A masked LM with BERT's embedding, encoder and head, over CLM_SMALL's next-token settings.
MLM_BERT_HEAD = dict(objective="mlm", position="learned", norm_position="post", type_vocab_size=2, **BERT_HEAD_SETTINGS)
REFUSED_SETTINGS = [
    (dict(position="rope"), "model.position='rope'"),
    (dict(position="none"), "model.position='none'"),
    (dict(norm_position="pre"), "model.norm_position='pre'"),
    (dict(norm="rmsnorm"), "model.norm='rmsnorm'"),
    (dict(embedding_scale="sqrt_d"), "model.embedding_scale='sqrt_d'"),
    (dict(embedding_norm=False), "model.embedding_norm=false"),
]


@pytest.mark.end_to_end
@pytest.mark.parametrize("settings, named", REFUSED_SETTINGS, ids=[named for _, named in REFUSED_SETTINGS])
def test_settings_bert_cannot_hold_are_refused_naming_the_setting(settings, named, tmp_path, capsys):
    checkpoint = pretrain_checkpoint(tmp_path, **settings)
    message = refused(capsys, [str(checkpoint), "--no_tokenizer"], tmp_path / "out")
    assert named in message and "no transformers BERT class" in message


@pytest.mark.end_to_end
@pytest.mark.parametrize(
    "head, named",
    [
        (dict(head="tied"), "model.head='tied'"),
        ({**BERT_HEAD_SETTINGS, "head_norm": False}, "model.head_norm=false"),
        ({**BERT_HEAD_SETTINGS, "embedding_dim": 8}, "model.embedding_dim=8"),
        ({**BERT_HEAD_SETTINGS, "output_scale": "rsqrt_d"}, "model.output_scale='rsqrt_d'"),
    ],
)
def test_a_head_that_is_not_berts_exports_as_bert_model(head, named, tmp_path):
    checkpoint = pretrain_checkpoint(tmp_path, **head)
    hparams = torch.load(checkpoint, weights_only=True)["hyper_parameters"]
    assert named in masked_lm_head_problem(config_from_hparams(hparams, "test"))
    assert export([str(checkpoint), str(tmp_path / "encoder"), "--no_tokenizer"]) == 0  # the default: BertModel
    assert json.loads((tmp_path / "encoder" / "config.json").read_text())["architectures"] == ["BertModel"]


@pytest.mark.end_to_end
def test_a_classifier_without_pooler_exports_its_encoder_as_bert_model(tmp_path):
    no_pooler = glue_module_checkpoint(tmp_path, pooler=False)
    assert export([str(no_pooler), str(tmp_path / "out"), "--no_tokenizer"]) == 0
    assert json.loads((tmp_path / "out" / "config.json").read_text())["architectures"] == ["BertModel"]


@pytest.mark.end_to_end
def test_a_run_without_a_tokenizer_needs_one_named_or_no_tokenizer(tmp_path, capsys):
    synthetic = pretrain_checkpoint(tmp_path, data={"vocab_size": 50, "synthetic_tokens": 1000, "tokenizer": None})
    message = refused(capsys, [str(synthetic)], tmp_path / "out")
    assert "synthetic corpus" in message and "--no-tokenizer" in message and "--tokenizer" in message
    message = refused(capsys, [str(synthetic), "--tokenizer", str(tmp_path / "missing")], tmp_path / "out")
    assert "--tokenizer" in message and "could not be loaded" in message


@pytest.mark.end_to_end
def test_a_tokenizer_of_another_vocabulary_is_refused(tmp_path, capsys, tiny_tokenizer_dir):
    checkpoint = pretrain_checkpoint(tmp_path)  # 50 tokens; the tiny tokenizer has fewer
    message = refused(capsys, [str(checkpoint), "--tokenizer", str(tiny_tokenizer_dir)], tmp_path / "out")
    assert "tokens, but the model's vocabulary has 50" in message


@pytest.mark.end_to_end
def test_an_output_folder_that_is_not_empty_is_left_alone(tmp_path, capsys):
    checkpoint = pretrain_checkpoint(tmp_path)
    out = tmp_path / "out"
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    assert export([str(checkpoint), str(out), "--no_tokenizer"]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and "exists and is not an empty folder" in lines[0]
    assert [path.name for path in out.iterdir()] == ["notes.txt"] and (out / "notes.txt").read_text() == "mine"
    assert export([str(checkpoint), str(tmp_path / "empty"), "--no_tokenizer"]) == 0  # an empty or new one is fine


@pytest.mark.end_to_end
def test_the_command_reports_a_missing_checkpoint_in_one_line_without_traceback(tmp_path):
    result = subprocess.run(
        [sys.executable, "-m", "tiedemb.export", str(tmp_path / "nope.ckpt"), str(tmp_path / "out")],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=300,
        env={**os.environ, "TIEDEMB_DEBUG": ""},
    )
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [f"error: checkpoint {str(tmp_path / 'nope.ckpt')!r} does not exist"]
    assert not (tmp_path / "out").exists()


# --------------------------------------------------------------------------- next-token models as GPT-NeoX


CLM_SMALL = dict(
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


# --------------------------------------------------------------------------- settings the variants leave out


LAYOUTS = [  # settings over CLM_SMALL that GPT-NeoX holds too
    dict(position="none", head="tied_shuffle"),
    dict(head="tied_orth", embedding_dim=8, type_vocab_size=2, embedding_scale="sqrt_d"),
    dict(head="tied", embedding_dim=8, activation="tanh", output_scale=0.5),
]


@pytest.mark.parametrize("settings", LAYOUTS, ids=["-".join(map(str, settings.values())) for settings in LAYOUTS])
def test_no_positions_factorised_embeddings_and_scales_map_exactly_to_gpt_neox(settings):
    torch.manual_seed(0)
    module = shaken(PretrainModule(**{**CLM_SMALL, **settings}))
    plan = plan_export(dict(module.hparams), module.state_dict(), "pretrain", None, "test")
    assert plan.model_class == "GPTNeoXForCausalLM"
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
    return fit_on_made_up_text(tmp_path_factory.mktemp("clm_export"), 300)


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
    shown = card_settings(card)
    assert (shown["model"]["head"], shown["model"]["objective"], shown["model"]["hidden_size"]) == (
        "tied_orth",
        "clm",
        64,
    )
    assert "val/loss (best)" in shown["metrics"] and shown["global_step"] == 4
    assert shown["data"]["train_files"] == ["text.txt"] and str(clm_checkpoint.parents[2]) not in card  # no local paths


# --------------------------------------------------------------------------- model card and modes


def card_settings(card: str) -> dict:
    """The settings, step and metrics the model card's YAML block shows."""
    return yaml.safe_load(card.split("```yaml\n")[1].split("```")[0])


def small_checkpoint(tmp_path: Path, name: str, **settings) -> Path:
    torch.manual_seed(0)
    return save_module(tmp_path / f"{name}.ckpt", PretrainModule(**{**CLM_SMALL, **settings}), "tiedemb.PretrainModule")


@pytest.mark.end_to_end
def test_a_bert_export_gets_a_model_card_with_the_runs_settings_and_metrics(tmp_path):
    scores = {"monitor": "val/loss", "best_model_score": torch.tensor(2.5), "current_score": torch.tensor(2.75)}
    callbacks = {"ResumableCheckpoint{'monitor': 'val/loss'}": scores}
    data = {"train_files": ["/home/someone/corpus/books.txt"], "vocab_size": 50, "block_size": 32, "num_workers": 4}
    module = PretrainModule(**{**CLM_SMALL, **MLM_BERT_HEAD})
    checkpoint = save_module(
        tmp_path / "mlm.ckpt", module, "tiedemb.PretrainModule", data, callbacks=callbacks, global_step=120
    )
    out = tmp_path / "mlm"
    assert export([str(checkpoint), str(out), "--no_tokenizer"]) == 0
    card = (out / "README.md").read_text()
    metadata = card.split("---\n")[1]
    assert card.startswith("---\n") and "license: apache-2.0\n" in metadata and "pipeline_tag: fill-mask" in metadata
    assert "AutoModelForMaskedLM.from_pretrained('./mlm')" in card and "holds no tokenizer" in card
    shown = card_settings(card)
    assert (shown["model"]["head"], shown["model"]["objective"], shown["model"]["head_norm"]) == (
        "tied_orth",
        "mlm",
        True,
    )
    assert shown["metrics"] == {"val/loss (best)": 2.5, "val/loss (at this checkpoint)": 2.75}
    assert shown["global_step"] == 120 and shown["data"]["block_size"] == 32
    assert shown["data"]["train_files"] == ["books.txt"] and "/home/someone" not in card and "num_workers" not in card


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
    bert = small_checkpoint(tmp_path, "mlm", **{**MLM_BERT_HEAD, "vocab_size": vocab})
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


# --------------------------------------------------------------------------- next-token refusals


CAUSAL_REFUSALS = [
    (dict(norm_position="post"), "model.norm_position='post'"),
    (dict(head="tied_orth", head_activation="gelu"), "model.head_activation='gelu'"),
    (dict(head="tied_orth", head_norm=True), "model.head_norm=true"),
    (dict(head="tied_orth", head_bias=True), "model.head_bias=true"),
    (dict(output_bias=True), "model.output_bias=true"),
    (dict(position="learned", embedding_norm=False), "model.position='learned'"),
    (dict(norm="rmsnorm"), "model.norm='rmsnorm'"),
]


@pytest.mark.end_to_end
@pytest.mark.parametrize("settings, named", CAUSAL_REFUSALS, ids=[named for _, named in CAUSAL_REFUSALS])
def test_next_token_models_gpt_neox_does_not_hold_are_refused_naming_the_setting(settings, named, tmp_path, capsys):
    checkpoint = small_checkpoint(tmp_path, "clm", **settings)
    message = refused(capsys, [str(checkpoint), "--no_tokenizer"], tmp_path / "out")
    assert named in message and "GPTNeoXForCausalLM does not hold it exactly" in message
