"""Small torch functions of the front door that the engine does not need: ``tg.device``,
``tg.from_numpy``, ``tg.as_tensor``, ``tg.is_tensor`` ...

>>> import threadgrad as tg
>>> str(tg.device("virtual", 1)), tg.is_tensor(tg.ones(1)), tg.numel(tg.ones(2, 3))
('virtual:1', True, 6)
"""
from __future__ import annotations

from typing import Any

import numpy

from . import devices
from .devices import Device
from .engine import creation
from .engine.tensor import Tensor, _wrap, to_device, to_dtype


def device(type: Any, index: int | None = None) -> Device:  # noqa: A002 - torch's names
    """The Device for ``"cpu"``, ``"cuda"``, ``"cuda:1"``, ``("cuda", 1)``, ``"virtual:N"`` or a
    Device, as ``torch.device(...)`` (devices are interned: ``==`` and ``is`` agree)."""
    if isinstance(type, Device):
        if index is not None:
            raise TypeError("device(): an index cannot be given with a Device")
        return type
    if index is not None:
        if ":" in type:
            raise ValueError(f"device(): type (string) must not include an index because index was passed "
                             f"explicitly: {type}")
        type = f"{type}:{index}"
    return devices.get(type)


def from_numpy(array: numpy.ndarray) -> Tensor:
    """A cpu tensor sharing ``array``'s memory (writes show through both ways), as torch's."""
    if not isinstance(array, numpy.ndarray):
        raise TypeError(f"expected np.ndarray (got {type(array).__name__})")
    return _wrap(array, devices.cpu)


def as_tensor(data: Any, dtype: Any = None, device: Any = None) -> Tensor:
    """``data`` as a tensor, sharing memory where it can (a tensor already of that dtype and
    device comes back as itself; a numpy array of that dtype on cpu is shared), as torch's."""
    dev = None if device is None else to_device(device)
    dt = to_dtype(dtype)
    if isinstance(data, Tensor):
        from .ops import to

        return to(data, dev, dt)
    if isinstance(data, numpy.ndarray) and (dev is None or dev is devices.cpu) and (dt is None or dt == data.dtype):
        return _wrap(data, devices.cpu)
    return creation.tensor(data, dtype=dt, device=dev)


def is_tensor(obj: Any) -> bool:
    return isinstance(obj, Tensor)


def is_floating_point(t: Tensor) -> bool:
    return t.dtype.kind == "f"


def numel(t: Tensor) -> int:
    return t.numel()


def rand_like(t: Tensor, dtype: Any = None, device: Any = None, requires_grad: bool = False) -> Tensor:
    """Uniform [0, 1) numbers with ``t``'s shape, and its dtype and device unless given."""
    return creation.rand(*t.shape, dtype=dtype or t.dtype, device=device or t.device, requires_grad=requires_grad)


def randn_like(t: Tensor, dtype: Any = None, device: Any = None, requires_grad: bool = False) -> Tensor:
    """Standard normal numbers with ``t``'s shape, and its dtype and device unless given."""
    return creation.randn(*t.shape, dtype=dtype or t.dtype, device=device or t.device, requires_grad=requires_grad)
