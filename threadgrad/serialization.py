"""``tg.save`` / ``tg.load``: tensors, dicts of tensors and optimizer state in a file.

The file is a pickle (tensors pickle as engine/serialization.py says: data, dtype, shape,
device, requires_grad). ``load`` reads it, by default, with ``weights_only=True`` as torch
2.6+ does: only tensors and plain containers and numbers (dicts, lists, tuples, sets,
strings, numbers, None, ``collections.OrderedDict``) may be in it, so a file from elsewhere
cannot run code; ``weights_only=False`` unpickles anything (trusted files only).

``save`` writes with a current pickle protocol (``DEFAULT_PROTOCOL``), and ``load`` reads every
protocol, 2 included: protocol 2 names builtins as Python 2 did (``__builtin__.set``), and
writes bytes as calls (``_codecs.encode(text, "latin1")``, ``__builtin__.bytes()`` for empty
ones), which the allowlist maps to the same few safe callables. Tensors that share memory in
one ``save`` share it after ``load``, as torch's (engine/serialization.py).

>>> import os, tempfile
>>> import threadgrad as tg
>>> path = os.path.join(tempfile.mkdtemp(), "w.pt")
>>> tg.save({"w": tg.ones(2, requires_grad=True), "step": 3}, path)
>>> state = tg.load(path)
>>> state["w"].tolist(), state["w"].requires_grad, state["step"]
([1.0, 1.0], True, 3)
"""
from __future__ import annotations

import codecs
import collections
import io
import os
import pickle
from typing import Any, BinaryIO

from .engine.serialization import (Storage, rebuild_storage, rebuild_tensor, rebuild_tensor_view,
                                   reduce_tensor_shared)
from .engine.tensor import Tensor

__all__ = ["save", "load"]

DEFAULT_PROTOCOL = pickle.DEFAULT_PROTOCOL  # (torch's is 2, whose bytes and builtins need the calls below)


def _latin1(text: str, encoding: str) -> bytes:
    """``_codecs.encode`` as protocol 2 calls it for bytes, and only so: other codecs
    (``zlib_codec``, ...) are no business of a weights file."""
    if encoding != "latin1" or not isinstance(text, str):
        raise pickle.UnpicklingError(f"Weights only load failed: _codecs.encode may only decode bytes "
                                     f"(latin1), not {encoding!r}")
    return codecs.encode(text, encoding)


def _empty_bytes(*args: Any) -> bytes:
    """``bytes()`` as protocol 2 calls it for ``b""``; ``bytes(n)`` would allocate n bytes."""
    if args:
        raise pickle.UnpicklingError("Weights only load failed: bytes() may only be called without arguments")
    return b""


_SAFE = {("collections", "OrderedDict"): collections.OrderedDict,
         ("builtins", "set"): set, ("builtins", "frozenset"): frozenset, ("builtins", "complex"): complex,
         ("builtins", "slice"): slice, ("builtins", "bytes"): _empty_bytes,
         ("_codecs", "encode"): _latin1}
_REBUILD = {(f.__module__, f.__name__): f for f in (rebuild_tensor, rebuild_tensor_view)}
_STORAGE = (rebuild_storage.__module__, rebuild_storage.__name__)


class _Pickler(pickle.Pickler):
    """Writes each tensor of a host device as a view into its buffer's :class:`Storage`, one per
    buffer for the whole dump, so that tensors sharing memory load sharing it."""

    def __init__(self, file: BinaryIO, protocol: int) -> None:
        super().__init__(file, protocol=protocol)
        self.storages: dict[int, Storage] = {}

    def reducer_override(self, obj: Any) -> Any:
        if isinstance(obj, Tensor):
            shared = reduce_tensor_shared(obj, self.storages)
            if shared is not None:
                # a subclass that pickles itself around its tensor (nn.Parameter) keeps its class
                wrap = getattr(obj, "_wrap_reduced", None)
                return shared if wrap is None else wrap(shared)
        return NotImplemented


class _Unpickler(pickle.Unpickler):
    """Rebuilds tensors (on ``map_location`` when given); with ``weights_only``, refuses every
    other global, as torch's weights-only unpickler does."""

    def __init__(self, file: BinaryIO, map_location: Any, weights_only: bool) -> None:
        super().__init__(file)
        self.map_location = map_location
        self.weights_only = weights_only

    def find_class(self, module: str, name: str) -> Any:
        if module == "__builtin__":  # protocol 2's name (what pickle's own fix_imports maps)
            module = "builtins"
        rebuild = _REBUILD.get((module, name))
        if rebuild is not None:
            ml = self.map_location
            return rebuild if ml is None else (lambda *a: rebuild(*a, map_location=ml))
        if (module, name) == _STORAGE:
            return rebuild_storage
        if (module, name) in _SAFE:
            return _SAFE[(module, name)]
        if (module, name) == ("threadgrad.nn.parameter", "_rebuild_parameter"):  # nn.Parameter, as torch allows
            from .nn.parameter import _rebuild_parameter

            return _rebuild_parameter
        if self.weights_only:
            raise pickle.UnpicklingError(
                f"Weights only load failed. Unsupported global: GLOBAL {module}.{name}. threadgrad.load with "
                "weights_only=True reads tensors, dicts, lists, tuples, numbers and strings only; pass "
                "weights_only=False if (and only if) you trust the file's source.")
        return super().find_class(module, name)


def save(obj: Any, f: str | os.PathLike | BinaryIO, pickle_protocol: int = DEFAULT_PROTOCOL) -> None:
    """Write ``obj`` (tensors, dicts of tensors, an optimizer's ``state_dict()``...) to ``f``,
    a path or a binary file object, as ``torch.save``."""
    if isinstance(f, (str, os.PathLike)):
        with open(f, "wb") as fh:
            _Pickler(fh, pickle_protocol).dump(obj)
    else:
        _Pickler(f, pickle_protocol).dump(obj)


def load(f: str | os.PathLike | BinaryIO, map_location: Any = None, *, weights_only: bool = True) -> Any:
    """Read what :func:`save` wrote. ``map_location``: a device (``"cpu"``), a dict from saved
    device strings to devices, or a callable ``(tensor, saved_device) -> tensor``, as
    ``torch.load``'s. ``weights_only`` (default True): see the module's docstring."""
    if isinstance(f, (str, os.PathLike)):
        with open(f, "rb") as fh:
            return _Unpickler(io.BytesIO(fh.read()), map_location, weights_only).load()
    return _Unpickler(f, map_location, weights_only).load()
