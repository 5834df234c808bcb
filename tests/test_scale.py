"""Scale-out configs and the tie under sharding: what can be checked on a CPU.

Lightning's FSDP and DeepSpeed strategies refuse CPUs, so the FSDP checks here drive PyTorch's
FSDP directly (it runs on CPU with gloo when given ``device_id=cpu``) with the wrap policy that
configs/strategy/fsdp.yaml builds. The Lightning end-to-end runs are in tests/test_scale_gpu.py.
"""

from __future__ import annotations

import importlib.util
import os
import socket
from pathlib import Path
from typing import Union

import lightning as L
import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import yaml
from jsonargparse import ArgumentParser
from lightning.pytorch.strategies import DDPStrategy, FSDPStrategy, Strategy
from run_if import run_if
from tiny_runs import TINY_TIED
from torch import nn

from tiedemb import PretrainModule
from tiedemb.cli import main
from tiedemb.data import PretrainData
from tiedemb.nn import Transformer, TransformerConfig
from tiedemb.nn.model import Block
from tiedemb.training.ties import TieBroken, check_ties

ROOT = Path(__file__).resolve().parents[1]
CONFIGS = ROOT / "configs"
STRATEGIES = {
    name: CONFIGS / "strategy" / f"{name}.yaml" for name in ("ddp", "fsdp", "deepspeed_zero2", "deepspeed_zero3")
}
VARIANTS = sorted(CONFIGS.glob("*.yaml"))
TINY_MODEL = dict(hidden_size=32, num_layers=2, num_heads=2, intermediate_size=64, dropout=0.0, attention_dropout=0.0)
DEEPSPEED = importlib.util.find_spec("deepspeed") is not None


def strategy_from_yaml(name: str) -> Strategy:
    """The object Lightning gets for ``trainer.strategy`` in the config, parsed the CLI's way."""
    parser = ArgumentParser()
    parser.add_argument("--strategy", type=Union[str, Strategy])  # noqa: UP007 (the Trainer's annotation, verbatim)
    value = yaml.safe_load(STRATEGIES[name].read_text())["trainer"]["strategy"]
    return parser.instantiate_classes(parser.parse_object({"strategy": value})).strategy


# -- configs --------------------------------------------------------------------------------------
@pytest.mark.parametrize("strategy", sorted(STRATEGIES), ids=str)
@pytest.mark.end_to_end
def test_strategy_configs_compose_with_every_variant(strategy, capsys):
    for variant in VARIANTS:
        with pytest.raises(SystemExit) as exited:
            main(["fit", "--config", str(variant), "--config", str(STRATEGIES[strategy]), "--print_config"])
        assert exited.value.code == 0
        printed = yaml.safe_load(capsys.readouterr().out)
        # The overlay changes the strategy and nothing of the variant's model (as the variant alone resolves it:
        # the study's recipe and the variant's lines).
        with pytest.raises(SystemExit):
            main(["fit", "--config", str(variant), "--print_config"])
        variant_model = yaml.safe_load(capsys.readouterr().out)["model"]["init_args"]
        assert {key: printed["model"]["init_args"][key] for key in variant_model} == variant_model
        assert strategy.split("_")[0] in str(printed["trainer"]["strategy"]).lower()
        if strategy.startswith("deepspeed"):
            assert printed["trainer"]["strategy"]["init_args"]["stage"] == int(strategy[-1])


def test_ddp_config_builds_lightnings_ddp_strategy():
    strategy = strategy_from_yaml("ddp")
    assert isinstance(strategy, DDPStrategy)
    assert strategy._ddp_kwargs["find_unused_parameters"] is False


def test_fsdp_config_wraps_transformer_blocks_only_and_saves_full_state():
    strategy = strategy_from_yaml("fsdp")
    assert isinstance(strategy, FSDPStrategy)
    policy = strategy.kwargs["auto_wrap_policy"]
    assert policy._module_classes == {Block}
    assert strategy._state_dict_type == "full"
    assert strategy.kwargs["use_orig_params"] is True
    # Applied to a model, the policy selects the blocks and nothing else: the embedding and the
    # head stay in the root unit.
    model = Transformer(TransformerConfig(vocab_size=64, head="tied_orth", **TINY_MODEL))
    selected = policy._run_policy(model, set(), {})
    assert set(selected) == set(model.encoder.blocks)


@run_if(without_cuda=True)
@pytest.mark.parametrize("strategy", ["fsdp", "deepspeed_zero3"])
@pytest.mark.end_to_end
def test_gpu_strategy_on_this_cpu_machine_exits_with_one_message(strategy, capsys, tmp_path):
    with pytest.raises(SystemExit) as exited:
        main(
            [
                "fit",
                *TINY_TIED,
                "--config",
                str(STRATEGIES[strategy]),
                "--trainer.logger=false",
                f"--trainer.default_root_dir={tmp_path}",
            ]
        )
    assert exited.value.code == 2
    error = capsys.readouterr().err
    (line,) = [line for line in error.splitlines() if line.startswith("error:")]
    assert "Traceback" not in error
    assert ("install deepspeed" if strategy.startswith("deepspeed") and not DEEPSPEED else "GPU accelerator") in line


# -- the tie through materialisation and wrapping ------------------------------------------------
def test_meta_device_materialisation_unties_and_tie_weights_repairs_it():
    """The classic failure: ``to_empty`` gives each use of the shared Parameter its own copy."""
    with torch.device("meta"):
        model = Transformer(TransformerConfig(vocab_size=64, head="tied", **TINY_MODEL))
    model.to_empty(device="cpu")
    assert not model.is_tied
    model.tie_weights()
    assert model.is_tied


def test_configure_model_builds_an_empty_initialised_model_for_real_and_tied():
    with torch.device("meta"):
        module = PretrainModule(vocab_size=64, head="tied_orth", position="rope", **TINY_MODEL)
    module.configure_model()
    assert not any(p.is_meta for p in module.parameters())
    assert not any(b.is_meta for b in module.buffers())
    assert module.model.is_tied
    assert module.model.embedding.token.weight.std() > 0  # drawn, not left empty


def tiny_data(objective: str = "clm") -> PretrainData:
    return PretrainData(
        vocab_size=200,
        block_size=16,
        batch_size=4,
        objective=objective,
        synthetic_tokens=2048,
        synthetic_val_tokens=256,
    )


def tiny_trainer(tmp_path: Path, **overrides) -> L.Trainer:
    settings = dict(
        max_steps=1,
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        default_root_dir=tmp_path,
        limit_val_batches=1,
        val_check_interval=1,
        accelerator="cpu",
    )
    return L.Trainer(**{**settings, **overrides})


def untie(model: Transformer) -> None:
    model.head.decoder.weight = nn.Parameter(model.embedding.token.weight.detach().clone())


@pytest.mark.end_to_end
def test_fit_reties_a_model_untied_before_setup(tmp_path):
    data = tiny_data()
    module = PretrainModule(vocab_size=data.vocab_size, head="tied", objective="clm", **TINY_MODEL)
    untie(module.model)
    tiny_trainer(tmp_path).fit(module, datamodule=data)
    assert module.model.is_tied


class UntieAfterSetup(L.Callback):
    """Plays a strategy that replaced the shared Parameter while wrapping."""

    def on_fit_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        untie(pl_module.model)


@pytest.mark.end_to_end
def test_a_model_untied_by_setup_stops_before_the_first_step(tmp_path):
    data = tiny_data()
    module = PretrainModule(vocab_size=data.vocab_size, head="tied", objective="clm", **TINY_MODEL)
    trainer = tiny_trainer(tmp_path, callbacks=[UntieAfterSetup()])
    with pytest.raises(TieBroken, match="has a matrix of its own"):
        trainer.fit(module, datamodule=data)
    assert trainer.global_step == 0


def test_untied_heads_pass_the_tie_check():
    check_ties(Transformer(TransformerConfig(vocab_size=64, head="untied", **TINY_MODEL)))


# -- checkpoints ----------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def tied_checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("tied_checkpoint")
    data = tiny_data()
    module = PretrainModule(vocab_size=data.vocab_size, head="tied_orth", objective="clm", **TINY_MODEL)
    trainer = tiny_trainer(folder)
    trainer.fit(module, datamodule=data)
    path = folder / "model.ckpt"
    trainer.save_checkpoint(path)
    return path


@pytest.mark.parametrize("kept", ["model.embedding.token.weight", "model.head.decoder.weight"])
@pytest.mark.end_to_end
def test_a_checkpoint_naming_the_shared_matrix_once_loads_tied(tmp_path, tied_checkpoint, kept):
    checkpoint = torch.load(tied_checkpoint, weights_only=False)
    matrix = checkpoint["state_dict"][kept].clone()
    dropped = ({"model.embedding.token.weight", "model.head.decoder.weight"} - {kept}).pop()
    del checkpoint["state_dict"][dropped]
    torch.save(checkpoint, tmp_path / "one_name.ckpt")

    reloaded = PretrainModule.load_from_checkpoint(tmp_path / "one_name.ckpt")
    assert reloaded.model.is_tied
    torch.testing.assert_close(reloaded.model.embedding.token.weight.detach(), matrix, rtol=0, atol=0)


@pytest.mark.end_to_end
def test_a_checkpoint_with_two_different_matrices_is_refused_for_a_tied_model(tmp_path, tied_checkpoint):
    checkpoint = torch.load(tied_checkpoint, weights_only=False)
    checkpoint["state_dict"]["model.head.decoder.weight"] = checkpoint["state_dict"]["model.head.decoder.weight"] + 1.0
    torch.save(checkpoint, tmp_path / "untied.ckpt")
    with pytest.raises(TieBroken, match="written by an untied model"):
        PretrainModule.load_from_checkpoint(tmp_path / "untied.ckpt")


# -- FSDP on two CPU processes --------------------------------------------------------------------
FSDP_CONFIG = dict(
    vocab_size=96, objective="clm", position="rope", type_vocab_size=0, norm_position="pre", **TINY_MODEL
)
FSDP_STEPS = 3


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _global_batch() -> torch.Tensor:
    return torch.randint(5, FSDP_CONFIG["vocab_size"], (4, 16), generator=torch.Generator().manual_seed(1))


def _train(model: nn.Module, batches: torch.Tensor) -> None:
    """A few AdamW steps of CLM on ``batches`` (every row a full block: equal target counts)."""
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    for _ in range(FSDP_STEPS):
        optimizer.zero_grad()
        model(batches, labels=batches).loss.backward()
        optimizer.step()


def _fsdp_worker(rank: int, world_size: int, port: int, wrap_classes: set, out: str) -> None:
    from torch.distributed.fsdp import FullStateDictConfig, StateDictType
    from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
    from torch.distributed.fsdp.wrap import ModuleWrapPolicy

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world_size)
    try:
        # A policy that also wraps nn.Linear makes the head's decoder a unit of its own, away
        # from the token embedding: the check must refuse it before any forward pass.
        separated = FSDP(
            Transformer(TransformerConfig(head="tied", **FSDP_CONFIG)),
            auto_wrap_policy=ModuleWrapPolicy({*wrap_classes, nn.Linear}),
            use_orig_params=True,
            device_id=torch.device("cpu"),
        )
        try:
            check_ties(separated)
            refusal = None
        except TieBroken as error:
            refusal = str(error)

        torch.manual_seed(0)
        model = Transformer(TransformerConfig(head="tied", **FSDP_CONFIG))
        wrapped = FSDP(
            model, auto_wrap_policy=ModuleWrapPolicy(wrap_classes), use_orig_params=True, device_id=torch.device("cpu")
        )
        check_ties(wrapped)
        rows = _global_batch().chunk(world_size)[rank]  # this rank's half of the global batch
        _train(wrapped, rows)
        # The full state dict on rank 0 (left on the device: FSDP cannot offload "to CPU" from a
        # CPU device).
        config = FullStateDictConfig(offload_to_cpu=False, rank0_only=True)
        with FSDP.state_dict_type(wrapped, StateDictType.FULL_STATE_DICT, config):
            state = wrapped.state_dict()
        if rank == 0:
            torch.save({"state_dict": state, "is_tied": model.is_tied, "refusal": refusal}, out)
        # Both ranks leave together: a rank that tears its gloo group down while the other is
        # still saving or gathering can abort the other's process at exit (SIGABRT, "terminate
        # called without an active exception"). Only on success: after an error the barrier
        # would wait for a rank that is not coming.
        dist.barrier()
    finally:
        dist.destroy_process_group()


@pytest.mark.end_to_end
def test_fsdp_full_shard_on_two_cpu_processes_keeps_the_tie_and_matches_one_process(tmp_path):
    wrap_classes = set(strategy_from_yaml("fsdp").kwargs["auto_wrap_policy"]._module_classes)
    out = tmp_path / "fsdp.pt"
    mp.spawn(_fsdp_worker, args=(2, _free_port(), wrap_classes, str(out)), nprocs=2)
    saved = torch.load(out, weights_only=False)
    assert "holds only one of the two" in saved["refusal"]
    assert saved["is_tied"]  # still one Parameter after wrapping and three sharded steps
    state = saved["state_dict"]
    # Consolidated: the shared matrix is whole, under both names, and loads into one device tied.
    assert state["embedding.token.weight"].shape == (FSDP_CONFIG["vocab_size"], FSDP_CONFIG["hidden_size"])
    assert torch.equal(state["embedding.token.weight"], state["head.decoder.weight"])
    reloaded = Transformer(TransformerConfig(head="tied", **FSDP_CONFIG))
    reloaded.load_state_dict(state)
    assert reloaded.is_tied

    torch.manual_seed(0)
    single = Transformer(TransformerConfig(head="tied", **FSDP_CONFIG))
    _train(single, _global_batch())
    for name, value in single.state_dict().items():
        torch.testing.assert_close(state[name], value, rtol=0, atol=1e-5, msg=name)
