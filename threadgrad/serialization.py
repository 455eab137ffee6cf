"""``tg.save`` / ``tg.load``: tensors, dicts of tensors and optimizer state in a file.

The file is a pickle (tensors pickle as engine/serialization.py says: data, dtype, shape,
device, requires_grad). ``load`` reads it, by default, with ``weights_only=True`` as torch
2.6+ does: only tensors and plain containers and numbers (dicts, lists, tuples, sets,
strings, numbers, None, ``collections.OrderedDict``) may be in it, so a file from elsewhere
cannot run code; ``weights_only=False`` unpickles anything (trusted files only).

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

from .engine.serialization import rebuild_tensor

__all__ = ["save", "load"]

_SAFE = {("collections", "OrderedDict"): collections.OrderedDict,
         ("builtins", "set"): set, ("builtins", "frozenset"): frozenset, ("builtins", "complex"): complex,
         ("builtins", "slice"): slice,
         ("_codecs", "encode"): codecs.encode}  # how protocol 2 (torch's default) writes bytes


class _Unpickler(pickle.Unpickler):
    """Rebuilds tensors (on ``map_location`` when given); with ``weights_only``, refuses every
    other global, as torch's weights-only unpickler does."""

    def __init__(self, file: BinaryIO, map_location: Any, weights_only: bool) -> None:
        super().__init__(file)
        self.map_location = map_location
        self.weights_only = weights_only

    def find_class(self, module: str, name: str) -> Any:
        if (module, name) == (rebuild_tensor.__module__, rebuild_tensor.__name__):
            ml = self.map_location
            return rebuild_tensor if ml is None else (lambda *a: rebuild_tensor(*a, map_location=ml))
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


def save(obj: Any, f: str | os.PathLike | BinaryIO, pickle_protocol: int = 2) -> None:
    """Write ``obj`` (tensors, dicts of tensors, an optimizer's ``state_dict()``...) to ``f``,
    a path or a binary file object, as ``torch.save``."""
    if isinstance(f, (str, os.PathLike)):
        with open(f, "wb") as fh:
            pickle.dump(obj, fh, protocol=pickle_protocol)
    else:
        pickle.dump(obj, f, protocol=pickle_protocol)


def load(f: str | os.PathLike | BinaryIO, map_location: Any = None, *, weights_only: bool = True) -> Any:
    """Read what :func:`save` wrote. ``map_location``: a device (``"cpu"``), a dict from saved
    device strings to devices, or a callable ``(tensor, saved_device) -> tensor``, as
    ``torch.load``'s. ``weights_only`` (default True): see the module's docstring."""
    if isinstance(f, (str, os.PathLike)):
        with open(f, "rb") as fh:
            return _Unpickler(io.BytesIO(fh.read()), map_location, weights_only).load()
    return _Unpickler(f, map_location, weights_only).load()
