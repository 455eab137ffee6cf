"""Run a port in examples/torch_programs with threadgrad or torch standing in for ``torch``.

A port's import lines name ``threadgrad``; ``run_program`` rewrites them to a package
``_standin`` whose modules forward every attribute to the chosen backend (threadgrad or torch)
and add no names, so the port runs as written on either. Comparing the two needs the same
random numbers and initial weights, which the backends draw differently (numpy's PCG64 and
torch's Philox/MT); so in ``record`` mode the stand-in writes down what torch draws (``randn``
and friends, each layer's weights after construction, ``nn.init``'s results, each shuffled
batch) on a ``Tape``, and in ``replay`` mode hands threadgrad the same numbers in the same
order, checking that each draw is of the same kind. Everything else (the model, the loss,
backward, the optimizer, the loop) is the backend's own.

The loss of every step is what each ``Tensor.backward`` was called on, recorded by patching
``Tensor.backward`` for the run.
"""
from __future__ import annotations

import contextlib
import io
import random
import re
import sys
import types
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

PROGRAMS = Path(__file__).resolve().parents[2] / "examples" / "torch_programs"
PACKAGE = "_standin"
SUBMODULES = ("nn", "nn.functional", "nn.init", "nn.utils", "optim", "optim.lr_scheduler", "utils", "utils.data",
              "autograd")
RANDOM_FUNCTIONS = ("randn", "rand", "randint", "randperm", "randn_like", "rand_like", "multinomial", "normal")
LAYERS = ("Linear", "Bilinear", "Embedding", "LayerNorm", "Conv2d", "LSTMCell")


@dataclass
class Tape:
    """What torch drew, in order: (kind, numpy value) pairs."""
    items: list = field(default_factory=list)
    position: int = 0

    def record(self, kind: str, value: Any) -> None:
        self.items.append((kind, value))

    def replay(self, kind: str) -> Any:
        assert self.position < len(self.items), f"the replayed run drew more than torch did ({kind} after {self.position})"
        recorded_kind, value = self.items[self.position]
        assert recorded_kind == kind, f"draw {self.position}: torch drew {recorded_kind}, the replayed run {kind}"
        self.position += 1
        return value


@dataclass
class Run:
    losses: list
    stdout: str
    namespace: dict


def _numpy(t: Any) -> np.ndarray:
    return np.array(t.detach().cpu().numpy(), copy=True)


def _tree(value: Any, leaf: Any) -> Any:
    if isinstance(value, (list, tuple)):
        return type(value)(_tree(v, leaf) for v in value)
    if isinstance(value, dict):
        return {k: _tree(v, leaf) for k, v in value.items()}
    return leaf(value)


class _Module(types.ModuleType):
    """A module whose own attributes are the overrides and whose others are ``real``'s."""

    def __init__(self, name: str, real: types.ModuleType, overrides: dict) -> None:
        super().__init__(name)
        self._real = real
        self.__dict__.update(overrides)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._real, name)


def _overrides(backend: types.ModuleType, sub: str, mode: str | None, tape: Tape) -> dict:
    """The stand-in's replacements in submodule ``sub`` ("" for the top) for ``mode``."""
    if mode is None:
        return {}
    real = _resolve(backend, sub)
    out: dict = {}
    if sub == "":
        for name in RANDOM_FUNCTIONS:
            if hasattr(real, name):
                out[name] = _random_function(backend, getattr(real, name), name, mode, tape)
    elif sub == "nn":
        for name in LAYERS:
            if hasattr(real, name):
                out[name] = _layer(backend, getattr(real, name), mode, tape)
    elif sub == "nn.init":
        for name in dir(real):
            if name.endswith("_") and not name.startswith("_") and name != "calculate_gain":
                out[name] = _init_function(backend, getattr(real, name), name, mode, tape)
    elif sub == "utils.data":
        out["DataLoader"] = _data_loader(backend, real.DataLoader, mode, tape)
    return out


def _random_function(backend: Any, fn: Any, name: str, mode: str, tape: Tape) -> Any:
    def draw(*args: Any, **kwargs: Any) -> Any:
        if mode == "record":
            out = fn(*args, **kwargs)
            tape.record(name, _numpy(out))
            return out
        out = backend.tensor(tape.replay(name))
        return out.requires_grad_() if kwargs.get("requires_grad") else out
    return draw


def _layer(backend: Any, cls: type, mode: str, tape: Tape) -> type:
    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        cls.__init__(self, *args, **kwargs)
        if mode == "record":
            tape.record(cls.__name__, {k: _numpy(v) for k, v in self.state_dict().items()})
        else:
            self.load_state_dict({k: backend.tensor(v) for k, v in tape.replay(cls.__name__).items()})
    return type(cls.__name__, (cls,), {"__init__": __init__, "__module__": cls.__module__,
                                       "__qualname__": cls.__qualname__})


def _init_function(backend: Any, fn: Any, name: str, mode: str, tape: Tape) -> Any:
    def init(tensor: Any, *args: Any, **kwargs: Any) -> Any:
        out = fn(tensor, *args, **kwargs)
        if mode == "record":
            tape.record(name, _numpy(tensor))
        else:
            with backend.no_grad():
                tensor.copy_(backend.tensor(tape.replay(name)))
        return out
    return init


def _data_loader(backend: Any, cls: type, mode: str, tape: Tape) -> type:
    def __iter__(self: Any) -> Any:
        for batch in cls.__iter__(self):
            if mode == "record":
                tape.record("batch", _tree(batch, _numpy))
                yield batch
            else:
                recorded = tape.replay("batch")
                assert [a.shape for a in _flat(recorded)] == [tuple(b.shape) for b in _flat(batch)]
                yield _tree(recorded, backend.tensor)
    return type("DataLoader", (cls,), {"__iter__": __iter__, "__module__": cls.__module__})


def _flat(tree: Any) -> list:
    if isinstance(tree, (list, tuple)):
        return [leaf for v in tree for leaf in _flat(v)]
    if isinstance(tree, dict):
        return [leaf for v in tree.values() for leaf in _flat(v)]
    return [tree]


def _resolve(backend: types.ModuleType, sub: str) -> types.ModuleType:
    module = backend
    for part in filter(None, sub.split(".")):
        module = getattr(module, part)
    return module


def _install(backend: types.ModuleType, mode: str | None, tape: Tape) -> dict:
    """The stand-in package's modules by dotted name, each forwarding to the backend's."""
    import importlib

    for sub in SUBMODULES:  # make sure the backend's submodules are loaded
        importlib.import_module(f"{backend.__name__}.{sub}")
    modules = {"": _Module(PACKAGE, backend, _overrides(backend, "", mode, tape))}
    for sub in SUBMODULES:
        modules[sub] = _Module(f"{PACKAGE}.{sub}", _resolve(backend, sub), _overrides(backend, sub, mode, tape))
    for sub in SUBMODULES:  # link parents to the stand-in children, so torch.nn.init reaches the override
        parent, _, child = sub.rpartition(".")
        modules[parent].__dict__[child] = modules[sub]
    return {(f"{PACKAGE}.{sub}" if sub else PACKAGE): module for sub, module in modules.items()}


def _rewritten(path: Path, replace: tuple) -> str:
    """``path``'s source with its threadgrad imports pointed at the stand-in and the literal
    rewrites applied (each must occur in the program or in one of its sibling modules)."""
    source = path.read_text()
    for old, new in replace:
        source = source.replace(old, new)
    source, n = re.subn(r"^(\s*)(import|from)(\s+)threadgrad\b", rf"\1\2\3{PACKAGE}", source, flags=re.M)
    assert n, f"{path.name} does not import threadgrad"
    return source


def run_program(name: str, backend: types.ModuleType, mode: str | None = None, tape: Tape | None = None,
                replace: tuple = (), argv: tuple = (), modules: tuple = ()) -> Run:
    """Run examples/torch_programs/``name``.py as ``__main__`` with ``backend`` (the threadgrad
    or torch module) standing in for its ``threadgrad`` imports; ``replace`` rewrites literal
    text first (to shorten a loop), ``argv`` are its command-line arguments; ``mode`` is
    None (plain), "record" or "replay" with ``tape``. ``modules`` names sibling ports the
    program imports (``from nanogpt_model import GPT``): each is loaded the same way, its
    import lines rewritten, under its own name for the run."""
    path = PROGRAMS / f"{name}.py"
    for old, _ in replace:
        assert any(old in (PROGRAMS / f"{m}.py").read_text() for m in (name, *modules)), f"{old!r} is not in {name}"
    source = _rewritten(path, replace)
    tape = tape if tape is not None else Tape()
    losses: list = []
    original_backward = backend.Tensor.backward

    inside = []  # torch's Tensor.backward re-enters itself once (through __torch_function__ handling)

    def backward(self: Any, *args: Any, **kwargs: Any) -> Any:
        if inside:
            return original_backward(self, *args, **kwargs)
        if self.numel() == 1:
            losses.append(float(self.detach().cpu().numpy()))
        inside.append(True)
        try:
            return original_backward(self, *args, **kwargs)
        finally:
            inside.pop()

    siblings = modules  # the sibling ports, loaded below
    installed = _install(backend, mode, tape)
    for sibling in siblings:
        installed[sibling] = types.ModuleType(sibling)
    saved = {k: sys.modules.get(k) for k in installed}
    saved_argv = sys.argv
    namespace = {"__name__": "__main__", "__file__": str(path)}
    out = io.StringIO()
    random.seed(0)
    try:
        sys.modules.update(installed)
        for sibling in siblings:
            sibling_path = PROGRAMS / f"{sibling}.py"
            installed[sibling].__file__ = str(sibling_path)
            exec(compile(_rewritten(sibling_path, replace), str(sibling_path), "exec"), installed[sibling].__dict__)
        sys.argv = [str(path), *argv]
        backend.Tensor.backward = backward
        with contextlib.redirect_stdout(out):
            exec(compile(source, str(path), "exec"), namespace)
    finally:
        backend.Tensor.backward = original_backward
        sys.argv = saved_argv
        for k, v in saved.items():
            if v is None:
                sys.modules.pop(k, None)
            else:
                sys.modules[k] = v
    return Run(losses, out.getvalue(), namespace)
