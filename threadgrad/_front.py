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
from .engine.tensor import Tensor, _wrap, add_methods, to_device, to_dtype


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


# --- ops a torch program reaches for that compose from existing ones ---------------------------
# Found porting the programs of examples/torch_programs (issue 32, item 7). Each is a
# composition of registered ops (so gradients, double backward and devices come from them) or,
# for the non-differentiable ones, a creation function; a fused operator may replace one later.

def linspace(start: float, end: float, steps: int, *, dtype: Any = None, device: Any = None,
             requires_grad: bool = False) -> Tensor:
    """``steps`` evenly spaced numbers from ``start`` to ``end`` inclusive, as ``torch.linspace``
    (float32 unless ``dtype``).

    >>> import threadgrad as tg
    >>> tg.linspace(0, 1, 5).tolist()
    [0.0, 0.25, 0.5, 0.75, 1.0]
    """
    dt = numpy.dtype(to_dtype(dtype) or numpy.float32)
    steps = int(steps)
    if steps < 0:
        raise RuntimeError(f"linspace(): number of steps must be non-negative, got {steps}")
    # torch's kernel, to the bit: the step in the dtype's own arithmetic (double for integer
    # dtypes), the first half counted up from start and the rest down from end, each value one
    # fused multiply-add (emulated: the product is exact in the wider type, then rounded once).
    work = numpy.float64 if dt.kind in "iub" else dt.type
    wide = numpy.longdouble if work is numpy.float64 else numpy.float64
    if dt.kind in "iub":  # torch converts the ends to the integer dtype first
        start, end = dt.type(start), dt.type(end)
    first, last = work(start), work(end)
    step = wide((last - first) / work(max(steps - 1, 1)))
    i = numpy.arange(steps)
    data = numpy.where(i < max(steps // 2, 1), wide(first) + step * i.astype(wide),
                       wide(last) - step * (steps - 1 - i).astype(wide)).astype(work)
    return creation.tensor(data.astype(dt), device=to_device(device), requires_grad=requires_grad)


def mm(input: Tensor, mat2: Tensor) -> Tensor:  # noqa: A002 - torch's names
    """The matrix product of two 2-d tensors, as ``torch.mm`` (``matmul`` restricted to 2-d)."""
    from .ops import matmul

    if input.ndim != 2 or mat2.ndim != 2:
        raise RuntimeError(f"mm(): self must be a matrix and mat2 must be a matrix, got {input.ndim}-d "
                           f"{tuple(input.shape)} and {mat2.ndim}-d {tuple(mat2.shape)}")
    return matmul(input, mat2)


def _band_mask(x: Tensor, diagonal: int, lower: bool) -> Tensor:
    if x.ndim < 2:
        raise RuntimeError(f"{'tril' if lower else 'triu'}: input tensor must have at least 2 dimensions, "
                           f"got {x.ndim}-d {tuple(x.shape)}")
    rows, cols = x.shape[-2], x.shape[-1]
    keep = numpy.arange(cols)[None, :] - numpy.arange(rows)[:, None]
    keep = keep <= diagonal if lower else keep >= diagonal
    return creation.tensor(keep, device=x.device)


def tril(input: Tensor, diagonal: int = 0) -> Tensor:  # noqa: A002
    """``input`` with the elements above the ``diagonal``-th diagonal of its last two dims
    zeroed, as ``torch.tril`` (a ``where`` over a band mask, differentiable).

    >>> import threadgrad as tg
    >>> tg.tril(tg.ones(3, 3)).tolist()
    [[1.0, 0.0, 0.0], [1.0, 1.0, 0.0], [1.0, 1.0, 1.0]]
    """
    from .ops import where

    return where(_band_mask(input, diagonal, True), input, creation.zeros((), dtype=input.dtype, device=input.device))


def triu(input: Tensor, diagonal: int = 0) -> Tensor:  # noqa: A002
    """``input`` with the elements below the ``diagonal``-th diagonal zeroed, as ``torch.triu``."""
    from .ops import where

    return where(_band_mask(input, diagonal, False), input, creation.zeros((), dtype=input.dtype, device=input.device))


def multinomial(input: Tensor, num_samples: int, replacement: bool = False, *, generator: Any = None) -> Tensor:  # noqa: A002
    """Indices drawn from the rows of ``input`` (non-negative weights, 1-d or 2-d), as
    ``torch.multinomial`` (int64, from ``generator`` or the one ``manual_seed`` seeds). Without
    ``replacement`` an index is drawn at most once per row. Not the numbers torch draws.

    >>> import threadgrad as tg
    >>> tg.multinomial(tg.tensor([0.0, 1.0, 0.0]), 1).tolist()
    [1]
    """
    probs = numpy.asarray(input.detach().cpu().numpy(), dtype=numpy.float64)
    rows = probs.reshape(-1, probs.shape[-1]) if probs.ndim else probs.reshape(1, 1)
    if probs.ndim not in (1, 2) or (rows < 0).any() or not numpy.isfinite(rows).all():
        raise RuntimeError("multinomial(): prob_dist must be a 1 or 2 dim tensor of finite, non-negative weights, "
                           f"got shape {tuple(input.shape)}")
    if not replacement and num_samples > rows.shape[1]:
        raise RuntimeError("multinomial(): cannot sample n_sample > prob_dist.size(-1) samples without replacement")
    out = numpy.empty((rows.shape[0], int(num_samples)), dtype=numpy.int64)
    for r, row in enumerate(rows):
        p = row.copy()
        for s in range(int(num_samples)):
            if p.sum() <= 0:
                raise RuntimeError("multinomial(): invalid multinomial distribution (sum of probabilities <= 0)")
            u = (generator._draw("uniform", (1,)) if generator is not None
                 else creation.random_array("uniform", (1,), "float64"))[0]
            k = min(int(numpy.searchsorted(numpy.cumsum(p / p.sum()), u, side="right")), p.shape[0] - 1)
            while p[k] == 0:  # u landed on a zero-width bin's edge: take the next one with weight
                k = (k + 1) % p.shape[0]
            out[r, s] = k
            if not replacement:
                p[k] = 0.0
    return creation.tensor(out.reshape(probs.shape[:-1] + (int(num_samples),)), device=input.device)


def contiguous(input: Tensor) -> Tensor:  # noqa: A002
    """``input`` itself: threadgrad's reshape copies where a view cannot be made, so a tensor
    is always usable where torch wants a contiguous one (``x.transpose(1, 2).contiguous().view(...)``)."""
    return input


def set_default_device(device: Any) -> None:
    """``torch.set_default_device``, for the one default threadgrad has: ``"cpu"`` (or None)
    is accepted and changes nothing; any other device raises NotImplementedError, since
    creation functions always default to cpu here (the tutorials call it with "cpu" when no
    accelerator is present)."""
    if device is not None and to_device(device) is not devices.cpu:
        raise NotImplementedError(f"set_default_device({device!r}): threadgrad's creation functions default to cpu "
                                  f"only; pass device= to each instead")


def _format(self: Tensor, spec: str) -> str:
    """``format(t, ".2f")``: a 0-d tensor formats as its number, as torch's ``Tensor.__format__``."""
    if self.ndim == 0:
        return format(self.item(), spec)
    if spec:
        raise TypeError("unsupported format string passed to Tensor.__format__")
    return str(self)


# topk is an op of the registry now (ops/order.py: TopkBackward0, torch's NaN order); the name
# stays here so that the front door's imports and method table read as before
from .ops.order import topk  # noqa: E402


def eq(input: Tensor, other: Any) -> Tensor:  # noqa: A002
    """``input == other`` elementwise (a bool tensor), as ``torch.eq``; also ``ne``, ``lt``, ``le``,
    ``gt``, ``ge``."""
    return input == other


def ne(input: Tensor, other: Any) -> Tensor:  # noqa: A002
    return input != other


def lt(input: Tensor, other: Any) -> Tensor:  # noqa: A002
    return input < other


def le(input: Tensor, other: Any) -> Tensor:  # noqa: A002
    return input <= other


def gt(input: Tensor, other: Any) -> Tensor:  # noqa: A002
    return input > other


def ge(input: Tensor, other: Any) -> Tensor:  # noqa: A002
    return input >= other


# --- Tensor methods that are existing ops under torch's names and signatures -------------

def _dim(t: Tensor, dim: int) -> int:
    n = max(t.ndim, 1)
    if not -n <= dim < n:
        raise IndexError(f"Dimension out of range (expected to be in range of [{-n}, {n - 1}], but got {dim})")
    return dim % n


def chunk(input: Tensor, chunks: int, dim: int = 0) -> tuple:  # noqa: A002
    """``chunks`` pieces of ``input`` along ``dim`` (views), each ``ceil(size / chunks)`` long but
    the last, so possibly fewer than ``chunks``, as ``torch.chunk``."""
    from .ops import split

    if not isinstance(chunks, int) or chunks <= 0:
        raise RuntimeError(f"chunk expects `chunks` to be greater than 0, got: {chunks}")
    size = input.shape[_dim(input, dim)]
    return tuple(split(input, max(1, -(-size // chunks)), dim))


def unbind(input: Tensor, dim: int = 0) -> tuple:  # noqa: A002
    """The slices of ``input`` along ``dim``, that dim removed, as ``torch.unbind``."""
    from .ops import getitem

    d = _dim(input, dim)
    return tuple(getitem(input, (slice(None),) * d + (i,)) for i in range(input.shape[d]))


def narrow(input: Tensor, dim: int, start: int, length: int) -> Tensor:  # noqa: A002
    """``input``'s ``length`` elements from ``start`` along ``dim`` (a view), as ``torch.narrow``."""
    from .ops import getitem

    d = _dim(input, dim)
    size = input.shape[d]
    if start < 0:
        start += size
    if not 0 <= start <= size or length < 0 or start + length > size:
        raise IndexError(f"start ({start}) + length ({length}) exceeds dimension size ({size}).")
    return getitem(input, (slice(None),) * d + (slice(start, start + length),))


def index_select(input: Tensor, dim: int, index: Tensor) -> Tensor:  # noqa: A002
    """The entries of ``input`` along ``dim`` at the 1-D integer ``index``, as ``torch.index_select``."""
    from .ops import getitem

    if not isinstance(index, Tensor) or index.ndim > 1 or index.dtype.kind not in "iu":
        raise IndexError("index_select(): Index is supposed to be a vector of integers")
    return getitem(input, (slice(None),) * _dim(input, dim) + (index,))


def _repeat(self: Tensor, *sizes: Any) -> Tensor:
    """``self`` tiled ``sizes`` times along each dim (leading new dims too), as ``Tensor.repeat``:
    an expand over interleaved new dims, then a reshape (one copy)."""
    from .ops import expand, reshape

    if len(sizes) == 1 and not isinstance(sizes[0], int):
        sizes = tuple(sizes[0])
    if len(sizes) < self.ndim:
        raise RuntimeError("Number of dimensions of repeat dims can not be smaller than number of dimensions of "
                           "tensor")
    shape = (1,) * (len(sizes) - self.ndim) + tuple(self.shape)
    x = reshape(self, tuple(d for n in shape for d in (1, n)))
    x = expand(x, tuple(d for r, n in zip(sizes, shape) for d in (r, n)))
    return reshape(x, tuple(r * n for r, n in zip(sizes, shape)))


def _new(fill: Any) -> Any:
    def new(self: Tensor, *size: Any, dtype: Any = None, device: Any = None, requires_grad: bool = False,
            **_: Any) -> Tensor:
        if len(size) == 1 and not isinstance(size[0], int):
            size = tuple(size[0])
        t = creation.full(size, 0 if fill is None else fill, dtype=dtype if dtype is not None else self.dtype,
                          device=device if device is not None else self.device)
        return t.requires_grad_() if requires_grad else t
    return new


def _new_full(self: Tensor, size: Any, fill_value: Any, *, dtype: Any = None, device: Any = None,
              requires_grad: bool = False) -> Tensor:
    t = creation.full(tuple(size), fill_value, dtype=dtype if dtype is not None else self.dtype,
                      device=device if device is not None else self.device)
    return t.requires_grad_() if requires_grad else t


def _new_tensor(self: Tensor, data: Any, *, dtype: Any = None, device: Any = None,
                requires_grad: bool = False) -> Tensor:
    if isinstance(data, Tensor):
        data = data.detach().numpy()
    return creation.tensor(data, dtype=dtype if dtype is not None else self.dtype,
                           device=device if device is not None else self.device, requires_grad=requires_grad)


def _fill_random(self: Tensor, kind: str, scale: float, shift: float, generator: Any) -> Tensor:
    """Overwrite ``self`` in place with ``shift + scale * samples`` (float64 host samples from
    ``generator`` or the global one, as nn.init draws them): as torch's in-place random fills,
    refused on a leaf that requires grad while grad mode is on; recorded as a copy from a
    constant, so no gradient reaches what ``self`` held before."""
    from .engine.grad_mode import is_grad_enabled

    if self.requires_grad and self.is_leaf and is_grad_enabled():
        raise RuntimeError("a leaf Variable that requires grad is being used in an in-place operation.")
    shape = tuple(self.shape)
    host = generator._draw(kind, shape) if generator is not None else creation.random_array(kind, shape, numpy.float64)
    return self.copy_(creation.tensor(shift + scale * host, dtype=self.dtype, device=self.device))


def _uniform_(self: Tensor, a: float = 0.0, b: float = 1.0, *, generator: Any = None) -> Tensor:
    return _fill_random(self, "uniform", b - a, a, generator)


def _normal_(self: Tensor, mean: float = 0.0, std: float = 1.0, *, generator: Any = None) -> Tensor:
    return _fill_random(self, "normal", std, mean, generator)


def _bind_methods() -> None:
    """Tensor methods for the functions above (``x.mm(w)``, ``x.tril()`` ...)."""
    add_methods({"mm": mm, "tril": tril, "triu": triu, "multinomial": multinomial,
             "contiguous": lambda self, memory_format=None: contiguous(self), "__format__": _format,
             "topk": topk, "eq": eq, "ne": ne, "lt": lt, "le": le, "gt": gt, "ge": ge,
             "chunk": chunk, "unbind": unbind, "narrow": narrow, "index_select": index_select, "repeat": _repeat,
             "new_zeros": _new(None), "new_ones": _new(1), "new_empty": _new(None), "new_full": _new_full,
             "new_tensor": _new_tensor, "type_as": lambda self, other: self.to(other.dtype),
             "nelement": lambda self: self.numel(), "element_size": lambda self: int(self.dtype.itemsize),
             "is_contiguous": lambda self, memory_format=None: bool(self._data.flags.c_contiguous),
             "unflatten": lambda self, dim, sizes: _unflatten(self, dim, sizes),
             "uniform_": _uniform_, "normal_": _normal_})


def _unflatten(self: Tensor, dim: int, sizes: Any) -> Tensor:
    from .ops import reshape

    d = _dim(self, dim)
    sizes = tuple(sizes)
    if -1 in sizes:
        known = int(numpy.prod([s for s in sizes if s != -1]))
        sizes = tuple(self.shape[d] // known if s == -1 else s for s in sizes)
    if int(numpy.prod(sizes)) != self.shape[d]:
        raise RuntimeError(f"unflatten: Provided sizes {list(sizes)} don't multiply up to the size of dim {dim} "
                           f"({self.shape[d]}) in the input tensor")
    return reshape(self, tuple(self.shape[:d]) + sizes + tuple(self.shape[d + 1:]))


_bind_methods()


# --- torch's functional spellings of Tensor methods (issue 31, item 4) -----------------------

def t(input: Tensor) -> Tensor:  # noqa: A002
    """``input.t()``: a matrix's transpose (vectors and scalars as they are), as ``torch.t``."""
    return input.t()


def unflatten(input: Tensor, dim: int, sizes: Any) -> Tensor:  # noqa: A002
    """``input.unflatten(dim, sizes)``: ``dim`` split into ``sizes`` (one may be -1), as ``torch.unflatten``."""
    return _unflatten(input, dim, sizes)


def detach(input: Tensor) -> Tensor:  # noqa: A002
    """``input.detach()``, as ``torch.detach``."""
    return input.detach()


def detach_(input: Tensor) -> Tensor:  # noqa: A002
    """``input.detach_()``, as ``torch.detach_``."""
    return input.detach_()


def fill_(input: Tensor, value: Any) -> Tensor:  # noqa: A002
    """``input.fill_(value)``, as ``torch.fill_``."""
    return input.fill_(value)


def zero_(input: Tensor) -> Tensor:  # noqa: A002
    """``input.zero_()``, as ``torch.zero_``."""
    return input.zero_()
