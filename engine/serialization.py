"""Tensors pickle and deep-copy as torch's do.

* ``pickle``: the data (copied to the host), dtype, shape, device and ``requires_grad``. The
  result is a leaf, even for a non-leaf (its history is not pickled), and ``.grad`` is not
  kept: torch's ``Tensor.__reduce_ex__`` keeps neither. ``tg.save``/``tg.load``
  (threadgrad/serialization.py) are this pickle in a file.
* ``tg.save``: tensors whose arrays share memory (a view and its base, two views of one
  array) stay sharing after ``tg.load``, as torch's storages do: threadgrad/serialization.py's
  pickler writes each host array's whole buffer once (:class:`Storage`) and each tensor as an
  offset, shape and strides into it (:func:`reduce_tensor_shared`); a small view of a large
  array therefore saves the large one, as in torch (``clone()`` first to save the view alone).
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


def _plain_dtype(dtype: str) -> numpy.dtype:
    """The dtype a file names, refused when it holds Python objects: an array of them made from
    the file's bytes would read those bytes as pointers (numpy's ``ndarray(buffer=...)`` does
    not refuse it)."""
    dt = numpy.dtype(dtype)
    if dt.hasobject:
        raise ValueError(f"a saved tensor cannot have dtype {dt!r}: threadgrad tensors hold numbers only")
    return dt


def rebuild_tensor(dtype: str, shape: tuple, data: bytes, device: str, requires_grad: bool,
                   map_location: Any = None) -> Tensor:
    """The inverse of :func:`reduce_tensor` (what unpickling calls); ``map_location`` (a device
    spec, a Device, or a callable ``(tensor, device_string) -> tensor``) moves the tensor as
    ``torch.load``'s does."""
    arr = numpy.frombuffer(data, dtype=_plain_dtype(dtype)).reshape(shape).copy()  # writable, owned
    return _place(arr, device, requires_grad, map_location)


def rebuild_storage(data: bytes) -> numpy.ndarray:
    """The inverse of :class:`Storage`: the saved buffer as a writable array of bytes, which
    every tensor of the file that shared it views (:func:`rebuild_tensor_view`)."""
    return numpy.frombuffer(data, dtype=numpy.uint8).copy()


def rebuild_tensor_view(storage: numpy.ndarray, offset: int, shape: tuple, strides: tuple, dtype: str,
                        device: str, requires_grad: bool, map_location: Any = None) -> Tensor:
    """The inverse of :func:`reduce_tensor_shared`: a view of ``storage`` (bytes: ``offset`` and
    ``strides`` count bytes). numpy's constructor refuses a view reaching outside the buffer,
    so a forged file cannot make a tensor over memory it does not own."""
    if not isinstance(storage, numpy.ndarray) or storage.dtype != numpy.uint8 or storage.ndim != 1:
        raise ValueError("a saved tensor view must refer to a saved storage")
    arr = numpy.ndarray(tuple(shape), dtype=_plain_dtype(dtype), buffer=storage, offset=offset,
                        strides=tuple(strides))
    return _place(arr, device, requires_grad, map_location)


def _place(arr: numpy.ndarray, device: str, requires_grad: bool, map_location: Any) -> Tensor:
    """The loaded host array as a tensor on its saved device, or where ``map_location`` says."""
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


class Storage:
    """One host buffer in a :func:`threadgrad.save` file, pickled once however many tensors
    view it (the pickler's memo keeps one ``Storage`` per buffer: See
    ``threadgrad/serialization.py``)."""

    __slots__ = ("root",)

    def __init__(self, root: numpy.ndarray) -> None:
        self.root = root  # C-contiguous; kept alive, so its id names it for the whole dump

    def __reduce__(self) -> tuple:
        return (rebuild_storage, (self.root.reshape(-1).view(numpy.uint8).tobytes(),))


def _root(arr: numpy.ndarray) -> numpy.ndarray:
    """The array that owns ``arr``'s memory (the end of its ``base`` chain of arrays)."""
    while isinstance(arr.base, numpy.ndarray):
        arr = arr.base
    return arr


def reduce_tensor_shared(t: Tensor, storages: dict[int, Storage]) -> tuple | None:
    """``t`` as an offset, shape and strides into the :class:`Storage` of its array's memory,
    which ``storages`` (one dump's table: id of the root array -> Storage) keeps one per buffer;
    None where the plain :func:`reduce_tensor` must do: a device array (copied to the host
    anyway), a read-only array (an ``expand``'s overlapping view, which must not come back
    writable) or memory that is not one contiguous array."""
    arr = t._data
    if not isinstance(arr, numpy.ndarray) or not arr.flags.writeable:
        return None
    root = _root(arr)
    if not root.flags.c_contiguous:
        return None
    st = storages.get(id(root))
    if st is None:
        st = storages[id(root)] = Storage(root)
    offset = arr.__array_interface__["data"][0] - root.__array_interface__["data"][0]
    return (rebuild_tensor_view, (st, offset, tuple(arr.shape), tuple(arr.strides), arr.dtype.str,
                                  str(t.device), t.requires_grad))


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
