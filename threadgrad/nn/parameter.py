"""``tg.nn.Parameter`` and ``tg.nn.Buffer``: tensors a Module registers when they are assigned
to one of its attributes, as torch's.

A Parameter is a leaf Tensor (requiring grad by default) that shares its array and version
counter with the tensor it was made from, as torch's ``Parameter(t)`` shares ``t``'s storage.

>>> import threadgrad as tg
>>> p = tg.nn.Parameter(tg.zeros(2))
>>> p.requires_grad, p.is_leaf, isinstance(p, tg.Tensor)
(True, True, True)
>>> print(p)
Parameter containing:
tensor([0., 0.], dtype=float32, requires_grad=True)
"""
from __future__ import annotations

from typing import Any

from ..engine.serialization import deepcopy_tensor, reduce_tensor
from ..engine.tensor import Tensor

__all__ = ["Parameter", "Buffer"]


def _share(dst: Tensor, src: Tensor) -> None:
    """``dst`` takes ``src``'s array, device and version counter (an alias, as ``detach``)."""
    alias = src.detach()
    for slot in Tensor.__slots__:
        if slot != "__weakref__":
            object.__setattr__(dst, slot, object.__getattribute__(alias, slot))


class Parameter(Tensor):
    """``torch.nn.Parameter(data=None, requires_grad=True)``: a leaf tensor sharing ``data``'s
    array, that a Module registers as a parameter when assigned to one of its attributes.
    ``data`` None gives an empty float32 tensor, as torch's."""

    def __new__(cls, data: Any = None, requires_grad: bool = True) -> "Parameter":
        from ..engine import creation

        if data is None:
            data = creation.empty(0)
        elif not isinstance(data, Tensor):
            data = creation.tensor(data)
        p = object.__new__(cls)
        _share(p, data)
        if requires_grad:
            p.requires_grad = True  # (an integer tensor raises torch's RuntimeError here)
        return p

    def __init__(self, data: Any = None, requires_grad: bool = True) -> None:  # noqa: D107 - all done in __new__
        pass

    def __repr__(self) -> str:
        return "Parameter containing:\n" + super().__repr__()

    def __reduce_ex__(self, protocol: int) -> tuple:
        return self._wrap_reduced(reduce_tensor(self, protocol))

    def _wrap_reduced(self, reduced: tuple) -> tuple:
        """The pickled form of this Parameter around ``reduced``, its tensor's (``tg.save``
        passes its storage-sharing form, threadgrad/serialization.py)."""
        return (_rebuild_parameter, (reduced, self.requires_grad))

    def __deepcopy__(self, memo: dict) -> "Parameter":
        done = memo.get(id(self))
        if done is not None:
            return done
        plain = deepcopy_tensor(Tensor.detach(self), {})
        new = Parameter(plain, self.requires_grad)
        if self.grad is not None:
            new.grad = deepcopy_tensor(self.grad, memo)
        memo[id(self)] = new
        return new


def _rebuild_parameter(reduced: tuple, requires_grad: bool) -> Parameter:
    rebuild, args = reduced
    return Parameter(rebuild(*args), requires_grad)


class Buffer(Tensor):
    """``torch.nn.Buffer(data, *, persistent=True)``: a marker a Module registers as a buffer
    when assigned to one of its attributes; the module stores ``data`` itself (a plain Tensor)."""

    def __new__(cls, data: Any = None, *, persistent: bool = True) -> "Buffer":
        from ..engine import creation

        if data is None:
            data = creation.empty(0)
        elif not isinstance(data, Tensor):
            data = creation.tensor(data)
        b = object.__new__(cls)
        _share(b, data)
        b.persistent = persistent
        b.source = data
        return b

    def __init__(self, data: Any = None, *, persistent: bool = True) -> None:  # noqa: D107
        pass
