"""GlueModule through the real command line: fit, test, predict, metrics, files, pretrained sources."""

from __future__ import annotations

import csv
import shutil
from pathlib import Path

import lightning as L
import pytest
import torch
from run_dirs import run_checkpoint
from tiny_vocab import TINY_VOCAB
from transformers import AutoTokenizer

from tiedemb import GlueModule, PretrainModule
from tiedemb.cli import main
from tiedemb.errors import UserError
from tiedemb.modules.glue import epochs_to_converge
from tiedemb.training.files import write_tsv

ROOT = Path(__file__).resolve().parents[2]
MRPC_CONFIG = ROOT / "configs" / "glue" / "mrpc.yaml"
MNLI_CONFIG = ROOT / "configs" / "glue" / "mnli.yaml"
TINY_MODEL = [
    "--model.pretrained=null",
    "--model.hidden_size=32",
    "--model.num_layers=1",
    "--model.num_heads=2",
    "--model.intermediate_size=64",
]


def quiet(root: Path) -> list[str]:
    return [
        "--trainer.logger=false",
        "--trainer.enable_progress_bar=false",
        "--trainer.enable_model_summary=false",
        f"--trainer.default_root_dir={root}",
    ]


def tsv_lines(task_dir: Path, split: str = "dev") -> list[str]:
    return (task_dir / f"{split}.tsv").read_text(encoding="utf-8-sig").splitlines()[1:]


def read_tsv(path: Path) -> list[dict[str, str]]:
    with path.open(newline="", encoding="utf-8") as handle:
        return list(csv.DictReader(handle, delimiter="\t", quoting=csv.QUOTE_NONE))


# --- metrics against hand counts ---------------------------------------------------------------


def test_mrpc_metrics_score_the_positive_class_as_counted_by_hand():
    from tiedemb.modules.glue import build_metric

    predictions = torch.tensor([1, 1, 1, 0, 0, 1, 0, 1, 1, 0])
    labels = torch.tensor([1, 0, 1, 0, 1, 1, 0, 0, 1, 1])
    # positive class: 4 true positives, 2 false positives, 2 false negatives -> F1 = 8 / 12;
    # the negative class would score 2 * 2 / (4 + 4) = 0.5; 6 of 10 right
    assert build_metric("f1", 2)(predictions, labels).item() == pytest.approx(8 / 12)
    assert build_metric("accuracy", 2)(predictions, labels).item() == pytest.approx(0.6)


def test_the_majority_floor_scores_always_the_most_frequent_training_label_as_counted_by_hand():
    from tiedemb.modules.glue import majority_scores

    # training: three paraphrases (1) to one non-paraphrase; dev: 3 of 5 paraphrases
    found = majority_scores("mrpc", 2, [1, 0, 1, 1], {"validation": [1, 1, 0, 1, 0]})
    # answering 1 always: 3 of 5 right; positive-class F1 = 2 * 3 / (2 * 3 + 2 false positives)
    assert found == {"data/majority/accuracy": pytest.approx(0.6), "data/majority/f1": pytest.approx(6 / 8)}
    # MNLI: two dev splits named by their suffix; a tie (label 0 and 2 twice each) goes to the lowest id
    found = majority_scores("mnli", 3, [2, 0, 2, 0, 1], {"validation_matched": [0, 1], "validation_mismatched": [2]})
    assert found == {"data/majority/accuracy_matched": 0.5, "data/majority/accuracy_mismatched": 0.0}


def test_epochs_to_converge_counts_the_first_evaluation_within_1_percent_of_the_best():
    # best 0.80; 99% of it is 0.792, first reached at 1.5 (0.795); 0.79 at 1.0 falls short
    assert epochs_to_converge([(0.5, 0.60), (1.0, 0.79), (1.5, 0.795), (2.0, 0.80), (2.5, 0.78)]) == 1.5


# --- MRPC: a classic folder, through fit, test and predict -------------------------------------


@pytest.fixture(scope="module")
def mrpc_run(tmp_path_factory, glue_dir: Path, wordpiece_dir: Path):
    """One tiny fit on 64 made-up MRPC training pairs, evaluated on the whole dev file."""
    root = tmp_path_factory.mktemp("mrpc_run")
    data = [
        "--config",
        str(MRPC_CONFIG),
        f"--data.data_dir={glue_dir}",
        f"--data.tokenizer={wordpiece_dir}",
        "--data.max_train_samples=64",
        "--data.batch_size=16",
        "--data.eval_batch_size=24",
        *TINY_MODEL,
        *quiet(root),
    ]
    cli = main(["fit", *data, "--trainer.max_steps=8", "--trainer.val_check_interval=2", "--model.learning_rate=1e-3"])
    return cli, root, data


@pytest.mark.end_to_end
def test_mrpc_fit_logs_accuracy_f1_and_epochs_to_converge(mrpc_run):
    cli, root, _ = mrpc_run
    metrics = cli.trainer.callback_metrics
    assert {"val/accuracy", "val/f1", "val/loss", "val/epochs_to_converge"} <= set(metrics)
    assert 0.0 <= float(metrics["val/accuracy"]) <= 1.0
    model = cli.model
    assert model.hparams.task == "mrpc" and model.hparams.num_labels == 2  # linked from the data
    # 64 pairs / 16 = 4 batches per epoch, validated every 2 steps for 8 steps
    assert [epoch for epoch, _ in model.history] == [0.5, 1.0, 1.5, 2.0]
    assert model.history[-1][1] == pytest.approx(float(metrics["val/accuracy"]))  # the curve is the logged one
    # what is logged is the module's figure for that curve (the figure itself: the hand-made curves below)
    assert float(metrics["val/epochs_to_converge"]) == pytest.approx(epochs_to_converge(model.history))
    checkpoints = run_checkpoint(root).parent
    assert any(path.name.startswith("epoch") for path in checkpoints.iterdir())  # monitored val/accuracy


@pytest.mark.end_to_end
def test_the_majority_floor_is_logged_at_the_start(mrpc_run, glue_dir, tmp_path):
    """Against a recount of the made-up MRPC files: the most frequent training label, scored on dev."""
    train, dev = ([line.split("\t")[0] for line in tsv_lines(glue_dir / "MRPC", name)] for name in ("train", "dev"))
    majority = max(sorted(set(train)), key=train.count)
    accuracy = dev.count(majority) / len(dev)
    _, _, data = mrpc_run
    args = [a for a in data if not a.startswith("--trainer.default_root_dir")]
    csv_logger = ["--trainer.logger=lightning.pytorch.loggers.CSVLogger", f"--trainer.logger.save_dir={tmp_path}"]
    args = [a for a in args if a != "--trainer.logger=false"]
    main(["fit", *args, *csv_logger, f"--trainer.default_root_dir={tmp_path}", "--trainer.max_steps=1"])
    (metrics,) = tmp_path.glob("**/metrics.csv")
    logged = [row for row in csv.DictReader(metrics.open()) if row.get("data/majority/accuracy")]
    assert len(logged) == 1 and logged[0]["step"] == "0"
    assert float(logged[0]["data/majority/accuracy"]) == pytest.approx(accuracy)


@pytest.mark.end_to_end
def test_mrpc_test_figures_equal_a_recount_of_the_written_dev_predictions(mrpc_run, glue_dir):
    _, root, data = mrpc_run
    mrpc_dir = glue_dir / "MRPC"
    cli = main(["test", *data, f"--ckpt_path={run_checkpoint(root)}"])
    logged = cli.trainer.callback_metrics
    rows = read_tsv(run_checkpoint(root).parent.parent / "MRPC-validation.tsv")
    labels = [int(line.split("\t")[0]) for line in tsv_lines(mrpc_dir)]  # the dev file, read by hand
    assert len(rows) == len(labels) and [int(row["index"]) for row in rows] == list(range(len(labels)))
    assert [int(row["label"]) for row in rows] == labels
    pairs = [(int(row["prediction"]), int(row["label"])) for row in rows]
    accuracy = sum(p == y for p, y in pairs) / len(pairs)
    true_positive = sum(p == y == 1 for p, y in pairs)
    predicted, actual = sum(p for p, _ in pairs), sum(y for _, y in pairs)
    f1 = 2 * true_positive / (predicted + actual)
    assert float(logged["test/accuracy"]) == pytest.approx(accuracy, abs=1e-6)
    assert float(logged["test/f1"]) == pytest.approx(f1, abs=1e-6)
    true_negative = sum(p == y == 0 for p, y in pairs)
    negative_f1 = 2 * true_negative / (2 * len(pairs) - predicted - actual)
    assert abs(f1 - negative_f1) > 1e-3  # so the recount tells the positive class from the negative one


@pytest.mark.end_to_end
def test_pairs_longer_than_the_positions_are_refused_before_the_data_is_read(mrpc_run, capsys):
    _, _, data = mrpc_run
    with pytest.raises(SystemExit) as exited:
        main(["fit", *data, "--data.max_length=64", "--model.max_position_embeddings=48"])
    assert exited.value.code == 2
    errors = [line for line in capsys.readouterr().err.splitlines() if line.startswith("error:")]
    assert errors == [
        "error: data.max_length=64 is longer than model.max_position_embeddings=48, where the model's "
        "learned positions end; lower data.max_length or raise model.max_position_embeddings"
    ]


@pytest.mark.end_to_end
def test_mrpc_predict_writes_a_submission_file_and_never_overwrites_it(mrpc_run, glue_dir):
    _, root, data = mrpc_run
    test_rows = len((glue_dir / "MRPC" / "test.tsv").read_text(encoding="utf-8").splitlines()) - 1
    predict = ["predict", *data, f"--ckpt_path={run_checkpoint(root)}"]
    main(predict)
    folder = run_checkpoint(root).parent.parent  # the run's folder: predicting its checkpoint writes there
    text = (folder / "MRPC.tsv").read_text(encoding="utf-8")
    lines = text.splitlines()
    assert lines[0] == "index\tprediction" and len(lines) == test_rows + 1
    assert [int(line.split("\t")[0]) for line in lines[1:]] == list(range(test_rows))
    assert {line.split("\t")[1] for line in lines[1:]} <= {"0", "1"}
    main(predict)
    assert (folder / "MRPC.tsv").read_text(encoding="utf-8") == text  # untouched
    assert (folder / "MRPC-1.tsv").is_file()
    assert not list(folder.glob(".*.tmp"))


@pytest.mark.end_to_end
def test_checkpoint_reloads_on_its_own(mrpc_run):
    cli, root, _ = mrpc_run
    model = GlueModule.load_from_checkpoint(run_checkpoint(root))
    assert (model.hparams.hidden_size, model.hparams.num_labels, model.hparams.task) == (32, 2, "mrpc")
    # the dev history up to the checkpoint travels with it, so a resumed run converges correctly
    assert model.history and model.history == cli.model.history[: len(model.history)]


@pytest.mark.end_to_end
@pytest.mark.parametrize("subcommand", ["test", "predict", "fit"])
def test_a_pretraining_checkpoint_as_ckpt_path_is_refused_pointing_to_model_pretrained(
    mrpc_run, tmp_path, capsys, subcommand
):
    _, _, data = mrpc_run
    module = PretrainModule(vocab_size=30522, **PRETRAIN_TINY)
    path = tmp_path / "pretraining.ckpt"
    torch.save(
        {
            "state_dict": module.state_dict(),
            "pytorch-lightning_version": L.__version__,
            "hyper_parameters": {**module.hparams, "_class_path": "tiedemb.PretrainModule"},
        },
        path,
    )
    with pytest.raises(SystemExit) as exited:
        main([subcommand, *data, f"--ckpt_path={path}"])
    assert exited.value.code == 2
    errors = [line for line in capsys.readouterr().err.splitlines() if line.startswith("error:")]
    assert errors == [
        f"error: checkpoint {str(path)!r} holds a PretrainModule, but the config's model is a GlueModule; "
        f"a pretraining checkpoint is where fine-tuning starts (fit --model.pretrained={path}); "
        "--ckpt_path takes a fine-tuning run's checkpoint"
    ]


@pytest.mark.end_to_end
def test_a_fine_tuned_checkpoint_with_a_pretraining_config_is_refused_pointing_to_the_glue_config(
    mrpc_run, tmp_path, capsys
):
    _, root, _ = mrpc_run
    checkpoint = run_checkpoint(root)
    with pytest.raises(SystemExit) as exited:
        main(
            [
                "validate",
                "--config",
                str(ROOT / "configs" / "tied_orth.yaml"),
                "--config",
                str(ROOT / "configs" / "scale" / "tiny.yaml"),
                *quiet(tmp_path),
                f"--ckpt_path={checkpoint}",
            ]
        )
    assert exited.value.code == 2
    errors = [line for line in capsys.readouterr().err.splitlines() if line.startswith("error:")]
    assert errors == [
        f"error: checkpoint {str(checkpoint)!r} holds a GlueModule, but the config's model is a "
        "PretrainModule; a fine-tuned checkpoint is evaluated with its GLUE config "
        "(configs/glue/<task>.yaml)"
    ]


# --- MNLI from a classic glue_data folder ------------------------------------------------------------

MNLI_EXAMPLES = [
    ("the man is sleeping .", "a man is sleeping .", 0),
    ("the woman is running .", "a person is running .", 0),
    ("the cat sits .", "the dog sits .", 1),
    ("the dog was running .", "a dog is sleeping .", 2),
    ("people are running .", "people are not running .", 2),
    ("a man sits .", "the man is a person .", 1),
]


def write_mnli_folder(folder: Path) -> Path:
    """A classic MNLI folder: train (the examples four times), dev_matched and an unlabelled test_matched."""
    folder.mkdir(parents=True)
    names = ("entailment", "neutral", "contradiction")
    for name, repeat, labelled in (("train", 4, True), ("dev_matched", 1, True), ("test_matched", 1, False)):
        rows = ["index\tsentence1\tsentence2" + ("\tgold_label" if labelled else "")]
        for number, (premise, hypothesis, label) in enumerate(MNLI_EXAMPLES * repeat):
            rows.append(f"{number}\t{premise}\t{hypothesis}" + (f"\t{names[label]}" if labelled else ""))
        (folder / f"{name}.tsv").write_text("\n".join(rows) + "\n", encoding="utf-8")
    return folder


@pytest.mark.end_to_end
def test_mnli_trains_and_reports_accuracy_matched_and_predicts_label_names(tmp_path, tiny_tokenizer_dir):
    data = [
        "--config",
        str(MNLI_CONFIG),
        f"--data.data_dir={write_mnli_folder(tmp_path / 'MNLI')}",
        f"--data.tokenizer={tiny_tokenizer_dir}",
        "--data.batch_size=8",
        *TINY_MODEL,
        *quiet(tmp_path / "run"),
    ]
    cli = main(["fit", *data, "--trainer.max_epochs=2", "--trainer.val_check_interval=1.0"])
    metrics = cli.trainer.callback_metrics
    assert "val/accuracy_matched" in metrics and "val/accuracy_mismatched" not in metrics
    assert cli.model.hparams.num_labels == 3
    assert "val/epochs_to_converge" in metrics
    main(["predict", *data, f"--ckpt_path={run_checkpoint(tmp_path / 'run')}"])
    rows = read_tsv(run_checkpoint(tmp_path / "run").parent.parent / "MNLI-m.tsv")
    assert len(rows) == len(MNLI_EXAMPLES)
    assert {row["prediction"] for row in rows} <= {"entailment", "neutral", "contradiction"}
    assert not (
        run_checkpoint(tmp_path / "run").parent.parent / "MNLI-mm.tsv"
    ).exists()  # no mismatched test split was given


# --- pretrained tiedemb checkpoints --------------------------------------------------------------

PRETRAIN_TINY = dict(
    hidden_size=32,
    num_layers=2,
    num_heads=2,
    intermediate_size=64,
    position="learned",
    type_vocab_size=2,
    norm_position="post",
)


def save_pretrain_checkpoint(path: Path, vocab_size: int = 120, **overrides) -> PretrainModule:
    module = PretrainModule(vocab_size=vocab_size, **{**PRETRAIN_TINY, **overrides})
    torch.save(
        {
            "state_dict": module.state_dict(),
            "hyper_parameters": dict(module.hparams),
            "pytorch-lightning_version": L.__version__,
        },
        path,
    )
    return module


def test_a_pretraining_checkpoint_supplies_embedding_and_encoder(tmp_path):
    source = save_pretrain_checkpoint(tmp_path / "pre.ckpt")
    module = GlueModule(task="mrpc", vocab_size=120, pretrained=str(tmp_path / "pre.ckpt"))
    assert module.hparams.hidden_size == 32 and module.hparams.num_layers == 2  # taken from the checkpoint
    for name, value in source.model.embedding.state_dict().items():
        torch.testing.assert_close(module.model.embedding.state_dict()[name], value)
    for name, value in source.model.encoder.state_dict().items():
        torch.testing.assert_close(module.model.encoder.state_dict()[name], value)


def test_a_checkpoint_of_the_wrong_size_is_refused_naming_both(tmp_path):
    save_pretrain_checkpoint(tmp_path / "pre.ckpt")
    with pytest.raises(UserError) as info:
        GlueModule(task="mrpc", vocab_size=30522, pretrained=str(tmp_path / "pre.ckpt"))
    assert "vocab_size=30522" in str(info.value) and "vocab_size is 120" in str(info.value)
    with pytest.raises(UserError) as info:
        GlueModule(task="mrpc", vocab_size=120, hidden_size=64, num_heads=2, pretrained=str(tmp_path / "pre.ckpt"))
    assert "hidden_size=64" in str(info.value) and "hidden_size is 32" in str(info.value)


def test_a_factorised_checkpoint_narrows_further_but_never_widens(tmp_path):
    source = save_pretrain_checkpoint(tmp_path / "pre.ckpt", embedding_dim=16)
    narrow = GlueModule(task="mrpc", vocab_size=120, embedding_dim=8, pretrained=str(tmp_path / "pre.ckpt"))
    assert narrow.model.embedding.token.weight.shape == (120, 8)
    same = GlueModule(task="mrpc", vocab_size=120, pretrained=str(tmp_path / "pre.ckpt"))
    assert same.hparams.embedding_dim == 16
    torch.testing.assert_close(same.model.embedding.projection.weight, source.model.embedding.projection.weight)
    with pytest.raises(UserError, match=r"embedding_dim=24 is wider .*\(d_e 16\)"):
        GlueModule(task="mrpc", vocab_size=120, embedding_dim=24, pretrained=str(tmp_path / "pre.ckpt"))


def test_a_tokenizer_of_another_size_is_refused_naming_the_one_the_checkpoint_was_pretrained_with(tmp_path):
    module = PretrainModule(vocab_size=120, **PRETRAIN_TINY)
    torch.save(
        {
            "state_dict": module.state_dict(),
            "hyper_parameters": dict(module.hparams),
            "datamodule_hyper_parameters": {"tokenizer": "tokenizers/mine", "train_files": ["text.txt"]},
            "pytorch-lightning_version": L.__version__,
        },
        tmp_path / "pre.ckpt",
    )
    with pytest.raises(UserError) as info:
        GlueModule(task="mrpc", vocab_size=30522, pretrained=str(tmp_path / "pre.ckpt"))
    assert str(info.value) == (
        f"the data's tokenizer has 30522 tokens, but the pretrained checkpoint "
        f"'{tmp_path / 'pre.ckpt'}' has a vocabulary of 120; it was pretrained with the "
        "tokenizer 'tokenizers/mine': pass --data.tokenizer=tokenizers/mine"
    )


@pytest.mark.end_to_end
def test_a_tokenizer_the_pretraining_run_trained_is_named_and_fine_tunes(tmp_path):
    """The trained tokenizer's folder is named by a hash of the text: the message is how a user finds it."""
    text = tmp_path / "text.txt"
    words = "the a cat dog man woman sat ran saw big small red on under near house park and with".split()
    text.write_text(
        "\n".join(" ".join(words[(row * 7 + step) % len(words)] for step in range(12)) for row in range(300))
    )
    main(
        [
            "fit",
            "--config",
            str(ROOT / "configs" / "tied_orth.yaml"),
            "--config",
            str(ROOT / "configs" / "scale" / "tiny.yaml"),
            "--model.objective=mlm",
            "--model.type_vocab_size=2",
            f"--data.train_files=[{text}]",
            "--data.vocab_size=100",
            f"--data.cache_dir={tmp_path / 'cache'}",
            "--trainer.max_steps=2",
            "--trainer.val_check_interval=2",
            "--trainer.limit_val_batches=1",
            *quiet(tmp_path / "pretraining"),
        ]
    )
    checkpoint = run_checkpoint(tmp_path / "pretraining")
    with pytest.raises(UserError) as info:
        GlueModule(task="mrpc", vocab_size=30522, pretrained=str(checkpoint))
    folder = str(info.value).rsplit("--data.tokenizer=", 1)[-1]
    assert Path(folder).parent == tmp_path / "cache" / "tokenizers" and (Path(folder) / "tokenizer.json").is_file()
    vocab_size = len(AutoTokenizer.from_pretrained(folder))
    assert vocab_size == torch.load(checkpoint, weights_only=True)["hyper_parameters"]["vocab_size"]
    assert GlueModule(task="mrpc", vocab_size=vocab_size, pretrained=str(checkpoint)).hparams.vocab_size == vocab_size


def test_reload_needs_no_pretrained_source(tmp_path):
    save_pretrain_checkpoint(tmp_path / "pre.ckpt")
    module = GlueModule(task="mrpc", vocab_size=120, embedding_dim=8, pretrained=str(tmp_path / "pre.ckpt"))
    path = tmp_path / "glue.ckpt"
    torch.save(
        {
            "state_dict": module.state_dict(),
            "hyper_parameters": dict(module.hparams),
            "pytorch-lightning_version": L.__version__,
        },
        path,
    )
    (tmp_path / "pre.ckpt").unlink()
    reloaded = GlueModule.load_from_checkpoint(path)
    assert reloaded.hparams.pretrained == str(tmp_path / "pre.ckpt")  # provenance kept
    torch.testing.assert_close(reloaded.model.embedding.token.weight, module.model.embedding.token.weight)


@pytest.mark.end_to_end
def test_a_fine_tuned_checkpoint_is_tested_and_predicts_without_its_pretrained_source(tmp_path, tiny_tokenizer_dir):
    vocab_size = len(TINY_VOCAB)
    source = tmp_path / "pretraining" / "last.ckpt"
    source.parent.mkdir()
    save_pretrain_checkpoint(source, vocab_size=vocab_size)
    data = [
        "--config",
        str(MNLI_CONFIG),
        f"--data.data_dir={write_mnli_folder(tmp_path / 'MNLI')}",
        f"--data.tokenizer={tiny_tokenizer_dir}",
        "--data.batch_size=8",
        f"--model.pretrained={source}",
        *quiet(tmp_path / "run"),
    ]
    main(["fit", *data, "--trainer.max_steps=3", "--trainer.val_check_interval=3"])
    checkpoint = f"--ckpt_path={run_checkpoint(tmp_path / 'run')}"
    before = {name: value.item() for name, value in main(["test", *data, checkpoint]).trainer.callback_metrics.items()}
    assert "test/accuracy_matched" in before

    # The pretraining run is gone (or on another machine, or a hub name offline): the fine-tuned
    # checkpoint records the architecture, and its own weights replace the source's anyway.
    shutil.rmtree(source.parent)
    after = main(["test", *data, checkpoint])
    assert {name: value.item() for name, value in after.trainer.callback_metrics.items()} == before
    assert after.model.hparams.pretrained == str(source)  # provenance kept
    main(["predict", *data, checkpoint])
    assert len(read_tsv(run_checkpoint(tmp_path / "run").parent.parent / "MNLI-m.tsv")) == len(MNLI_EXAMPLES)
    # Training still starts from the source, and says so when it is missing.
    with pytest.raises(UserError, match="does not exist"):
        GlueModule(task="mnli", vocab_size=vocab_size, pretrained=str(source))


# --- settings and small pieces -----------------------------------------------------------------------


def test_task_and_label_mistakes_are_user_errors():
    with pytest.raises(UserError, match="valid: mnli, mrpc"):
        GlueModule(task="nonsense", vocab_size=50, hidden_size=32, num_heads=2, num_layers=1, intermediate_size=32)
    with pytest.raises(UserError, match="num_labels=2 disagrees with task 'mnli', which has 3"):
        GlueModule(task="mnli", num_labels=2, vocab_size=50)
    with pytest.raises(UserError, match="num_labels must be set"):
        GlueModule(vocab_size=50)


def test_epochs_to_converge_is_the_first_epoch_within_one_percent_of_the_best():
    history = [(0.25, 0.60), (0.5, 0.80), (0.75, 0.845), (1.0, 0.85), (1.25, 0.84)]
    assert epochs_to_converge(history) == 0.75  # 0.845 >= 0.99 * 0.85
    assert epochs_to_converge([]) is None


def test_prediction_files_are_whole_and_never_replaced(tmp_path):
    first = write_tsv(tmp_path, "X.tsv", ["index", "prediction"], [(0, 1), (1, 0)])
    second = write_tsv(tmp_path, "X.tsv", ["index", "prediction"], [(0, 0)])
    assert (first.name, second.name) == ("X.tsv", "X-1.tsv")
    assert first.read_text() == "index\tprediction\n0\t1\n1\t0\n"
    assert sorted(path.name for path in tmp_path.iterdir()) == ["X-1.tsv", "X.tsv"]  # no temporary left
