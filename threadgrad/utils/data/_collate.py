"""``default_collate`` and ``default_convert``: how samples become a batch, as torch's
(tensors and numpy arrays stacked, numbers made tensors, dicts/tuples/lists collated per
field; a tuple gives a list, as in torch)."""
from __future__ import annotations

import collections.abc
from typing import Any

import numpy

from ... import ops
from ...engine import creation
from ...engine.tensor import Tensor

__all__ = ["default_collate", "default_convert"]

_ERR = "default_collate: batch must contain tensors, numpy arrays, numbers, dicts or lists; found {}"


def default_convert(data: Any) -> Any:
    """numpy arrays and numbers (not strings) in ``data`` as tensors; containers kept."""
    if isinstance(data, Tensor):
        return data
    if isinstance(data, numpy.ndarray):
        if data.dtype.kind in "SUO":
            return data
        return creation.tensor(data)
    if isinstance(data, numpy.generic):
        return creation.tensor(data)
    if isinstance(data, collections.abc.Mapping):
        try:
            return type(data)({k: default_convert(v) for k, v in data.items()})
        except TypeError:
            return {k: default_convert(v) for k, v in data.items()}
    if isinstance(data, tuple) and hasattr(data, "_fields"):
        return type(data)(*(default_convert(d) for d in data))
    if isinstance(data, tuple):
        return [default_convert(d) for d in data]
    if isinstance(data, collections.abc.Sequence) and not isinstance(data, (str, bytes)):
        try:
            return type(data)([default_convert(d) for d in data])  # type: ignore[call-arg]
        except TypeError:
            return [default_convert(d) for d in data]
    return data


def default_collate(batch: list) -> Any:
    """Samples into a batch: tensors stacked along a new dim 0 (numpy arrays and numpy scalars
    made tensors first), floats into a float64 tensor, ints into an int64 tensor, strings
    kept as a list, mappings and sequences collated per field."""
    elem = batch[0]
    if isinstance(elem, Tensor):
        return ops.stack(list(batch), 0)
    if isinstance(elem, numpy.ndarray) or isinstance(elem, numpy.generic):
        if elem.dtype.kind in "SUO":
            raise TypeError(_ERR.format(elem.dtype))
        return default_collate([creation.tensor(numpy.asarray(b)) for b in batch])
    if isinstance(elem, bool):
        return creation.tensor(batch)
    if isinstance(elem, float):
        return creation.tensor(batch, dtype=numpy.float64)
    if isinstance(elem, int):
        return creation.tensor(batch, dtype=numpy.int64)
    if isinstance(elem, (str, bytes)):
        return batch
    if isinstance(elem, collections.abc.Mapping):
        try:
            return type(elem)({key: default_collate([d[key] for d in batch]) for key in elem})
        except TypeError:
            return {key: default_collate([d[key] for d in batch]) for key in elem}
    if isinstance(elem, tuple) and hasattr(elem, "_fields"):
        return type(elem)(*(default_collate(samples) for samples in zip(*batch)))
    if isinstance(elem, collections.abc.Sequence):
        it = iter(batch)
        size = len(next(it))
        if not all(len(e) == size for e in it):
            raise RuntimeError("each element in list of batch should be of equal size")
        transposed = list(zip(*batch))
        if isinstance(elem, tuple):
            return [default_collate(samples) for samples in transposed]
        try:
            return type(elem)([default_collate(samples) for samples in transposed])  # type: ignore[call-arg]
        except TypeError:
            return [default_collate(samples) for samples in transposed]
    raise TypeError(_ERR.format(type(elem)))
