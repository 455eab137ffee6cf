"""``tg.nn.Module``: torch's base class for layers and models.

A Module keeps three registries, filled by attribute assignment (``__setattr__``), as torch's
torch/nn/modules/module.py: ``_parameters`` (Parameters), ``_buffers`` (tensors that are state
but not trained, such as running statistics) and ``_modules`` (submodules). ``state_dict``,
``to``, ``train`` and the iterators walk them; the keys of ``state_dict`` are torch's
(``"0.weight"``, ``"encoder.layers.1.bias"``), so a torch checkpoint converted through numpy
loads into the same module tree.

>>> import threadgrad as tg
>>> class Net(tg.nn.Module):
...     def __init__(self):
...         super().__init__()
...         self.fc = tg.nn.Linear(3, 2)
...         self.register_buffer("scale", tg.ones(2))
...     def forward(self, x):
...         return self.fc(x) * self.scale
>>> net = Net()
>>> list(net.state_dict())
['scale', 'fc.weight', 'fc.bias']
>>> net(tg.zeros(4, 3)).shape
(4, 2)

Note [Modules and threads]
~~~~~~~~~~~~~~~~~~~~~~~~~~
One Module may be called from many threads at once: a forward reads the registries and
builds a graph private to its call, and the engine accumulates into shared parameters under
each leaf's lock (docs/autograd.md). Nothing in Module is process-global. What threads may
change while others call the module are the hook tables: they are copy-on-write (a register
or a remove builds a new dict under the module's ``_hooks_lock`` and swaps it in), so a call
iterates a snapshot that no other thread mutates, without taking a lock on the hot path.
Changing parameters or submodules while another thread calls the module is the user's race,
as in torch.
"""
from __future__ import annotations

import itertools
import threading
from collections import OrderedDict, namedtuple
from typing import Any, Callable, Iterator, Mapping

import numpy

from ... import devices
from ...engine._locks import remade_at_fork
from ...engine.grad_mode import no_grad
from ...engine.tensor import Tensor, to_device, to_dtype
from ..parameter import Buffer, Parameter
from ._hooks import HooksMixin, RemovableHandle  # noqa: F401 - RemovableHandle: torch's name here too

__all__ = ["Module", "RemovableHandle"]


def _typename(obj: Any) -> str:
    if isinstance(obj, Parameter):
        return "threadgrad.nn.Parameter"
    if isinstance(obj, Tensor):
        return "threadgrad.Tensor"
    cls = type(obj)
    module = cls.__module__
    return cls.__qualname__ if module in (None, "builtins") else f"{module}.{cls.__qualname__}"


def _addindent(s: str, spaces: int) -> str:
    lines = s.split("\n")
    if len(lines) == 1:
        return s
    first = lines.pop(0)
    return first + "\n" + "\n".join(" " * spaces + line for line in lines)


class _IncompatibleKeys(namedtuple("IncompatibleKeys", ["missing_keys", "unexpected_keys"])):
    """``load_state_dict``'s result, torch's named tuple."""

    __slots__ = ()

    def __repr__(self) -> str:
        if not self.missing_keys and not self.unexpected_keys:
            return "<All keys matched successfully>"
        return super().__repr__()

    __str__ = __repr__


_IncompatibleKeys.__name__ = _IncompatibleKeys.__qualname__ = "_IncompatibleKeys"


def _check_name(kind: str, name: Any, module: "Module", existing: dict) -> None:
    """torch's checks of a parameter/buffer/module name (its error types and words)."""
    if not isinstance(name, str):
        raise TypeError(f"{kind} name should be a string. Got {_typename(name)}")
    if "." in name:
        raise KeyError(f"{kind} name can't contain \".\"" + (f", got: {name}" if kind == "module" else ""))
    if name == "":
        raise KeyError(f"{kind} name can't be empty string \"\"")
    if hasattr(module, name) and name not in existing:
        raise KeyError(f"attribute '{name}' already exists")


class Module(HooksMixin):
    """``torch.nn.Module``: subclass it, create parameters, buffers and submodules in
    ``__init__`` (after ``super().__init__()``), and compute in ``forward``; call the module
    itself (``model(x)``), which runs the forward pre-hooks, ``forward`` and the forward hooks."""

    training: bool
    _version: int = 1  # torch's state_dict metadata version

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        if args or kwargs:
            raise TypeError(f"{type(self).__name__}.__init__() takes 1 positional argument but "
                            f"{len(args) + 1} were given" if args else
                            f"{type(self).__name__}.__init__() got an unexpected keyword argument "
                            f"'{next(iter(kwargs))}'")
        setattr_ = object.__setattr__
        setattr_(self, "training", True)
        setattr_(self, "_parameters", {})
        setattr_(self, "_buffers", {})
        setattr_(self, "_non_persistent_buffers_set", set())
        setattr_(self, "_modules", {})
        setattr_(self, "_forward_pre_hooks", OrderedDict())
        setattr_(self, "_forward_pre_hooks_with_kwargs", {})
        setattr_(self, "_forward_hooks", OrderedDict())
        setattr_(self, "_forward_hooks_with_kwargs", {})
        setattr_(self, "_forward_hooks_always_called", {})
        setattr_(self, "_backward_hooks", OrderedDict())
        setattr_(self, "_backward_pre_hooks", OrderedDict())
        setattr_(self, "_hooks_lock", threading.Lock())  # See Note [Modules and threads]
        remade_at_fork(self)  # a child forked while a hook is being added finds it free

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError(f'Module [{type(self).__name__}] is missing the required "forward" function')

    # -- registration -------------------------------------------------------------------------
    def register_buffer(self, name: str, tensor: Tensor | None, persistent: bool = True) -> None:
        """Register ``tensor`` as buffer ``name``: module state saved in ``state_dict`` unless
        ``persistent=False``, moved by ``to()``, not returned by ``parameters()``."""
        if "_buffers" not in self.__dict__:
            raise AttributeError("cannot assign buffer before Module.__init__() call")
        _check_name("buffer", name, self, self._buffers)
        if tensor is not None and not isinstance(tensor, Tensor):
            raise TypeError(f"cannot assign '{_typename(tensor)}' object to buffer '{name}' "
                            "(torch Tensor or None required)")
        if isinstance(tensor, Buffer):
            tensor = tensor.source
        self._buffers[name] = tensor
        if persistent:
            self._non_persistent_buffers_set.discard(name)
        else:
            self._non_persistent_buffers_set.add(name)

    def register_parameter(self, name: str, param: Parameter | None) -> None:
        """Register ``param`` (a Parameter, or None for an absent one) as parameter ``name``."""
        if "_parameters" not in self.__dict__:
            raise AttributeError("cannot assign parameter before Module.__init__() call")
        _check_name("parameter", name, self, self._parameters)
        if param is None:
            self._parameters[name] = None
            return
        if not isinstance(param, Parameter):
            raise TypeError(f"cannot assign '{_typename(param)}' object to parameter '{name}' "
                            "(torch.nn.Parameter or None required)")
        if param.grad_fn is not None:
            raise ValueError(f"Cannot assign non-leaf Tensor to parameter '{name}'. Model parameters must be created "
                             f"explicitly. To express '{name}' as a function of another Tensor, compute the value in "
                             "the forward() method.")
        self._parameters[name] = param

    def add_module(self, name: str, module: "Module | None") -> None:
        """Register ``module`` (or None) as submodule ``name``."""
        if not isinstance(module, Module) and module is not None:
            raise TypeError(f"{_typename(module)} is not a Module subclass")
        _check_name("module", name, self, self._modules)
        self._modules[name] = module

    def register_module(self, name: str, module: "Module | None") -> None:
        """Alias of :meth:`add_module`."""
        self.add_module(name, module)

    def __setattr__(self, name: str, value: Any) -> None:
        d = self.__dict__

        def remove_from(*tables: Any) -> None:
            for table in tables:
                if name in table:
                    if isinstance(table, set):
                        table.discard(name)
                    else:
                        del table[name]

        params = d.get("_parameters")
        if isinstance(value, Parameter):
            if params is None:
                raise AttributeError("cannot assign parameters before Module.__init__() call")
            remove_from(d, self._buffers, self._modules, self._non_persistent_buffers_set)
            self.register_parameter(name, value)
        elif params is not None and name in params:
            if value is not None:
                raise TypeError(f"cannot assign '{_typename(value)}' as parameter '{name}' "
                                "(torch.nn.Parameter or None expected)")
            self.register_parameter(name, value)
        else:
            modules = d.get("_modules")
            if isinstance(value, Module):
                if modules is None:
                    raise AttributeError("cannot assign module before Module.__init__() call")
                remove_from(d, self._parameters, self._buffers, self._non_persistent_buffers_set)
                modules[name] = value
            elif modules is not None and name in modules:
                if value is not None:
                    raise TypeError(f"cannot assign '{_typename(value)}' as child module '{name}' "
                                    "(torch.nn.Module or None expected)")
                modules[name] = value
            else:
                buffers = d.get("_buffers")
                if isinstance(value, Buffer) or (buffers is not None and name in buffers):
                    if value is not None and not isinstance(value, Tensor):
                        raise TypeError(f"cannot assign '{_typename(value)}' as buffer '{name}' "
                                        "(torch.nn.Buffer, torch.Tensor or None expected)")
                    if isinstance(value, Buffer):
                        persistent = value.persistent
                    else:
                        persistent = name not in self._non_persistent_buffers_set
                    remove_from(d, self._parameters, self._modules)
                    self.register_buffer(name, value, persistent)
                else:
                    object.__setattr__(self, name, value)

    def __getattr__(self, name: str) -> Any:
        # Only called when normal lookup fails: the registries, then torch's AttributeError.
        d = self.__dict__
        for table in ("_parameters", "_buffers", "_modules"):
            entries = d.get(table)
            if entries is not None and name in entries:
                return entries[name]
        raise AttributeError(f"'{type(self).__name__}' object has no attribute '{name}'")

    def __delattr__(self, name: str) -> None:
        if name in self._parameters:
            del self._parameters[name]
        elif name in self._buffers:
            del self._buffers[name]
            self._non_persistent_buffers_set.discard(name)
        elif name in self._modules:
            del self._modules[name]
        else:
            object.__delattr__(self, name)

    def __dir__(self) -> list[str]:
        attrs = list(object.__dir__(self))
        keys = attrs + list(self._parameters) + list(self._modules) + list(self._buffers)
        return sorted(k for k in set(keys) if not k[0].isdigit())

    # -- iteration ----------------------------------------------------------------------------
    def named_modules(self, memo: set | None = None, prefix: str = "",
                      remove_duplicate: bool = True) -> Iterator[tuple[str, "Module"]]:
        """Every module of the tree, this one first, depth first, as ``(qualified name,
        module)``; a module reached twice is given once unless ``remove_duplicate=False``."""
        if memo is None:
            memo = set()
        # Iterative, pre-order (torch's order): a stack of (prefix, module) in reverse.
        stack = [(prefix, self)]
        while stack:
            name, module = stack.pop()
            if remove_duplicate:
                if module in memo:
                    continue
                memo.add(module)
            yield name, module
            children = [(name + ("." if name else "") + key, child)
                        for key, child in module._modules.items() if child is not None]
            stack.extend(reversed(children))

    def modules(self) -> Iterator["Module"]:
        for _, module in self.named_modules():
            yield module

    def named_children(self) -> Iterator[tuple[str, "Module"]]:
        """The direct submodules, each once, as ``(name, module)``."""
        memo = set()
        for name, module in self._modules.items():
            if module is not None and module not in memo:
                memo.add(module)
                yield name, module

    def children(self) -> Iterator["Module"]:
        for _, module in self.named_children():
            yield module

    def _named_members(self, table: str, prefix: str, recurse: bool,
                       remove_duplicate: bool) -> Iterator[tuple[str, Tensor]]:
        memo = set()
        pairs = self.named_modules(prefix=prefix, remove_duplicate=remove_duplicate) if recurse else [(prefix, self)]
        for module_prefix, module in pairs:
            for key, value in getattr(module, table).items():
                if value is None or (remove_duplicate and id(value) in memo):
                    continue
                if remove_duplicate:
                    memo.add(id(value))
                yield module_prefix + ("." if module_prefix else "") + key, value

    def named_parameters(self, prefix: str = "", recurse: bool = True,
                         remove_duplicate: bool = True) -> Iterator[tuple[str, Parameter]]:
        """``(qualified name, parameter)`` pairs of this module (and its submodules, with
        ``recurse``); a parameter shared by two modules comes once, under its first name."""
        return self._named_members("_parameters", prefix, recurse, remove_duplicate)

    def parameters(self, recurse: bool = True) -> Iterator[Parameter]:
        for _, param in self.named_parameters(recurse=recurse):
            yield param

    def named_buffers(self, prefix: str = "", recurse: bool = True,
                      remove_duplicate: bool = True) -> Iterator[tuple[str, Tensor]]:
        return self._named_members("_buffers", prefix, recurse, remove_duplicate)

    def buffers(self, recurse: bool = True) -> Iterator[Tensor]:
        for _, buf in self.named_buffers(recurse=recurse):
            yield buf

    def get_submodule(self, target: str) -> "Module":
        """The submodule at dotted path ``target`` (``""`` is this module)."""
        if target == "":
            return self
        mod = self
        for item in target.split("."):
            if not hasattr(mod, item):
                raise AttributeError(mod._get_name() + " has no attribute `" + item + "`")
            mod = getattr(mod, item)
            if not isinstance(mod, Module):
                raise AttributeError("`" + item + "` is not an nn.Module")
        return mod

    def get_parameter(self, target: str) -> Parameter:
        module_path, _, name = target.rpartition(".")
        mod = self.get_submodule(module_path)
        if not hasattr(mod, name):
            raise AttributeError(mod._get_name() + " has no attribute `" + name + "`")
        param = getattr(mod, name)
        if not isinstance(param, Parameter):
            raise AttributeError("`" + name + "` is not an nn.Parameter")
        return param

    def get_buffer(self, target: str) -> Tensor:
        module_path, _, name = target.rpartition(".")
        mod = self.get_submodule(module_path)
        if not hasattr(mod, name):
            raise AttributeError(mod._get_name() + " has no attribute `" + name + "`")
        if name not in mod._buffers:
            raise AttributeError("`" + name + "` is not a buffer")
        return getattr(mod, name)

    # -- modes and conversion -----------------------------------------------------------------
    def train(self, mode: bool = True) -> "Module":
        """Set training mode (``self.training``) on this module and every submodule."""
        if not isinstance(mode, bool):
            raise ValueError("training mode is expected to be boolean")
        for module in self.modules():
            object.__setattr__(module, "training", mode)
        return self

    def eval(self) -> "Module":
        return self.train(False)

    def requires_grad_(self, requires_grad: bool = True) -> "Module":
        for p in self.parameters():
            p.requires_grad_(requires_grad)
        return self

    def zero_grad(self, set_to_none: bool = True) -> None:
        """Every parameter's gradient to None (default, as torch), or to zeros in place."""
        for p in self.parameters():
            g = p.grad
            if g is None:
                continue
            if set_to_none:
                p.grad = None
            else:
                if g.grad_fn is not None:
                    g.detach_()
                else:
                    g.requires_grad_(False)
                g.zero_()

    def apply(self, fn: Callable[["Module"], Any]) -> "Module":
        """Call ``fn`` on every submodule (children first, post-order) and then on this module."""
        # Iterative post-order, torch's order (each module's children, then the module; a
        # module shared by two parents is visited under each, as torch's recursion does).
        stack = [(self, iter(list(self.children())))]
        while stack:
            module, children = stack[-1]
            child = next(children, None)
            if child is None:
                stack.pop()
                fn(module)
            else:
                stack.append((child, iter(list(child.children()))))
        return self

    def _apply(self, fn: Callable[[Tensor], Tensor]) -> "Module":
        """Convert every parameter, gradient and buffer with ``fn``; parameters stay the same
        objects (their array, device and dtype change), as torch's default, so an optimizer
        made before ``to()`` keeps working."""
        with no_grad():
            for module in self.modules():
                for key, param in module._parameters.items():
                    if param is None:
                        continue
                    _assign(param, fn(param))
                    if param.grad is not None:
                        grad = fn(param.grad)
                        param.grad = None
                        param.grad = grad
                for key, buf in module._buffers.items():
                    if buf is not None:
                        module._buffers[key] = fn(buf)
        return self

    def to(self, *args: Any, **kwargs: Any) -> "Module":
        """``to(device)``, ``to(dtype)``, ``to(device, dtype)`` or ``to(tensor)``: parameters and
        buffers moved to the device; floating ones converted to the (floating) dtype."""
        device, dtype = _parse_to(*args, **kwargs)
        if dtype is not None and dtype.kind not in "fc":
            raise TypeError(f"nn.Module.to only accepts floating point or complex dtypes, but got desired "
                            f"dtype={dtype}")

        def convert(t: Tensor) -> Tensor:
            return t.to(device, dtype if dtype is not None and t.dtype.kind in "fc" else None)

        return self._apply(convert)

    def cpu(self) -> "Module":
        return self._apply(lambda t: t.to(devices.cpu))

    def cuda(self, device: Any = None) -> "Module":
        spec = "cuda" if device is None else (f"cuda:{device}" if isinstance(device, int) else device)
        dev = to_device(spec)
        return self._apply(lambda t: t.to(dev))

    def type(self, dst_type: Any) -> "Module":
        dt = to_dtype(dst_type)
        return self._apply(lambda t: t.to(None, dt))

    def float(self) -> "Module":
        return self._apply(lambda t: t.to(None, numpy.float32) if t.dtype.kind == "f" else t)

    def double(self) -> "Module":
        return self._apply(lambda t: t.to(None, numpy.float64) if t.dtype.kind == "f" else t)

    def half(self) -> "Module":
        return self._apply(lambda t: t.to(None, numpy.float16) if t.dtype.kind == "f" else t)

    # -- state --------------------------------------------------------------------------------
    def _save_to_state_dict(self, destination: dict, prefix: str, keep_vars: bool) -> None:
        for name, param in self._parameters.items():
            if param is not None:
                destination[prefix + name] = param if keep_vars else Tensor.detach(param)
        for name, buf in self._buffers.items():
            if buf is not None and name not in self._non_persistent_buffers_set:
                destination[prefix + name] = buf if keep_vars else buf.detach()

    def state_dict(self, *args: Any, destination: Any = None, prefix: str = "",
                   keep_vars: bool = False) -> "OrderedDict[str, Tensor]":
        """An OrderedDict from qualified names to this module tree's parameters and persistent
        buffers (detached, sharing memory; the live tensors with ``keep_vars``); torch's keys
        and order (each module's parameters, then its buffers, then its children's)."""
        if args:  # torch's deprecated positional form (destination, prefix, keep_vars)
            destination = args[0]
            if len(args) > 1:
                prefix = args[1]
            if len(args) > 2:
                keep_vars = args[2]
        if destination is None:
            destination = OrderedDict()
            destination._metadata = OrderedDict()  # type: ignore[attr-defined]
        metadata = getattr(destination, "_metadata", None)
        for name, module in self.named_modules(remove_duplicate=False):
            if metadata is not None:
                metadata[(prefix + name) if name else prefix[:-1]] = {"version": module._version}
            module._save_to_state_dict(destination, prefix + (name + "." if name else ""), keep_vars)
        return destination

    def load_state_dict(self, state_dict: Mapping[str, Any], strict: bool = True,
                        assign: bool = False) -> _IncompatibleKeys:
        """Copy ``state_dict``'s tensors into this tree's parameters and buffers (in place,
        keeping the objects; ``assign=True`` puts the given tensors in their place). Returns
        ``(missing_keys, unexpected_keys)``; with ``strict`` (default) either, or a shape
        mismatch, raises torch's RuntimeError listing them."""
        if not isinstance(state_dict, Mapping):
            raise TypeError(f"Expected state_dict to be dict-like, got {type(state_dict)}.")
        missing: list[str] = []
        unexpected: list[str] = []
        errors: list[str] = []
        for prefix_name, module in self.named_modules(remove_duplicate=False):
            prefix = prefix_name + "." if prefix_name else ""
            module._load_from_state_dict(state_dict, prefix, missing, unexpected, errors, assign)
        if strict:
            if unexpected:
                errors.insert(0, "Unexpected key(s) in state_dict: {}. ".format(", ".join(f'"{k}"' for k in unexpected)))
            if missing:
                errors.insert(0, "Missing key(s) in state_dict: {}. ".format(", ".join(f'"{k}"' for k in missing)))
        if errors:
            raise RuntimeError("Error(s) in loading state_dict for {}:\n\t{}".format(type(self).__name__,
                                                                                     "\n\t".join(errors)))
        return _IncompatibleKeys(missing, unexpected)

    def _load_from_state_dict(self, state_dict: Mapping[str, Any], prefix: str, missing: list,
                              unexpected: list, errors: list, assign: bool = False) -> None:
        persistent_buffers = {k: v for k, v in self._buffers.items() if k not in self._non_persistent_buffers_set}
        local = {k: v for k, v in itertools.chain(self._parameters.items(), persistent_buffers.items())
                 if v is not None}
        for name, param in local.items():
            key = prefix + name
            if key not in state_dict:
                missing.append(key)
                continue
            value = state_dict[key]
            if not isinstance(value, Tensor):
                errors.append(f'While copying the parameter named "{key}", expected torch.Tensor or Tensor-like '
                              f"object from checkpoint but received {type(value)}")
                continue
            if value.shape != param.shape:
                errors.append(f"size mismatch for {key}: copying a param with shape {_size(value.shape)} from "
                              f"checkpoint, the shape in current model is {_size(param.shape)}.")
                continue
            try:
                with no_grad():
                    if assign:
                        if isinstance(param, Parameter):
                            new = value if isinstance(value, Parameter) else Parameter(value, param.requires_grad)
                            self._parameters[name] = new
                        else:
                            self._buffers[name] = value
                    else:
                        param.copy_(value.to(param.device))
            except Exception as ex:  # noqa: BLE001 - torch reports it in the list
                errors.append(f'While copying the parameter named "{key}", whose dimensions in the model are '
                              f"{_size(param.shape)} and whose dimensions in the checkpoint are "
                              f"{_size(value.shape)}, an exception occurred : {ex.args}.")
        # Unexpected keys are listed with strict=False too (torch's modules always check)
        for key in state_dict:
            if key.startswith(prefix):
                rest = key[len(prefix):].split(".", 1)
                if (len(rest) > 1 and rest[0] not in self._modules) or (len(rest) == 1 and rest[0] not in local):
                    unexpected.append(key)

    # -- printing, pickling -------------------------------------------------------------------
    def _get_name(self) -> str:
        return type(self).__name__

    def extra_repr(self) -> str:
        """The text inside this module's parentheses in ``repr`` (override it, as in torch)."""
        return ""

    def __repr__(self) -> str:
        extra = self.extra_repr()
        extra_lines = extra.split("\n") if extra else []
        child_lines = [f"({key}): " + _addindent(repr(module), 2) for key, module in self._modules.items()]
        lines = extra_lines + child_lines
        main = self._get_name() + "("
        if lines:
            if len(extra_lines) == 1 and not child_lines:
                main += extra_lines[0]
            else:
                main += "\n  " + "\n  ".join(lines) + "\n"
        return main + ")"

    def __getstate__(self) -> dict:
        state = dict(self.__dict__)
        state.pop("_hooks_lock", None)  # a lock neither pickles nor deep-copies: made anew below
        return state

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        object.__setattr__(self, "_hooks_lock", threading.Lock())
        remade_at_fork(self)

    def _remake_locks(self) -> None:
        """In a forked child (Note [Locks across fork] in engine/_locks.py)."""
        object.__setattr__(self, "_hooks_lock", threading.Lock())


def _size(shape: tuple) -> str:
    """A shape as torch prints it in state_dict errors (``torch.Size([3, 2])``)."""
    return f"torch.Size({list(shape)})"


def _assign(param: Tensor, new: Tensor) -> None:
    """``param`` takes ``new``'s array (and so its device and dtype), as torch's ``param.data =
    new`` in ``Module._apply``: the same object, no history, no version bump."""
    if new is param:
        return
    param.device = new.device  # (the data setter would refuse another device: Note [Tensor.data])
    param._data = new._data


def _parse_to(*args: Any, **kwargs: Any) -> tuple:
    """torch's ``Module.to`` arguments: device, dtype, tensor (its device and dtype), non_blocking."""
    device = kwargs.pop("device", None)
    dtype = kwargs.pop("dtype", None)
    kwargs.pop("non_blocking", None)
    kwargs.pop("memory_format", None)
    if kwargs:
        raise TypeError(f"to() received an invalid combination of arguments: {sorted(kwargs)}")
    for arg in args:
        if isinstance(arg, Tensor):
            device, dtype = arg.device, arg.dtype
        elif isinstance(arg, bool):  # non_blocking given positionally
            continue
        elif isinstance(arg, (str, devices.Device)) and not _is_dtype_name(arg):
            device = arg
        else:
            dtype = arg
    return (None if device is None else to_device(device)), to_dtype(dtype)


def _is_dtype_name(arg: Any) -> bool:
    if not isinstance(arg, str):
        return False
    try:
        numpy.dtype(arg)
    except TypeError:
        return False
    return True
