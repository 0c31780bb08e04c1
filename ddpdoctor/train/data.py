"""Synthetic token data and the real data-parallel input pipeline (DistributedSampler).

Sample ``i`` is an arithmetic token sequence (start and stride derived from ``i``): a model
learns it within a few steps, so "the loss goes down" is a meaningful check, and every
rank can regenerate any sample from its index alone (no files, no download).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import torch
from torch.utils.data import DataLoader, Dataset, DistributedSampler, RandomSampler, Sampler


class SyntheticTokens(Dataset):
    def __init__(self, size: int, seq: int, vocab: int, seed: int = 0) -> None:
        self.size, self.seq, self.vocab, self.seed = size, seq, vocab, seed
        # Set by the trainer at each epoch; copied into DataLoader workers with the dataset.
        self.epoch = 0
        # (epoch, index) -> None; lets an injection act inside __getitem__ (stall, kill).
        self.fault: Callable[[int, int], None] | None = None

    def __len__(self) -> int:
        return self.size

    def __getitem__(self, idx: int) -> tuple[torch.Tensor, torch.Tensor, int]:
        if self.fault is not None:
            self.fault(self.epoch, idx)
        h = (idx * 2654435761 + self.seed * 97) & 0xFFFFFFFF
        start = h % self.vocab
        stride = 1 + (h >> 16) % 5
        tokens = (start + stride * torch.arange(self.seq + 1)) % self.vocab
        return tokens[:-1], tokens[1:], idx


def build_loader(dataset: SyntheticTokens, batch_size: int, dp_rank: int, dp_world: int,
                 seed: int, use_sampler: bool = True, num_workers: int = 0) -> DataLoader:
    """A DataLoader over this rank's share of the data.

    Without ``use_sampler`` it is the classic mistake: a plain shuffling loader whose seed is
    the same on every rank, so every rank trains on the same samples.
    """
    sampler: Sampler[int]
    if use_sampler:
        sampler = DistributedSampler(dataset, num_replicas=dp_world, rank=dp_rank,
                                     shuffle=True, seed=seed, drop_last=True)
    else:
        sampler = RandomSampler(dataset, generator=torch.Generator().manual_seed(seed))
    return DataLoader(dataset, batch_size=batch_size, sampler=sampler, drop_last=True,
                      num_workers=num_workers)


class Batches:
    """Endless (step -> batch) iteration over epochs, resumable at any step.

    ``set_epoch`` is called at each epoch start unless the caller turns it off (the
    SAMPLER_EPOCH_NOT_SET fault): then every epoch repeats the first one's order.
    """

    def __init__(self, loader: DataLoader, call_set_epoch: bool = True) -> None:
        self.loader = loader
        self.call_set_epoch = call_set_epoch
        self.steps_per_epoch = len(loader)
        if self.steps_per_epoch == 0:
            raise ValueError("the dataset is smaller than one global batch: raise "
                             "--dataset-size or lower --batch-size")
        self.epoch = -1
        self._it: Iterator[tuple[torch.Tensor, torch.Tensor, torch.Tensor]] | None = None

    def _start_epoch(self, epoch: int) -> Iterator[tuple[torch.Tensor, torch.Tensor,
                                                         torch.Tensor]]:
        self.epoch = epoch
        dataset = self.loader.dataset
        assert isinstance(dataset, SyntheticTokens)  # what build_loader loads
        dataset.epoch = epoch
        sampler = self.loader.sampler
        if self.call_set_epoch and isinstance(sampler, DistributedSampler):
            sampler.set_epoch(epoch)
        self._it = iter(self.loader)
        return self._it

    def skip_to(self, done_steps: int) -> None:
        """Position so the next batch is the one of step ``done_steps + 1`` (for resume)."""
        epoch, into = divmod(done_steps, self.steps_per_epoch)
        it = self._start_epoch(epoch)
        for _ in range(into):
            next(it)

    def next(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        it = self._it if self._it is not None else self._start_epoch(0)
        try:
            return next(it)
        except StopIteration:
            return next(self._start_epoch(self.epoch + 1))


def sample_indices(loader: DataLoader, step: int, call_set_epoch: bool = True) -> list[int]:
    """The dataset indices this rank's loader yields at ``step`` (1-based), without touching
    the loader's own sampler state (a fresh sampler with the same settings is replayed)."""
    spe = len(loader)
    epoch, j = divmod(step - 1, spe)
    s = loader.sampler
    if isinstance(s, DistributedSampler):
        shards: DistributedSampler[int] = DistributedSampler(
            loader.dataset, num_replicas=s.num_replicas, rank=s.rank, shuffle=s.shuffle,
            seed=s.seed, drop_last=s.drop_last)
        shards.set_epoch(epoch if call_set_epoch else 0)
        order = list(shards)
    else:
        dataset = loader.dataset
        assert isinstance(dataset, SyntheticTokens)  # what build_loader loads
        replay = RandomSampler(dataset, generator=torch.Generator().manual_seed(dataset.seed))
        for _ in range(epoch + 1):
            order = list(replay)
    b = loader.batch_size
    assert b is not None  # build_loader batches
    return order[j * b:(j + 1) * b]
