"""threadgrad: a multithreaded, asynchronous autograd engine over numpy and cupy.

The one import package of the distribution. Its three parts are folders at the repository's
root, installed as subpackages (pyproject.toml's ``package-dir``):

* ``threadgrad.devices``: the device registry (cpu, ``virtual:N``, ``cuda:N``);
* ``threadgrad.engine``: tensors, the graph, the executor, the autograd API;
* ``threadgrad.ops``: every differentiable operator.

This module is where they are wired together, in the order of their dependencies
(ops -> engine -> devices): the engine core first, then ops (which binds Tensor's operators and
methods), then the layers of the engine built from ops (custom Function, checkpoint), whose
names the engine package re-exports.

>>> import threadgrad as tg
>>> from threadgrad import engine, ops
>>> x = engine.tensor([1.0, 2.0], requires_grad=True)
>>> ops.sum(ops.tanh(x) * 2).backward()
>>> [f"{v:.4f}" for v in x.grad.tolist()]
['0.8399', '0.1413']

The flat namespace below is the front door for torch users: what they reach for as
``torch.X`` is ``tg.X`` (creation functions, dtypes, every op, grad mode, ``Tensor``,
``Function``, ``manual_seed``, ``device``, ``save``/``load``), with the submodules
``tg.autograd``, ``tg.nn.functional``, ``tg.optim``, ``tg.utils.checkpoint`` and ``tg.cuda``.
docs/porting.md lists what still differs from torch.

>>> x = tg.tensor([[1.0, 2.0]], requires_grad=True)
>>> tg.nn.functional.relu(x).sum(axis=1).backward()
>>> x.grad.tolist(), x.float().dtype == tg.float32
([[1.0, 1.0]], True)
"""
from __future__ import annotations

__version__ = "0.1.0"

import builtins as _builtins  # noqa: E402
import warnings as _warnings  # noqa: E402

from . import devices  # noqa: E402 - the bottom layer
from . import engine  # noqa: E402 - the engine core: imports devices, no ops
from . import ops  # noqa: E402 - imports the engine core; binds Tensor's operators and methods
from .engine import checkpoint as _checkpoint, function as _function  # noqa: E402 - above ops

engine.bind_upper_layer({name: getattr(module, name) for module, names in (
    (_function, ("Function", "FunctionCtx", "once_differentiable")),
    (_checkpoint, ("checkpoint", "checkpoint_sequential", "CheckpointError"))) for name in names})

# Note [Floating-point warnings]
# ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
# numpy reports a floating-point event (log(0), 0/0, overflow) as a RuntimeWarning; torch
# reports nothing, and the result (-inf, nan, inf) says it all. Silencing it per op would cost
# every op a ``numpy.errstate`` (a context manager, about a microsecond) and would not even be
# enough: numpy's error state is per thread (per context since numpy 1.25), so the engine's
# worker threads and every user thread would each need it set. A warnings filter costs
# nothing until a warning is raised, and the filter list is process-wide: numpy names the
# warning after the module of the Python frame that called the ufunc, so one filter on
# threadgrad's modules drops exactly the warnings our ops and engine raise, on every thread,
# and leaves those of the user's own numpy code alone. (``numpy.seterr(all="raise")`` still
# raises FloatingPointError inside ops: that is the user asking for it.) One gap: a
# ``warnings.catch_warnings()`` block that is open while threadgrad is first imported puts
# the old filter list back when it closes, without ours; pytest's collection is such a block,
# so a test suite silences them in its own configuration
# (``filterwarnings = ["ignore::RuntimeWarning:threadgrad"]``). docs/porting.md says so.
_warnings.filterwarnings("ignore", category=RuntimeWarning, module=r"threadgrad\.")

# --- the front door: torch's flat names ------------------------------------------------------
import numpy as _np  # noqa: E402

from .devices import Device  # noqa: E402
from .engine import (Function, Tensor, arange, empty, empty_like, enable_grad, full, full_like,  # noqa: E402
                     is_grad_enabled, manual_seed, no_grad, ones, ones_like, rand, randn, set_grad_enabled, tensor,
                     zeros, zeros_like)
from .engine.creation import get_rng_state, set_rng_state  # noqa: E402
from .ops import *  # noqa: E402,F401,F403 - every op, flat, as torch.X
from .ops import __all__ as _op_names  # noqa: E402
from ._front import (as_tensor, chunk, contiguous, device, eq, from_numpy, ge, gt, index_select,  # noqa: E402
                     is_floating_point, is_tensor, le, linspace, lt, mm, multinomial, narrow, ne, numel,
                     rand_like, randint, randn_like, randperm, set_default_device, topk, tril, triu, unbind)
from ._front import detach, detach_, fill_, t, unflatten, zero_  # noqa: E402 - functional forms of methods
from .ops import argwhere, nonzero  # noqa: E402 - indices (issue 31, item 4)
from .serialization import load, save  # noqa: E402
from ._generator import Generator  # noqa: E402
from . import accelerator, autograd, cuda, nn, optim, utils  # noqa: E402
from . import profiler, viz  # noqa: E402 - tools over the engine (their plotting libraries load on use)
from . import distributed  # noqa: E402 - data parallel over MPI (mpi4py loads at init_process_group)
from .utils import checkpoint as _utils_checkpoint  # noqa: E402,F401 - makes tg.utils.checkpoint an attribute

# dtypes: numpy's scalar types, which compare equal to a tensor's ``dtype`` (``x.dtype == tg.float32``)
float16 = half = _np.float16
float32 = float = _np.float32  # noqa: A001 - torch's names
float64 = double = _np.float64
int8 = _np.int8
uint8 = _np.uint8
int16 = short = _np.int16
int32 = int = _np.int32  # noqa: A001
int64 = long = _np.int64
bool = _np.bool_  # noqa: A001
complex64 = _np.complex64
complex128 = _np.complex128

clip = clamp  # noqa: F405 - torch's alias

__all__ = (["__version__", "accelerator", "devices", "distributed", "engine", "ops", "profiler", "viz", "autograd", "cuda", "nn", "optim", "utils",
            "Tensor", "Function", "Device", "device", "Generator", "tensor", "as_tensor", "from_numpy", "zeros", "ones", "empty",
            "full", "zeros_like", "ones_like", "empty_like", "full_like", "rand", "randn", "rand_like", "randn_like",
            "randint", "randperm", "arange", "linspace", "mm", "tril", "triu", "multinomial", "contiguous", "set_default_device", "topk", "eq", "ne", "lt", "le", "gt", "ge", "manual_seed", "get_rng_state", "set_rng_state", "no_grad", "enable_grad", "set_grad_enabled",
            "is_grad_enabled", "t", "unflatten", "detach", "detach_", "fill_", "zero_", "argwhere", "nonzero", "is_tensor", "is_floating_point", "numel", "save", "load", "clip",
            "float16", "half", "float32", "float", "float64", "double", "int8", "uint8", "int16", "short", "int32",
            "int", "int64", "long", "bool", "complex64", "complex128"]
           + [n for n in _op_names if n not in ("REGISTRY", "register")])
# ``from threadgrad import *`` must not shadow Python's own float, int, bool, sum, max, abs ...
__all__ = [n for n in __all__ if not hasattr(_builtins, n)]

# linear algebra (issue 31): torch.linalg's functions, as tg.linalg
from . import linalg  # noqa: E402
__all__.append("linalg")
