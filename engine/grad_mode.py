"""Thread-local grad mode: ``no_grad``, ``enable_grad``, ``set_grad_enabled``, ``is_grad_enabled``.

See Note [Thread-local state] in _state.py.

>>> from threadgrad import engine
>>> x = engine.ones(2, requires_grad=True)
>>> with engine.no_grad():
...     y = x * 2
>>> y.requires_grad
False
"""
from __future__ import annotations

import functools
import inspect
import warnings
from typing import Any, Callable, TypeVar

from ._state import tls

F = TypeVar("F", bound=Callable[..., Any])


def is_grad_enabled() -> bool:
    """True when ops on this thread record the graph."""
    return tls.grad_enabled


class _GradModeContext:
    """Base of the grad-mode context managers; also usable as a decorator (with or without
    parentheses), on plain and on generator functions."""

    _mode: bool

    def __new__(cls, orig_func: Any = None) -> Any:
        if orig_func is None or not callable(orig_func) or cls is set_grad_enabled:
            return super().__new__(cls)
        return cls()(orig_func)  # bare decorator: @engine.no_grad

    def __enter__(self) -> None:
        self._prev = tls.grad_enabled
        tls.grad_enabled = self._mode

    def __exit__(self, *exc: Any) -> None:
        tls.grad_enabled = self._prev

    def __call__(self, fn: F) -> F:
        mode = self._mode
        if inspect.isclass(fn):
            # torch's words; as in torch the class is still wrapped (construction runs in the mode).
            warnings.warn(
                "Decorating classes is deprecated and will be disabled in future versions. You should only decorate "
                "functions or methods. To preserve the current behavior of class decoration, you can directly "
                "decorate the `__init__` method and nothing else.", FutureWarning, stacklevel=2)
        if inspect.isgeneratorfunction(fn):
            return _wrap_generator(fn, mode)  # type: ignore[return-value]

        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            prev = tls.grad_enabled
            tls.grad_enabled = mode
            try:
                return fn(*args, **kwargs)
            finally:
                tls.grad_enabled = prev

        return wrapper  # type: ignore[return-value]


def _wrap_generator(fn: Callable, mode: bool) -> Callable:
    """The mode holds each time the generator's body runs, and is restored between steps."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        gen = fn(*args, **kwargs)

        def step(method: Callable, *arg: Any) -> Any:
            prev = tls.grad_enabled
            tls.grad_enabled = mode
            try:
                return method(*arg)
            finally:
                tls.grad_enabled = prev

        try:
            response = step(gen.send, None)
            while True:
                try:
                    request = yield response
                except GeneratorExit:
                    step(gen.close)
                    raise
                except BaseException as e:  # noqa: BLE001 - forwarded into the generator
                    response = step(gen.throw, e)
                else:
                    response = step(gen.send, request)
        except StopIteration as stop:
            return stop.value

    return wrapper


class no_grad(_GradModeContext):
    """Context manager / decorator: ops inside record no graph (on this thread only)."""

    _mode = False


class enable_grad(_GradModeContext):
    """Context manager / decorator: ops inside record the graph, even within ``no_grad``."""

    _mode = True


class set_grad_enabled(_GradModeContext):
    """Set grad mode on this thread: as a function call it takes effect at once; as a
    context manager it is restored on exit.

    >>> from threadgrad import engine
    >>> _ = engine.set_grad_enabled(False); engine.is_grad_enabled()
    False
    >>> _ = engine.set_grad_enabled(True)
    """

    def __init__(self, mode: bool) -> None:
        if type(mode) is not bool:  # torch's TypeError, not a truthiness guess
            raise TypeError(f"set_grad_enabled(): argument 'mode' (position 1) must be bool, not {type(mode).__name__}")
        self._prev = tls.grad_enabled
        self._mode = mode
        tls.grad_enabled = mode

    def __call__(self, fn: F) -> F:
        tls.grad_enabled = self._prev  # as a decorator, the mode applies only inside fn
        return super().__call__(fn)

    def __enter__(self) -> None:  # the switch already happened in __init__
        pass

    def __exit__(self, *exc: Any) -> None:
        tls.grad_enabled = self._prev
