"""Length-grouped training batches and length-sorted evaluation (tiedemb.data.sampling)."""

from __future__ import annotations

import statistics
from pathlib import Path

import pytest
import torch

from tiedemb.data import GlueData
from tiedemb.data.sampling import ResumableSampler, grouped_order


def random_lengths(count: int, seed: int = 0) -> list[int]:
    generator = torch.Generator().manual_seed(seed)
    return torch.randint(5, 120, (count,), generator=generator).tolist()


def batches_of(order: list[int], batch_size: int) -> list[list[int]]:
    return [order[start : start + batch_size] for start in range(0, len(order), batch_size)]


def padded_tokens(order: list[int], lengths: list[int], batch_size: int) -> int:
    """Tokens after padding each batch to its longest example."""
    return sum(len(batch) * max(lengths[i] for i in batch) for batch in batches_of(order, batch_size))


def sampler(lengths: list[int], batch_size: int = 8, window: int = 4, **options) -> ResumableSampler:
    return ResumableSampler(lengths, lengths=lengths, batch_size=batch_size, window=window, keyed=False, **options)


@pytest.mark.parametrize("count,batch_size,window", [(100, 8, 4), (64, 8, 3), (7, 8, 2), (101, 1, 5), (50, 16, 100)])
def test_every_example_exactly_once_per_epoch(count, batch_size, window):
    lengths = random_lengths(count)
    grouped = sampler(lengths, batch_size, window)
    for epoch in range(3):
        grouped.set_epoch(epoch)
        order = list(grouped)
        assert sorted(order) == list(range(count))
        assert len(grouped) == count


def test_batches_hold_similar_lengths_and_pad_far_less_than_uniform_ones():
    lengths, batch_size = random_lengths(960), 32
    uniform = list(ResumableSampler(lengths, seed=0, keyed=False))
    grouped = list(sampler(lengths, batch_size, window=10))
    assert padded_tokens(grouped, lengths, batch_size) < 0.75 * padded_tokens(uniform, lengths, batch_size)
    spread = lambda order: statistics.mean(  # noqa: E731
        max(lengths[i] for i in batch) - min(lengths[i] for i in batch) for batch in batches_of(order, batch_size)
    )
    assert spread(grouped) < spread(uniform) / 4


def test_one_window_over_the_whole_epoch_sorts_it_completely():
    lengths, batch_size = random_lengths(64), 8
    order = list(sampler(lengths, batch_size, window=8))
    batches = batches_of(order, batch_size)
    # every batch is a contiguous run of the sorted lengths: no batch overlaps another's range
    ranges = sorted((min(lengths[i] for i in batch), max(lengths[i] for i in batch)) for batch in batches)
    assert all(high <= next_low for (_, high), (next_low, _) in zip(ranges, ranges[1:]))
    # and the batches are not simply longest to shortest: their order is shuffled
    maxima = [max(lengths[i] for i in batch) for batch in batches]
    assert maxima != sorted(maxima, reverse=True)


def test_the_order_depends_on_seed_and_epoch_alone():
    lengths = random_lengths(200)
    first, again = sampler(lengths, seed=3), sampler(lengths, seed=3)
    assert list(first) == list(again)
    other_seed = sampler(lengths, seed=4)
    assert list(other_seed) != list(first)
    first.set_epoch(1)
    assert list(first) != list(again)
    again.set_epoch(1)
    assert list(first) == list(again)


def test_the_partial_batch_comes_last_and_random():
    lengths, batch_size = random_lengths(50), 8  # 6 full batches and 2 left over
    order = list(sampler(lengths, batch_size, window=3))
    permutation = torch.randperm(50, generator=torch.Generator().manual_seed(0)).tolist()
    assert order[48:] == permutation[48:]  # the examples that fill no batch, in permutation order


def test_resuming_mid_epoch_continues_the_same_order():
    lengths = random_lengths(120)
    whole = sampler(lengths, seed=1)
    whole.set_epoch(2)
    resumed = sampler(lengths, seed=1)
    resumed.resume_at(2, 40)
    assert list(resumed) == list(whole)[40:]


def test_keyed_indices_carry_the_epoch():
    lengths = random_lengths(30)
    keyed = ResumableSampler(lengths, lengths=lengths, batch_size=4, window=2)  # keyed by default
    keyed.set_epoch(5)
    keys = list(keyed)
    assert {epoch for epoch, _ in keys} == {5}
    assert sorted(index for _, index in keys) == list(range(30))


def test_processes_share_each_global_batch_and_see_similar_lengths():
    lengths, batch_size = random_lengths(256), 8
    shares = [list(sampler(lengths, batch_size, window=4, num_replicas=2, rank=rank)) for rank in (0, 1)]
    assert sorted(shares[0] + shares[1]) == list(range(256))
    alone = list(sampler(lengths, 2 * batch_size, window=4))  # the same order on one process, global batches
    for step, (mine, theirs) in enumerate(zip(batches_of(shares[0], batch_size), batches_of(shares[1], batch_size))):
        assert sorted(mine + theirs) == sorted(alone[step * 2 * batch_size : (step + 1) * 2 * batch_size])


def test_grouped_order_keeps_equal_lengths_in_permutation_order():
    lengths = [3, 1, 3, 1, 3, 1]
    order = grouped_order(
        [5, 0, 4, 1, 2, 3], lengths, batch_size=3, window=2, generator=torch.Generator().manual_seed(0)
    )
    assert sorted(map(tuple, batches_of(order, 3))) == [(0, 4, 2), (5, 1, 3)]


# -- GlueData ------------------------------------------------------------------------------------------
def write_pairs(path: Path, count: int) -> Path:
    """A classic MRPC file of ``count`` pairs of random lengths."""
    words = "a man is sleeping the cat sits dog person woman running".split()
    generator = torch.Generator().manual_seed(7)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", encoding="utf-8") as handle:
        handle.write("Quality\t#1 ID\t#2 ID\t#1 String\t#2 String\n")
        for index in range(count):
            first, second = (torch.randint(1, 12, (1,), generator=generator).item() for _ in range(2))
            pick = lambda n, index=index: " ".join(words[(index + k) % len(words)] for k in range(n))  # noqa: E731
            handle.write(f"{index % 2}\t{index}\t{index}\t{pick(first)}\t{pick(second)}\n")
    return path


def test_glue_data_groups_training_batches_when_asked(tmp_path, tiny_tokenizer_dir):
    write_pairs(tmp_path / "MRPC" / "train.tsv", 96)
    write_pairs(tmp_path / "MRPC" / "dev.tsv", 20)
    plain = GlueData("mrpc", str(tiny_tokenizer_dir), data_dir=str(tmp_path), batch_size=8)
    grouped = GlueData("mrpc", str(tiny_tokenizer_dir), data_dir=str(tmp_path), batch_size=8, length_grouping=12)
    for data in (plain, grouped):
        data.setup("fit")
    assert isinstance(plain.train_dataloader().sampler, ResumableSampler)
    assert plain.train_dataloader().sampler.window == 0  # off by default

    def epoch(data: GlueData) -> list[dict[str, torch.Tensor]]:
        return list(data.train_dataloader())

    grouped_batches, plain_batches = epoch(grouped), epoch(plain)
    assert sorted(torch.cat([b["idx"] for b in grouped_batches]).tolist()) == list(range(96))
    assert [b["idx"].tolist() for b in epoch(grouped)] == [b["idx"].tolist() for b in grouped_batches]
    padding = lambda batches: sum(int((b["attention_mask"] == 0).sum()) for b in batches)  # noqa: E731
    assert padding(grouped_batches) < padding(plain_batches) / 2


def test_glue_data_reads_evaluation_longest_first_when_asked(tmp_path, tiny_tokenizer_dir):
    write_pairs(tmp_path / "MRPC" / "train.tsv", 8)
    write_pairs(tmp_path / "MRPC" / "dev.tsv", 30)
    data = GlueData(
        "mrpc", str(tiny_tokenizer_dir), data_dir=str(tmp_path), eval_batch_size=8, sort_eval_by_length=True
    )
    data.setup("fit")
    batches = list(data.val_dataloader()[0])
    lengths = torch.cat([b["attention_mask"].sum(dim=1) for b in batches]).tolist()
    assert lengths == sorted(lengths, reverse=True)
    assert sorted(torch.cat([b["idx"] for b in batches]).tolist()) == list(range(30))
    plain = GlueData("mrpc", str(tiny_tokenizer_dir), data_dir=str(tmp_path), eval_batch_size=8)
    plain.setup("fit")
    assert torch.cat([b["idx"] for b in plain.val_dataloader()[0]]).tolist() == list(range(30))  # off by default
