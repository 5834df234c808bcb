"""An FSDP sharded checkpoint folder is consolidated through Lightning's documented command.

The folder is written as Lightning's FSDP strategy writes one (``torch.distributed.checkpoint``
shards holding ``model`` and ``optimizer_<i>``, the rest in ``meta.pt``), in one process, so that
this runs without GPUs; tests/test_scale_gpu.py consolidates one a real FSDP run wrote.
"""

from __future__ import annotations

import pytest
import torch

from tiedemb.errors import UserError
from tiedemb.training.single_checkpoint import consolidate_checkpoint

TOKEN = "model.embedding.token.weight"
DECODER = "model.head.decoder.weight"


def sharded_folder(path, head: str = "tied_orth"):
    import torch.distributed.checkpoint as dcp

    path.mkdir()
    weights = {TOKEN: torch.randn(12, 4), "model.encoder.weight": torch.randn(4, 4)}
    optimizer = {"state": {0: {"step": torch.tensor(7.0)}}, "param_groups": [{"lr": 0.1, "params": [0]}]}
    with pytest.warns(UserWarning, match="single process"):
        dcp.save({"model": weights, "optimizer_0": optimizer}, checkpoint_id=path)
    torch.save({"hyper_parameters": {"head": head}, "global_step": 7, "epoch": 0}, path / "meta.pt")
    return weights


@pytest.mark.end_to_end
def test_a_sharded_folder_becomes_one_trainer_checkpoint_with_the_tie_under_both_names(tmp_path):
    weights = sharded_folder(tmp_path / "last.ckpt")
    output = consolidate_checkpoint(tmp_path / "last.ckpt", tmp_path / "one" / "model.ckpt")
    checkpoint = torch.load(output, weights_only=True)
    assert checkpoint["global_step"] == 7 and checkpoint["hyper_parameters"] == {"head": "tied_orth"}
    assert torch.equal(checkpoint["state_dict"]["model.encoder.weight"], weights["model.encoder.weight"])
    assert torch.equal(checkpoint["state_dict"][TOKEN], weights[TOKEN])
    assert torch.equal(checkpoint["state_dict"][DECODER], weights[TOKEN])  # the tied matrix, under the head's name
    [optimizer] = checkpoint["optimizer_states"]  # Lightning's optimizer_0 made the Trainer's list
    assert optimizer["param_groups"][0]["lr"] == 0.1
    assert [path.name for path in (tmp_path / "one").iterdir()] == ["model.ckpt"]  # no scratch left behind


def test_a_folder_that_is_no_checkpoint_is_refused_in_words(tmp_path):
    (tmp_path / "empty").mkdir()
    with pytest.raises(UserError, match="neither a checkpoint file nor a sharded FSDP or DeepSpeed"):
        consolidate_checkpoint(tmp_path / "empty", tmp_path / "out.ckpt")
