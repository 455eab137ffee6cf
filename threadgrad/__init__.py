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
>>> [round(v, 4) for v in x.grad.tolist()]
[0.8399, 0.1413]
"""
from __future__ import annotations

__version__ = "0.1.0"

from . import devices  # noqa: E402 - the bottom layer
from . import engine  # noqa: E402 - the engine core: imports devices, no ops
from . import ops  # noqa: E402 - imports the engine core; binds Tensor's operators and methods
from .engine import checkpoint as _checkpoint, function as _function  # noqa: E402 - above ops


def _export_upper_layer() -> None:
    """Give the engine package the names of its modules that sit above ops."""
    for module, names in ((_function, ("Function", "FunctionCtx", "once_differentiable")),
                          (_checkpoint, ("checkpoint", "checkpoint_sequential", "CheckpointError"))):
        for name in names:
            setattr(engine, name, getattr(module, name))


_export_upper_layer()

from . import profiler, viz  # noqa: E402 - tools over the engine (their plotting libraries load on use)
from . import distributed  # noqa: E402 - data parallel over MPI (mpi4py loads at init_process_group)

__all__ = ["__version__", "devices", "distributed", "engine", "ops", "profiler", "viz"]
