"""Datasets, as torch.utils.data's: ``Dataset``, ``IterableDataset``, ``TensorDataset``,
``ConcatDataset``, ``Subset`` and ``random_split``.

>>> import threadgrad as tg
>>> from threadgrad.utils.data import TensorDataset, random_split
>>> ds = TensorDataset(tg.arange(10), tg.arange(10) * 2)
>>> len(ds), [t.item() for t in ds[3]]
(10, [3, 6])
>>> train, val = random_split(ds, [0.8, 0.2], generator=tg.Generator().manual_seed(0))
>>> len(train), len(val)
(8, 2)
"""
from __future__ import annotations

import bisect
import math
import warnings
from typing import Any, Generic, Iterator, Sequence, TypeVar

from ...engine.tensor import Tensor
from ._random import randperm

__all__ = ["Dataset", "IterableDataset", "TensorDataset", "ConcatDataset", "ChainDataset", "Subset", "random_split"]

T_co = TypeVar("T_co", covariant=True)


class Dataset(Generic[T_co]):
    """A map-style dataset: subclasses define ``__getitem__(index)`` (and usually ``__len__``)."""

    def __getitem__(self, index: Any) -> T_co:
        raise NotImplementedError("Subclasses of Dataset should implement __getitem__.")

    def __add__(self, other: "Dataset[T_co]") -> "ConcatDataset[T_co]":
        return ConcatDataset([self, other])


class IterableDataset(Dataset[T_co]):
    """A dataset read as a stream: subclasses define ``__iter__``."""

    def __iter__(self) -> Iterator[T_co]:
        raise NotImplementedError("Subclasses of IterableDataset should implement __iter__.")

    def __add__(self, other: Any) -> "ChainDataset":
        return ChainDataset([self, other])


class TensorDataset(Dataset):
    """``TensorDataset(*tensors)``: sample ``i`` is ``tuple(t[i] for t in tensors)``; the
    tensors must agree in their first dimension."""

    def __init__(self, *tensors: Tensor) -> None:
        if not all(tensors[0].shape[0] == t.shape[0] for t in tensors):
            raise AssertionError("Size mismatch between tensors")
        self.tensors = tensors

    def __getitem__(self, index: Any) -> tuple:
        return tuple(t[index] for t in self.tensors)

    def __len__(self) -> int:
        return self.tensors[0].shape[0]


class ConcatDataset(Dataset[T_co]):
    """Several map-style datasets one after another."""

    def __init__(self, datasets: Sequence[Dataset]) -> None:
        self.datasets = list(datasets)
        if not self.datasets:
            raise AssertionError("datasets should not be an empty iterable")
        for d in self.datasets:
            if isinstance(d, IterableDataset):
                raise AssertionError("ConcatDataset does not support IterableDataset")
        self.cumulative_sizes: list[int] = []
        total = 0
        for d in self.datasets:
            total += len(d)  # type: ignore[arg-type]
            self.cumulative_sizes.append(total)

    def __len__(self) -> int:
        return self.cumulative_sizes[-1]

    def __getitem__(self, idx: int) -> T_co:
        if idx < 0:
            if -idx > len(self):
                raise ValueError("absolute value of index should not exceed dataset length")
            idx = len(self) + idx
        which = bisect.bisect_right(self.cumulative_sizes, idx)
        sample_idx = idx if which == 0 else idx - self.cumulative_sizes[which - 1]
        return self.datasets[which][sample_idx]


class ChainDataset(IterableDataset):
    """Several iterable datasets chained."""

    def __init__(self, datasets: Sequence[IterableDataset]) -> None:
        self.datasets = datasets

    def __iter__(self) -> Iterator[Any]:
        for d in self.datasets:
            if not isinstance(d, IterableDataset):
                raise AssertionError("ChainDataset only supports IterableDataset")
            yield from d


class Subset(Dataset[T_co]):
    """The samples of ``dataset`` at ``indices``, in that order."""

    def __init__(self, dataset: Dataset[T_co], indices: Sequence[int]) -> None:
        self.dataset = dataset
        self.indices = indices

    def __getitem__(self, idx: Any) -> Any:
        if isinstance(idx, list):
            return self.dataset[[self.indices[i] for i in idx]]
        return self.dataset[self.indices[idx]]

    def __getitems__(self, indices: list[int]) -> list:
        getitems = getattr(self.dataset, "__getitems__", None)
        if callable(getitems):
            return getitems([self.indices[i] for i in indices])
        return [self.dataset[self.indices[i]] for i in indices]

    def __len__(self) -> int:
        return len(self.indices)


def random_split(dataset: Dataset, lengths: Sequence[int | float], generator: Any = None) -> list[Subset]:
    """Split ``dataset`` into non-overlapping random Subsets of the given ``lengths`` (counts
    summing to ``len(dataset)``, or fractions summing to 1, the remainder spread round-robin
    as torch's). ``generator``: a ``tg.Generator`` (default: the global generator, so
    ``tg.manual_seed`` makes it repeatable)."""
    n = len(dataset)  # type: ignore[arg-type]
    if math.isclose(sum(lengths), 1) and sum(lengths) <= 1:
        subset_lengths: list[int] = []
        for i, frac in enumerate(lengths):
            if frac < 0 or frac > 1:
                raise ValueError(f"Fraction at index {i} is not between 0 and 1")
            subset_lengths.append(int(math.floor(n * frac)))
        remainder = n - sum(subset_lengths)
        for i in range(remainder):
            subset_lengths[i % len(subset_lengths)] += 1
        lengths = subset_lengths
        for i, length in enumerate(lengths):
            if length == 0:
                warnings.warn(f"Length of split at index {i} is 0. This might result in an empty dataset.",
                              stacklevel=2)
    if sum(lengths) != n:
        raise ValueError("Sum of input lengths does not equal the length of the input dataset!")
    indices = randperm(n, generator).tolist()
    out = []
    offset = 0
    for length in lengths:
        out.append(Subset(dataset, indices[offset:offset + int(length)]))
        offset += int(length)
    return out
