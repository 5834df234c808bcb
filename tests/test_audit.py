"""``tiedemb audit``: transformers architectures at tiny sizes, predicted against measured initial loss,
the verdict, the remedies, and one line for each bad input."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from tiedemb.audit import main
from tiedemb.weights.audit.build import build_model, make_config
from tiedemb.weights.audit.measure import head_logits, measure
from tiedemb.weights.audit.run import SMALL_RATIO, audit
from tiedemb.weights.audit.tokens import make_batch

ROOT = Path(__file__).resolve().parents[1]
DEPTH = {"num_hidden_layers": 2, "vocab_size": 1000}
ONE_LAYER = {"num_hidden_layers": 1, "vocab_size": 300}
DECODER = {"hidden_size": 64, "num_attention_heads": 4, "num_key_value_heads": 2, "intermediate_size": 128}
GEMMA = {"num_attention_heads": 4, "num_key_value_heads": 1, "head_dim": 32, "intermediate_size": 128}
# A small init std keeps the residual branches small beside the embedding: the theory's assumption.
SMALL = {"initializer_range": 0.002}
NEAR_IDENTITY = {
    "llama": {**DECODER, **DEPTH, **SMALL, "tie_word_embeddings": True},
    "qwen2": {**DECODER, **DEPTH, **SMALL, "tie_word_embeddings": True},
    "gpt2": {"n_embd": 64, "n_head": 4, **DEPTH, **SMALL},
    "bert": {"hidden_size": 64, "num_attention_heads": 4, "intermediate_size": 128, **DEPTH, **SMALL},
    "albert": {
        "hidden_size": 64,
        "embedding_size": 16,
        "num_attention_heads": 4,
        "intermediate_size": 128,
        **DEPTH,
        **SMALL,
    },
    # input scale sqrt(d): the token vectors dominate, and the tied start is 3.8 nats above ln n
    "gemma": {"hidden_size": 512, **GEMMA, "num_hidden_layers": 2, "vocab_size": 500},
    # output scale d^-1/2 and T5's final norm gain (initializer_factor)
    "t5": {
        "d_model": 256,
        "d_kv": 16,
        "num_heads": 4,
        "d_ff": 64,
        "num_layers": 2,
        "vocab_size": 500,
        "initializer_factor": 0.3,
    },
}


@pytest.fixture(scope="module")
def audits():
    return {
        name: audit(model_type=name, overrides=overrides, remedies=True) for name, overrides in NEAR_IDENTITY.items()
    }


@pytest.mark.parametrize("name", list(NEAR_IDENTITY))
def test_where_the_branches_are_small_the_prediction_is_within_5_percent_of_the_measured_loss(audits, name):
    result = audits[name]
    assert result.branch_ratio <= SMALL_RATIO
    assert abs(result.predicted.loss - result.measured) <= 0.05 * result.measured
    for remedy in result.remedies:
        assert remedy.not_applicable is None
        if remedy.branch_ratio <= SMALL_RATIO:
            assert abs(remedy.predicted - remedy.measured) <= 0.05 * remedy.measured, remedy


def test_the_input_scale_makes_a_tied_2_gram_start_and_the_remedies_bring_it_to_ln_n(audits):
    from tiedemb.weights.audit.report import lines

    gemma = audits["gemma"]
    assert gemma.arch.input_scale == pytest.approx(512**0.5)
    assert gemma.two_gram and gemma.measured > gemma.log_n + 3
    assert gemma.copy_rate > 0.9
    text = "\n".join(lines(gemma))
    assert "verdict          starts as a tied 2-gram model" in text
    assert "theory           applies" in text
    for remedy in gemma.remedies:
        assert remedy.measured < gemma.log_n + 0.7, remedy
    llama = "\n".join(lines(audits["llama"]))
    assert "verdict          starts near ln n" in llama


def test_t5_is_read_with_its_output_scale_and_norm_gain(audits):
    t5 = audits["t5"]
    assert t5.arch.tied and t5.arch.output_scale == pytest.approx(256**-0.5) and t5.arch.norm_gain == 0.3
    assert t5.copy_rate > 0.9  # the decoder predicts the id it reads


def test_large_branches_are_reported_and_counted():
    # Gemma 2 normalises each branch's output: beside a small embedding the stream is not near identity.
    overrides = {"hidden_size": 64, **GEMMA, "num_hidden_layers": 2, "vocab_size": 500, "final_logit_softcapping": 5.0}
    result = audit(model_type="gemma2", overrides=overrides)
    assert result.branch_ratio > 1 and result.arch.softcap == 5.0
    from tiedemb.weights.audit.report import theory_line

    assert theory_line(result).startswith(f"does not apply: the branches' output is {result.branch_ratio:.2f}x")
    assert abs(result.predicted_with_branches.loss - result.measured) <= 0.05 * result.measured


@pytest.mark.parametrize(
    ("model_type", "overrides"),
    [
        (
            "gemma2",
            {"hidden_size": 64, **GEMMA, "num_hidden_layers": 1, "vocab_size": 300, "final_logit_softcapping": 2.0},
        ),
        (
            "bert",
            {
                "hidden_size": 32,
                "num_attention_heads": 2,
                "intermediate_size": 64,
                "num_hidden_layers": 1,
                "vocab_size": 300,
            },
        ),
        ("t5", {"d_model": 32, "d_kv": 8, "num_heads": 4, "d_ff": 64, "num_layers": 1, "vocab_size": 300}),
    ],
)
def test_logits_recomputed_from_the_head_input_are_the_models(model_type, overrides):
    """The remedies recompute the logits from what met the output matrix: with no remedy that is
    the model's own output (soft-cap, bias and output scale included)."""
    config, family = make_config(model_type, None, overrides)
    model = build_model(config, family, seed=0)
    batch = make_batch(config, family.objective, (2, 16), seed=0)
    base = measure(model, family, batch)
    head = model.get_output_embeddings()
    softcap = getattr(config, "final_logit_softcapping", None)
    with torch.no_grad():
        expected = model(**batch.inputs).logits
        recomputed = head_logits(base.head_input, head.weight, head.bias, softcap)
    torch.testing.assert_close(recomputed, expected)


def test_an_untied_model_has_no_remedy_to_apply():
    overrides = {"hidden_size": 32, "num_attention_heads": 4, "intermediate_size": 64, **DEPTH}
    result = audit(model_type="gpt_neox", overrides=overrides, remedies=True)
    assert not result.arch.tied
    assert {remedy.not_applicable for remedy in result.remedies} == {"the model's head is not tied"}


def test_a_local_config_json_is_audited(tmp_path, capsys):
    from transformers import AutoConfig

    AutoConfig.for_model("gpt2", n_embd=32, n_head=2, n_layer=1, vocab_size=300).save_pretrained(tmp_path)
    assert main([str(tmp_path), "--batch", "2", "--seq-len", "8"]) == 0
    out = capsys.readouterr().out
    for label in ("residual ratio", "predicted", "measured", "ln n             5.70", "verdict"):
        assert label in out


def bad(tmp_path: Path) -> dict[str, tuple[list[str], str]]:
    (tmp_path / "plain.json").write_text(json.dumps({"hidden_size": 8}))
    return {
        "unknown": (["--model-type", "llamaa"], "error: unknown model_type 'llamaa'"),
        "no head": (["--model-type", "vit"], "error: model_type 'vit' has no language-model head"),
        "not read": (
            ["--model-type", "opt"],
            "error: model_type 'opt' is a language model the audit does not read yet",
        ),
        "cannot build": (
            ["--model-type", "llama", "--set", "hidden_size=60", "num_attention_heads=7"],
            "error: transformers cannot build a llama config from these settings: The hidden size (60)",
        ),
        "too large": (["--model-type", "llama"], "error: the llama model at 32 layers has about"),
        "no equals": (["--model-type", "gpt2", "--set", "n_layer"], "error: --set expects KEY=VALUE, got 'n_layer'"),
        "no such key": (
            ["--model-type", "gpt2", "--set", "layers=2"],
            "error: --set layers=...: the gpt2 config has no setting 'layers'",
        ),
        "nothing": ([], "error: a config.json (or the folder holding it) or --model-type is required"),
        "no model_type": ([str(tmp_path / "plain.json")], "error: "),
        "no config": ([str(tmp_path / "absent")], "error: no config.json at"),
    }


@pytest.mark.parametrize(
    "case",
    [
        "unknown",
        "no head",
        "not read",
        "cannot build",
        "too large",
        "no equals",
        "no such key",
        "nothing",
        "no model_type",
        "no config",
    ],
)
def test_bad_input_is_one_line_and_exit_2(tmp_path, capsys, case):
    argv, start = bad(tmp_path)[case]
    assert main(argv) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert len(captured.err.strip().splitlines()) == 1, captured.err
    assert captured.err.startswith(start), captured.err
    if case == "too large":
        assert "--set num_hidden_layers=" in captured.err


def test_python_m_tiedemb_audit_prints_the_audit():
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "tiedemb",
            "audit",
            "--model-type",
            "gpt2",
            "--set",
            "n_layer=1",
            "n_embd=32",
            "n_head=2",
            "vocab_size=300",
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    for label in ("predicted", "measured", "ln n", "verdict          starts near ln n"):
        assert label in result.stdout


def test_ids_from_a_local_text_and_tokenizer_are_scored_with_its_mask_token(tmp_path):
    from stand_in_data import write_text, write_wordpiece_tokenizer

    text = write_text(tmp_path / "text.txt", paragraphs=40)
    tokenizer = write_wordpiece_tokenizer(tmp_path / "tokenizer", [text], vocab_size=300)
    overrides = {"hidden_size": 32, "num_attention_heads": 2, "intermediate_size": 64} | ONE_LAYER
    result = audit(model_type="bert", overrides=overrides, text=text, tokenizer=str(tokenizer), batch_size=2)
    assert "ids of text.txt tokenised by" in result.tokens
    from transformers import AutoTokenizer

    mask = AutoTokenizer.from_pretrained(str(tokenizer)).mask_token_id
    assert f"mask id {mask}," in result.tokens
    assert abs(result.predicted.loss - result.measured) <= 0.05 * result.measured


def test_the_masked_lm_batch_scores_bert_s_share_of_each_row():
    config, _ = make_config("bert", None, {"vocab_size": 300})
    for seed in range(20):  # short rows: some draw no random replacement at all
        batch = make_batch(config, "mlm", (3, 8), seed=seed)
        assert batch.scored.sum(dim=1).tolist() == [1, 1, 1]
        shown = batch.inputs["input_ids"]
        assert torch.equal(batch.current, shown)
