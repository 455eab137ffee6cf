"""Tensors pickle and deep-copy as torch's do.

* ``pickle``: the data (copied to the host), dtype, shape, device and ``requires_grad``. The
  result is a leaf, even for a non-leaf (its history is not pickled), and ``.grad`` is not
  kept: torch's ``Tensor.__reduce_ex__`` keeps neither. ``tg.save``/``tg.load``
  (threadgrad/serialization.py) are this pickle in a file.
* ``copy.deepcopy``: leaves only (torch's RuntimeError otherwise); a new array, the same
  ``requires_grad``, and a deep copy of ``.grad``; the memo keeps a tensor that appears twice
  one tensor.

The protocol is bound onto Tensor here (as ops/_methods.py binds the operators), so that
tensor.py keeps to the autograd bookkeeping.

>>> import copy, pickle
>>> from threadgrad import engine
>>> w = engine.tensor([1.0, 2.0], requires_grad=True)
>>> (w * w).sum().backward()
>>> w2 = pickle.loads(pickle.dumps(w))
>>> w2.tolist(), w2.requires_grad, w2.is_leaf, w2.grad is None
([1.0, 2.0], True, True, True)
>>> copy.deepcopy(w).grad.tolist()
[2.0, 4.0]
"""
from __future__ import annotations

from typing import Any

import numpy

from .. import devices
from .tensor import Tensor, _wrap


def rebuild_tensor(dtype: str, shape: tuple, data: bytes, device: str, requires_grad: bool,
                   map_location: Any = None) -> Tensor:
    """The inverse of :func:`reduce_tensor` (what unpickling calls); ``map_location`` (a device
    spec, a Device, or a callable ``(tensor, device_string) -> tensor``) moves the tensor as
    ``torch.load``'s does."""
    arr = numpy.frombuffer(data, dtype=numpy.dtype(dtype)).reshape(shape).copy()  # writable, owned
    target = device
    if map_location is not None and not callable(map_location):
        if isinstance(map_location, dict):
            target = map_location.get(device, device)
        else:
            target = map_location
    dev = devices.get(target)
    t = _wrap(arr if dev.xp is numpy else dev.asarray(arr), dev)
    if requires_grad:
        t.requires_grad = True
    if callable(map_location):
        t = map_location(t, device)
    return t


def reduce_tensor(t: Tensor, protocol: int = 2) -> tuple:
    """``Tensor.__reduce_ex__``: data, dtype, shape, device and requires_grad; no history, no grad."""
    host = numpy.asarray(t.device.to_host(t._data), order="C")  # (ascontiguousarray would make a 0-d array 1-d)
    return (rebuild_tensor, (host.dtype.str, tuple(host.shape), host.tobytes(), str(t.device), t.requires_grad))


def deepcopy_tensor(t: Tensor, memo: dict) -> Tensor:
    """``Tensor.__deepcopy__``, as torch's: leaves only; data, requires_grad and grad copied."""
    if not t.is_leaf:
        raise RuntimeError("Only Tensors created explicitly by the user (graph leaves) support the deepcopy "
                           "protocol at the moment.  If you were attempting to deepcopy a module, this may be "
                           "because of a torch.nn.utils.weight_norm usage, see "
                           "https://github.com/pytorch/pytorch/pull/103001")
    done = memo.get(id(t))
    if done is not None:
        return done
    new = _wrap(t._data.copy(), t.device)
    if t.requires_grad:
        new.requires_grad = True
    if t._grad is not None:
        new.grad = deepcopy_tensor(t._grad, memo)  # (a plain copy: nothing here records a graph)
    memo[id(t)] = new
    return new


Tensor.__reduce_ex__ = reduce_tensor  # type: ignore[method-assign]
Tensor.__deepcopy__ = deepcopy_tensor  # type: ignore[attr-defined]
