"""Every user mistake ends with one clear message, a non-zero exit and no traceback.

The mistakes listed in docs/errors.md run through `python main.py` in subprocesses (two at a
time, started together, since each spends seconds importing); a few more that fail while
parsing or reading a checkpoint are checked in process, where they are cheap.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest
import torch
from reliability_helpers import run_command_lines_in_two_processes
from run_dirs import run_checkpoint
from tiny_runs import TINY_TIED

from tiedemb.cli import main
from tiedemb.errors import UserError
from tiedemb.training.exits import find_user_error

pytestmark = pytest.mark.end_to_end  # runs the real command line

ROOT = Path(__file__).resolve().parents[1]
CONFIGS = ROOT / "configs"
BASE = [
    "fit",
    *TINY_TIED,
    "--trainer.logger=false",
    "--trainer.max_steps=1",
    "--trainer.enable_progress_bar=false",
]
MRPC_HEADER = "Quality\t#1 ID\t#2 ID\t#1 String\t#2 String\n"

# (id, arguments after BASE with {files}/{tokenizer}/{ckpt} filled in, text the message must contain)
MISTAKES = [
    (
        "unknown_objective",
        ["--model.objective=nonsense"],
        "model.objective='nonsense' is not a known choice; valid: mlm, clm",
    ),
    (
        "missing_train_file",
        ["--data.train_files=[{files}/missing.txt]", "--data.vocab_size=300"],
        "train file '{files}/missing.txt' does not exist",
    ),
    # a vocabulary a byte-level BPE (the next-token study's tokenizer) can have, so the text is what is wrong
    (
        "empty_train_file",
        ["--data.train_files=[{files}/empty.txt]", "--data.vocab_size=300"],
        "val_fraction=0.05 of 0 documents leaves no training text",
    ),
    (
        "validation_text_shorter_than_a_block",
        ["--data.train_files=[{files}/text.txt]", "--data.val_files=[{files}/short.txt]", "--data.vocab_size=300"],
        "the validation text makes no block of data.block_size=32 tokens",
    ),
    (
        "training_data_short_of_a_batch",
        ["--data.block_size=4096", "--model.max_position_embeddings=4096"],
        "the training data makes 4 blocks of data.block_size=4096 tokens, fewer than one batch (data.batch_size=8); "
        "lower data.batch_size or data.block_size, or raise data.synthetic_tokens",
    ),
    (
        "missing_tokenizer",
        ["--data.train_files=[{files}/text.txt]", "--data.tokenizer={files}/no-tokenizer"],
        "tokenizer directory '{files}/no-tokenizer' does not exist",
    ),
    # the embedded corpus has its own vocabulary: a tokenizer given with it used to be dropped silently
    (
        "tokenizer_with_embedded_corpus",
        ["--data.tokenizer={files}/no-tokenizer"],
        "data.tokenizer='{files}/no-tokenizer' has no effect without data.train_files or data.dataset: "
        "the embedded corpus, which has its own vocabulary, is used",
    ),
    (
        "val_files_without_train_files",
        ["--data.val_files=[{files}/text.txt]"],
        "data.val_files=['{files}/text.txt'] has no effect without data.train_files",
    ),
    (
        "embedding_dim_zero",
        ["--model.embedding_dim=0"],
        "--model.embedding_dim: expected jsonargparse.typing.PositiveInt or null, got 0",
    ),
    (
        "embedding_wider_than_hidden",
        ["--model.embedding_dim=100"],
        "model.embedding_dim must be in 1..hidden_size (64)",
    ),
    (
        "positions_shorter_than_blocks",
        ["--model.max_position_embeddings=8"],
        "data.block_size=32 is longer than model.max_position_embeddings=8, where the model's rope positions end",
    ),
    (
        "learned_positions_shorter_than_blocks",
        ["--model.max_position_embeddings=16", "--model.position=learned"],
        "data.block_size=32 is longer than model.max_position_embeddings=16, where the model's learned positions end",
    ),
    # Lightning's options it takes unchecked: each failed later, with a stack trace or (clipping) silently
    (
        "accumulate_zero_batches",
        ["--trainer.accumulate_grad_batches=0"],
        "--trainer.accumulate_grad_batches: Not of type PositiveInt: 0 does not conform to restriction v>0",
    ),
    (
        "validate_every_zero_epochs",
        ["--trainer.check_val_every_n_epoch=0"],
        "--trainer.check_val_every_n_epoch: expected jsonargparse.typing.PositiveInt or null, got 0",
    ),
    (
        "negative_gradient_clip",
        ["--trainer.gradient_clip_val=-1"],
        "--trainer.gradient_clip_val: expected jsonargparse.typing.NonNegativeFloat or null, got -1",
    ),
    (
        "zero_nodes",
        ["--trainer.num_nodes=0"],
        "--trainer.num_nodes: Not of type PositiveInt: 0 does not conform to restriction v>0",
    ),
    (
        "validate_every_zero_batches",
        ["--trainer.val_check_interval=0"],
        "trainer.val_check_interval must be a number of batches >= 1 or a fraction of an epoch in (0, 1], got 0",
    ),
    (
        "validate_beyond_the_epoch",
        ["--trainer.val_check_interval=100000"],
        "trainer.val_check_interval=100000 is more than the 64 training batches of an epoch; lower it, or set "
        "trainer.check_val_every_n_epoch=null",
    ),
    (
        "unknown_head",
        ["--model.head=nonsense"],
        "valid: untied, tied, tied_scaled_init, tied_orth, untied_orth, tied_shuffle",
    ),
    ("heads_do_not_divide", ["--model.hidden_size=250", "--model.num_heads=4"], "must be divisible by model.num_heads"),
    (
        "missing_glue_data_dir",
        [
            "--data=tiedemb.data.GlueData",
            "--data.task=mrpc",
            "--data.tokenizer={tokenizer}",
            "--data.data_dir={files}/no-glue",
        ],
        "data_dir '{files}/no-glue' does not exist",
    ),
    (
        "unknown_glue_task",
        ["--data=tiedemb.data.GlueData", "--data.task=xnli", "--data.tokenizer={tokenizer}"],
        "task='xnli' is not a known choice; valid: mnli, mrpc",
    ),
    (
        "glue_label_7",
        [
            "--data=tiedemb.data.GlueData",
            "--data.task=mrpc",
            "--data.tokenizer={tokenizer}",
            "--data.data_dir={files}/glue",
        ],
        "MRPC/train.tsv, row 2: label '7' is not a MRPC label",
    ),
    (
        "checkpoint_of_another_variant",
        [
            "--config",
            str(CONFIGS / "untied.yaml"),
            "--config",
            str(CONFIGS / "scale" / "tiny.yaml"),
            "--ckpt_path={ckpt}",
        ],
        "is of another model variant or size: model.head='tied' there, 'untied' here",
    ),
    (
        "checkpoint_of_another_size",
        ["--model.hidden_size=128", "--ckpt_path={ckpt}"],
        "is of another model variant or size: model.hidden_size=64 there, 128 here",
    ),
    (
        "tokenizer_vocabulary_mismatch",
        ["--data.vocab_size=600", "--ckpt_path={ckpt}"],
        "has a vocabulary of 512 tokens, but the data's tokenizer gives 600: "
        "tokenizer and model vocabulary do not match",
    ),
    ("unknown_option", ["--trainer.max_stepz=3"], "unrecognized arguments: --trainer.max_stepz=3"),
]


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("mistakes")
    (folder / "empty.txt").write_text("\n   \n")
    (folder / "text.txt").write_text("the man is sleeping .\n" * 50)
    (folder / "short.txt").write_text("the man .\n")
    (folder / "glue" / "MRPC").mkdir(parents=True)
    (folder / "glue" / "MRPC" / "train.tsv").write_text(
        MRPC_HEADER + "1\t1\t2\tthe man is sleeping .\tthe man sleeps .\n7\t3\t4\ta dog is running\ta cat sits\n"
    )
    (folder / "glue" / "MRPC" / "dev.tsv").write_text(MRPC_HEADER + "0\t5\t6\tthe cat\ta dog\n")
    return folder


@pytest.fixture(scope="module")
def tied_checkpoint(tmp_path_factory) -> Path:
    """last.ckpt of a one-step tied run at tiny scale (vocabulary 512, hidden size 64)."""
    root = tmp_path_factory.mktemp("tied_run")
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        main([*BASE, f"--trainer.default_root_dir={root}", "--trainer.enable_model_summary=false"])
    finally:
        torch.set_num_threads(threads)
    return run_checkpoint(root)


@pytest.fixture(scope="module")
def outcomes(files, tiny_tokenizer_dir, tied_checkpoint, tmp_path_factory) -> dict[str, tuple[dict, str]]:
    """Every mistake run through main.py in two subprocesses (reliability_helpers.run_command_lines).

    Each subprocess runs main.py once per case exactly as `python main.py ARGS` would (fresh
    argv, the script's own exit code, an escaping exception printed as a traceback), but
    imports tiedemb only once, which saves several seconds per case.
    """
    values = {"files": str(files), "tokenizer": str(tiny_tokenizer_dir), "ckpt": str(tied_checkpoint)}
    work = tmp_path_factory.mktemp("mistake_runs")
    cases = {
        name: [*BASE, f"--trainer.default_root_dir={work / name}", *(arg.format(**values) for arg in args)]
        for name, args, _ in MISTAKES
    }
    results = run_command_lines_in_two_processes(cases, work, work, timeout=600)
    return {name: (results[name], needle.format(**values)) for name, _, needle in MISTAKES}


@pytest.mark.parametrize("name", [case[0] for case in MISTAKES])
def test_mistake_gets_one_message_and_no_traceback(outcomes, name):
    result, needle = outcomes[name]
    assert result["returncode"] == 2, result["stderr"][-3000:]
    assert needle in result["stderr"], result["stderr"][-3000:]
    assert "Traceback" not in result["stderr"] + result["stdout"]
    error_lines = [line for line in result["stderr"].splitlines() if line.startswith("error:")]
    assert len(error_lines) == 1, result["stderr"][-3000:]


def test_debug_switch_keeps_the_exception_and_its_traceback(monkeypatch):
    """With TIEDEMB_DEBUG=1 the exception propagates (so Python prints its traceback) instead of exit 2."""
    monkeypatch.setenv("TIEDEMB_DEBUG", "1")
    with pytest.raises(Exception) as raised:
        main([*BASE, "--model.embedding_dim=100"])
    cause = find_user_error(raised.value)
    assert isinstance(cause, UserError) and "model.embedding_dim must be in 1..hidden_size" in str(cause)


def run_in_process(capsys, *args: str) -> str:
    with pytest.raises(SystemExit) as exited:
        main([*BASE, *args])
    assert exited.value.code == 2
    return capsys.readouterr().err


def test_bad_value_names_the_option_without_the_usage_block(capsys):
    err = run_in_process(capsys, "--model.hidden_size=abc")
    lines = [line for line in err.splitlines() if line.startswith(("error:", "hint:", "usage:"))]
    assert lines[0] == "error: --model.hidden_size: expected jsonargparse.typing.PositiveInt or null, got abc"
    assert lines[1].startswith("hint: run `") and lines[1].endswith(" fit --help` for the options")
    assert len(lines) == 2


def test_predict_on_pretraining_data_is_refused_before_the_run_starts(capsys, tmp_path, monkeypatch):
    subcommand = "predict"
    message = (
        "error: predict writes GLUE submission files, and PretrainData has no unlabelled split to predict; "
        "for a pretraining model's loss on held-out text use validate or test"
    )
    monkeypatch.chdir(tmp_path)  # the default loggers write under ./runs
    monkeypatch.setenv("WANDB_MODE", "offline")
    with pytest.raises(SystemExit) as exited:
        main([subcommand, *(arg for arg in BASE[1:] if arg != "--trainer.logger=false")])
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert one_error_line(err) == message
    assert "note: no --ckpt_path" not in err  # refused before the run is prepared
    assert not list(tmp_path.iterdir())  # no W&B or CSV run was started for it


@pytest.mark.parametrize(
    ("subcommand", "value", "message"),
    [
        (
            "validate",
            "best",
            "error: --ckpt_path=best names the best checkpoint of a fit run earlier in the same process, "
            "which a validate command never has; pass the checkpoint file",
        ),
        (
            "fit",
            "hpc",
            "error: --ckpt_path=hpc names a SLURM checkpoint, which runs do not keep; pass the checkpoint file",
        ),
    ],
)
def test_a_checkpoint_name_lightning_cannot_resolve_here_is_refused(capsys, tmp_path, subcommand, value, message):
    with pytest.raises(SystemExit) as exited:
        main([subcommand, *BASE[1:], f"--trainer.default_root_dir={tmp_path}", f"--ckpt_path={value}"])
    assert exited.value.code == 2
    assert one_error_line(capsys.readouterr().err).startswith(message.format(root=tmp_path))


def test_missing_config_file_is_named(capsys, tmp_path):
    err = run_in_process(capsys, "--config", str(tmp_path / "nope.yaml"))
    assert f"error: --config: File does not exist: '{tmp_path / 'nope.yaml'}'" in err and "usage:" not in err


@pytest.mark.parametrize("kind", ["missing", "truncated", "unsafe"])
def test_unreadable_checkpoints_are_reported_before_anything_runs(capsys, tmp_path, tied_checkpoint, kind):
    path = tmp_path / f"{kind}.ckpt"
    if kind == "truncated":
        path.write_bytes(tied_checkpoint.read_bytes()[:4000])
    elif kind == "unsafe":
        checkpoint = torch.load(tied_checkpoint, weights_only=True)
        checkpoint["extra"] = argparse.Namespace(note="any pickled object")
        torch.save(checkpoint, path)
    err = run_in_process(capsys, f"--trainer.default_root_dir={tmp_path}", f"--ckpt_path={path}")
    expected = {"missing": "does not exist", "truncated": "could not be read", "unsafe": "pass --weights_only=false"}
    assert f"error: checkpoint '{path}'" in err and expected[kind] in err


def one_error_line(err: str) -> str:
    """The message of a run that ended with one `error:` line and no traceback."""
    lines = [line for line in err.splitlines() if line.startswith("error:")]
    assert len(lines) == 1 and "Traceback" not in err, err[-3000:]
    return lines[0]


def write_bad_data(kind: str, folder: Path, monkeypatch) -> tuple[list[str], str]:
    """A hostile data file (or a full disk), the arguments that read it, and what the message must say."""
    if kind == "not_utf8":
        (folder / "latin1.txt").write_bytes(b"the man is sleeping .\ncaf\xe9 au lait\n")
        return [
            f"--data.train_files=[{folder}/latin1.txt]",
            "--data.vocab_size=300",
        ], f"train file '{folder}/latin1.txt' is not UTF-8 text (convert it to UTF-8): 'utf-8' codec can't decode"
    if kind == "giant_line":
        from tiedemb.data import text

        monkeypatch.setattr(text, "MAX_DOCUMENT_BYTES", 1000)  # the 100 MB case: tests/data/test_text_files.py
        (folder / "one-line.txt").write_text("word " * 400)
        return [
            f"--data.train_files=[{folder}/one-line.txt]",
            "--data.vocab_size=300",
        ], f"train file '{folder}/one-line.txt', line 1: a document of more than 1000 bytes"
    if kind == "full_disk":
        import errno

        import datasets

        def full(*_, **__):
            raise OSError(errno.ENOSPC, "No space left on device")

        monkeypatch.setattr(datasets.Dataset, "save_to_disk", full)
        (folder / "text.txt").write_text("the man is sleeping .\n" * 400)  # a validation block too
        return [
            f"--data.train_files=[{folder}/text.txt]",
            "--data.vocab_size=300",
            f"--data.cache_dir={folder}/cache",
        ], f"no space left on the device holding '{folder}/cache/text' while writing the prepared text"
    glue = ["--data=tiedemb.data.GlueData", "--data.task=mrpc", f"--data.data_dir={folder}"]
    header = "Quality\t#1 ID\t#2 ID\t#1 String\t#2 String\n"
    (folder / "MRPC").mkdir()
    (folder / "MRPC" / "dev.tsv").write_text(header + "1\t1\t2\ta\ta\n")
    if kind == "glue_no_rows":
        (folder / "MRPC" / "train.tsv").write_text(header)
        return glue, f"{folder}/MRPC/train.tsv: the train file has a header but no examples"
    (folder / "MRPC" / "train.tsv").write_text(header + "1\t1\t2\ta\ta\n2\t3\t4\tb\tb\n")
    return glue, f"{folder}/MRPC/train.tsv, row 2: label '2' is not a MRPC label (expected one of 0, 1)"


@pytest.mark.parametrize("kind", ["not_utf8", "giant_line", "full_disk", "glue_no_rows", "glue_label_out_of_range"])
def test_hostile_data_files_get_one_message(capsys, tmp_path, monkeypatch, tiny_tokenizer_dir, kind):
    arguments, needle = write_bad_data(kind, tmp_path, monkeypatch)
    if kind.startswith("glue"):
        arguments.append(f"--data.tokenizer={tiny_tokenizer_dir}")
    message = one_error_line(run_in_process(capsys, f"--trainer.default_root_dir={tmp_path / 'run'}", *arguments))
    assert message.startswith(f"error: {needle}"), message


@pytest.mark.parametrize(
    ("typo", "suggestion"),
    [
        ("trainer:\n  max_stepz: 3\n", "does not accept option 'trainer.max_stepz'; did you mean trainer.max_steps?"),
        (
            "model:\n  init_args:\n    hiden_size: 64\n",
            "Option 'hiden_size' is not accepted; did you mean hidden_size?",
        ),
        ("data:\n  init_args:\n    batch_sise: 4\n", "Option 'batch_sise' is not accepted; did you mean batch_size?"),
    ],
)
def test_a_typo_in_a_config_file_gets_the_nearest_valid_key(capsys, tmp_path, typo, suggestion):
    config = tmp_path / "typo.yaml"
    config.write_text(typo)
    err = run_in_process(capsys, "--config", str(config))
    errors = [line for line in err.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and errors[0].endswith(suggestion), err


def test_an_option_of_another_class_is_named_without_a_far_fetched_suggestion(capsys):
    # the pretraining scale overlay on a GLUE config: data.vocab_size is PretrainData's
    with pytest.raises(SystemExit) as exited:
        main(["fit", "--config", str(CONFIGS / "glue" / "mrpc.yaml"), "--config", str(CONFIGS / "scale" / "tiny.yaml")])
    assert exited.value.code == 2
    err = capsys.readouterr().err
    errors = [line for line in err.splitlines() if line.startswith("error:")]
    assert errors == ["error: --data 'tiedemb.data.GlueData': Option 'vocab_size' is not accepted"], err


def test_a_typo_on_the_command_line_gets_the_nearest_valid_key(capsys):
    err = run_in_process(capsys, "--trainer.max_stepz=3")
    assert "error: unrecognized arguments: --trainer.max_stepz=3; did you mean trainer.max_steps?" in err


@pytest.mark.parametrize("kind", ["state_dict", "pytorch_model.bin"])
def test_a_file_that_is_not_a_run_checkpoint_is_named_for_what_it_is(capsys, tmp_path, tied_checkpoint, kind):
    """A bare state dict or transformers' weights at --ckpt_path: what the file is, and what is expected."""
    if kind == "state_dict":
        path = tmp_path / "weights.pt"
        torch.save(torch.load(tied_checkpoint, weights_only=True)["state_dict"], path)
        expected = "holds a bare state dict ("
    else:
        from transformers import BertConfig, BertForMaskedLM

        model = BertForMaskedLM(
            BertConfig(vocab_size=30, hidden_size=8, num_hidden_layers=1, num_attention_heads=2, intermediate_size=16)
        )
        path = tmp_path / "pytorch_model.bin"
        torch.save(model.state_dict(), path)  # what transformers writes without safetensors
        expected = "holds a bare state dict ("
    err = run_in_process(capsys, f"--trainer.default_root_dir={tmp_path}", f"--ckpt_path={path}")
    errors = [line for line in err.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "Traceback" not in err, err
    assert (
        errors[0].startswith(f"error: checkpoint '{path}' {expected}")
        and "not a checkpoint of a tiedemb run" in errors[0]
    )
    assert "as model.pretrained" in errors[0]
