"""The study's variant configs are its recipe plus their head lines, so the recipe is written once."""

from __future__ import annotations

from pathlib import Path

import yaml

CONFIGS = Path(__file__).resolve().parents[1] / "configs"
BASE = "base/study.yaml"


def test_every_variant_names_the_study_recipe_first_and_sets_only_model_lines():
    variants = sorted(CONFIGS.glob("*.yaml"))
    assert len(variants) == 8
    for variant in variants:
        content = yaml.safe_load(variant.read_text())
        keys = list(content)
        # first: jsonargparse applies a config file's `config:` before the keys after it, which win
        assert keys[0] == "config" and content["config"] == BASE, variant.name
        assert keys[1:] and all(key.startswith("model.init_args.") for key in keys[1:]), variant.name
        assert "model.init_args.head" in keys, variant.name


def test_the_recipe_names_its_classes_and_no_head():
    recipe = yaml.safe_load((CONFIGS / BASE).read_text())
    assert recipe["model"]["class_path"] == "tiedemb.PretrainModule"
    assert recipe["data"]["class_path"] == "tiedemb.data.PretrainData"
    assert "head" not in recipe["model"]["init_args"]  # each variant states its own
