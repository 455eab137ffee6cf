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


def randint(*args: Any, size: Any = None, dtype: Any = None, device: Any = None,
            requires_grad: bool = False) -> Tensor:
    """Integers drawn uniformly from ``[low, high)``: ``randint(high, size)`` or
    ``randint(low, high, size)``, as torch's (int64 unless ``dtype``), from the generator
    ``manual_seed`` seeds."""
    if size is not None:
        args = args + (size,)
    if len(args) == 2:
        low, high, shape = 0, args[0], args[1]
    elif len(args) == 3:
        low, high, shape = args
    else:
        raise TypeError("randint() takes (high, size) or (low, high, size)")
    if high <= low:
        raise RuntimeError(f"random_ expects 'from' to be less than 'to', but got from={low} >= to={high}")
    shape = (shape,) if isinstance(shape, int) else tuple(shape)
    u = creation.random_array("uniform", shape, "float64")
    data = numpy.minimum(numpy.floor(low + u * (high - low)), high - 1).astype(to_dtype(dtype) or numpy.int64)
    dev = to_device(device)
    return creation.tensor(data, device=dev, requires_grad=requires_grad)


def randperm(n: int, *, dtype: Any = None, device: Any = None, requires_grad: bool = False) -> Tensor:
    """A random permutation of ``0 .. n-1`` (int64 unless ``dtype``), as torch's, from the
    generator ``manual_seed`` seeds.

    >>> import threadgrad as tg
    >>> sorted(tg.randperm(5).tolist())
    [0, 1, 2, 3, 4]
    """
    perm = numpy.argsort(creation.random_array("uniform", (int(n),), "float64"), kind="stable")
    return creation.tensor(perm.astype(to_dtype(dtype) or numpy.int64), device=to_device(device),
                           requires_grad=requires_grad)
