"""Checking gradients against finite differences: ``gradcheck`` and ``gradgradcheck``.

Both follow ``torch.autograd.gradcheck`` / ``gradgradcheck``: every input that requires grad
is perturbed element by element (central differences, ``eps``), and the resulting numerical
Jacobian of every floating point output is compared with the analytical one the engine
computes, one vector-Jacobian product (a ``grad`` call with a one-hot ``grad_outputs``) per
output element. Use float64 inputs: float32 cannot resolve ``eps=1e-6``.

>>> from threadgrad import engine, ops
>>> from threadgrad.engine.gradcheck import gradcheck, gradgradcheck
>>> x = engine.tensor([0.5, -1.0, 2.0], dtype=engine.float64, requires_grad=True)
>>> gradcheck(ops.tanh, (x,)), gradgradcheck(ops.tanh, (x,))
(True, True)
"""
from __future__ import annotations

import warnings
from typing import Any, Callable

import numpy

from ._state import tls
from .autograd import grad as _grad
from .tensor import Tensor, _wrap

__all__ = ["gradcheck", "gradgradcheck", "GradcheckError"]


class GradcheckError(RuntimeError):
    """Raised by :func:`gradcheck` / :func:`gradgradcheck` when a check fails (a RuntimeError, as in torch)."""


def _as_inputs(inputs: Any) -> tuple:
    return tuple(inputs) if isinstance(inputs, (tuple, list)) else (inputs,)


def _as_outputs(out: Any) -> tuple:
    if isinstance(out, Tensor):
        return (out,)
    if isinstance(out, (tuple, list)):
        return tuple(out)
    raise TypeError(f"gradcheck: fn must return a Tensor or a sequence of Tensors, got {type(out).__name__}")


def _differentiable(outputs: tuple) -> list:
    """Indices of outputs with a floating dtype (integer outputs such as indices are skipped)."""
    return [i for i, o in enumerate(outputs) if isinstance(o, Tensor) and o.dtype.kind in "fc"]


def _host(t: Tensor) -> numpy.ndarray:
    return numpy.array(t.device.to_host(t._data), dtype=numpy.float64, copy=True).reshape(-1)


def _check_same_meta(base: tuple, out: tuple, out_idx: list, eps: float, e: int) -> None:
    """torch's _check_outputs_same_dtype_and_shape: perturbing an input must not change the
    outputs' shapes or dtypes (an AssertionError, as in torch)."""
    for j in out_idx:
        a, b = base[j], out[j]
        assert a.shape == b.shape, (f"Expected `func` to return outputs with the same shape when inputs are perturbed "
                                    f"on index {e} by {eps}, but got: shapes {tuple(a.shape)} and {tuple(b.shape)}.")
        assert a.dtype == b.dtype, (f"Expected `func` to return outputs with the same dtype when inputs are perturbed "
                                    f"on index {e} by {eps}, but got: dtypes {a.dtype} and {b.dtype}.")


def _numerical(fn: Callable, inputs: tuple, diff: list, out_idx: list, eps: float) -> list:
    """``jac[k][i]``: d(output out_idx[k]) / d(input diff[i]) as an (n_out, n_in) float64 array."""
    base = _as_outputs(fn(*inputs))
    sizes = [base[j]._data.size for j in out_idx]
    jac = [[numpy.zeros((n, inputs[i]._data.size)) for i in diff] for n in sizes]
    for col, i in enumerate(diff):
        x = inputs[i]
        for e in range(x._data.size):
            pos = numpy.unravel_index(e, x.shape)  # any layout: the write reaches x._data
            orig = x._data[pos].item()
            x._data[pos] = orig + eps
            plus = _as_outputs(fn(*inputs))
            _check_same_meta(base, plus, out_idx, eps, e)
            plus = [_host(plus[j]) for j in out_idx]
            x._data[pos] = orig - eps
            minus = _as_outputs(fn(*inputs))
            _check_same_meta(base, minus, out_idx, eps, e)
            minus = [_host(minus[j]) for j in out_idx]
            x._data[pos] = orig
            for k in range(len(out_idx)):
                jac[k][col][:, e] = (plus[k] - minus[k]) / (2 * eps)
    return jac


def _analytical(outputs: tuple, inputs: tuple, diff: list, out_idx: list) -> list:
    """The same Jacobians from the engine: one vector-Jacobian product per output element."""
    diff_inputs = [inputs[i] for i in diff]
    jac = []
    for j in out_idx:
        out = outputs[j]
        n = out._data.size
        rows = [numpy.zeros((n, inputs[i]._data.size)) for i in diff]
        if out._rg:
            xp = out.device.xp
            for r in range(n):
                onehot = xp.zeros(n, dtype=out.dtype)
                onehot[r] = 1
                gs = _grad(out, diff_inputs, _wrap(onehot.reshape(out.shape), out.device),
                           retain_graph=True, allow_unused=True)
                for col, (g, x) in enumerate(zip(gs, diff_inputs)):
                    if g is None:
                        continue
                    if g.shape != x.shape:
                        raise GradcheckError(f"Gradient has incorrect size: expected {tuple(x.shape)}, got {tuple(g.shape)} "
                                             f"(output {j}, input {col})")
                    if g.dtype != x.dtype:
                        raise GradcheckError(f"Gradient has dtype mismatch: expected {x.dtype}, got {g.dtype} "
                                             f"(output {j}, input {col})")
                    if g.device is not x.device:
                        raise GradcheckError(f"Gradient is on {g.device}, but input {col} is on {x.device}")
                    rows[col][r] = _host(g)
        jac.append(rows)
    return jac


def _fail(msg: str, raise_exception: bool) -> bool:
    if raise_exception:
        raise GradcheckError(msg)
    return False


def gradcheck(fn: Callable[..., Any], inputs: Any, eps: float = 1e-6, atol: float = 1e-5, rtol: float = 1e-3,
              raise_exception: bool = True) -> bool:
    """Check the gradients of ``fn(*inputs)`` against central finite differences.

    ``inputs`` is a Tensor or a tuple of them (other values are passed through); those that
    require grad are checked, against every floating point output. An analytical Jacobian
    entry ``a`` passes next to its numerical ``n`` when ``|a - n| <= atol + rtol * |n|``.
    Returns True, or raises RuntimeError ("Jacobian mismatch for output 0 with respect to
    input 0", both Jacobians shown), or returns False when ``raise_exception=False``.
    Input numbering counts only the inputs that require grad, as in torch.

    >>> from threadgrad import engine, ops
    >>> from threadgrad.engine.gradcheck import gradcheck
    >>> a = engine.tensor([[1.0, 2.0], [3.0, 4.0]], dtype=engine.float64, requires_grad=True)
    >>> b = engine.tensor([0.5, -2.0], dtype=engine.float64, requires_grad=True)
    >>> gradcheck(lambda a, b: ops.mul(a, b).sum(dim=0), (a, b))
    True
    """
    inputs = _as_inputs(inputs)
    diff = [i for i, t in enumerate(inputs) if isinstance(t, Tensor) and t.requires_grad]
    if not diff:
        raise ValueError("gradcheck expects at least one input tensor to require gradient, but none of them have requires_grad=True.")
    for i in diff:
        if inputs[i].dtype != numpy.float64:
            warnings.warn(f"Input #{i} requires gradient and is not a double precision floating point; "
                          "gradcheck may fail because finite differences are too coarse. Use float64 inputs.",
                          stacklevel=2)
    for i, t in enumerate(inputs):
        if isinstance(t, Tensor) and t.requires_grad and any(st == 0 and n > 1 for st, n in zip(t._data.strides, t.shape)):
            # Raised even with raise_exception=False, as torch: perturbing one element would move several.
            raise RuntimeError(
                f"The {i}th input has a dimension with stride 0. gradcheck only supports inputs that are "
                "non-overlapping to be able to compute the numerical gradients correctly. You should call "
                ".contiguous on the input before passing it to gradcheck.")
    prev = tls.grad_enabled
    tls.grad_enabled = True
    try:
        outputs = _as_outputs(fn(*inputs))
        # As torch: only outputs that require grad are checked; with none, every floating
        # output's numerical gradient must be zero.
        floating = _differentiable(outputs)
        out_idx = [j for j in floating if outputs[j].requires_grad]
        if not out_idx:
            numerical = _numerical(fn, inputs, diff, floating, eps)
            if any(numpy.any(n != 0) for rows in numerical for n in rows):
                return _fail("Numerical gradient for function expected to be zero", raise_exception)
            return True
        analytical = _analytical(outputs, inputs, diff, out_idx)
        numerical = _numerical(fn, inputs, diff, out_idx, eps)
        for k, j in enumerate(out_idx):
            for col in range(len(diff)):
                a, n = analytical[k][col], numerical[k][col]
                if not numpy.allclose(a, n, rtol=rtol, atol=atol, equal_nan=True):
                    # Shown as torch does: one row per input element, one column per output element.
                    with numpy.printoptions(precision=6, suppress=True, linewidth=120):
                        return _fail(f"Jacobian mismatch for output {j} with respect to input {col},\n"
                                     f"numerical:{n.T}\nanalytical:{a.T}\n", raise_exception)
        # torch's _test_backward_mul_by_grad_output: zero grad_outputs must give zero gradients.
        outs = [outputs[j] for j in out_idx]
        zeros = [_wrap(o.device.xp.zeros(o.shape, dtype=o.dtype), o.device) for o in outs]
        for g in _grad(outs, [inputs[i] for i in diff], zeros, allow_unused=True):
            if g is not None and numpy.any(_host(g) != 0):
                return _fail("backward not multiplied by grad_output", raise_exception)
    finally:
        tls.grad_enabled = prev
    return True


def gradgradcheck(fn: Callable[..., Any], inputs: Any, grad_outputs: Any = None, eps: float = 1e-6,
                  atol: float = 1e-5, rtol: float = 1e-3, raise_exception: bool = True) -> bool:
    """Check second derivatives: :func:`gradcheck` of ``(inputs, grad_outputs) ->
    grad(fn(*inputs), inputs, grad_outputs, create_graph=True)``.

    ``grad_outputs`` defaults to random float64 tensors (from a fixed private seed, so the
    engine's generator is not disturbed) that also require grad, as in torch.

    >>> from threadgrad import engine, ops
    >>> from threadgrad.engine.gradcheck import gradgradcheck
    >>> x = engine.tensor([0.3, -0.7], dtype=engine.float64, requires_grad=True)
    >>> gradgradcheck(lambda x: ops.mul(ops.sin(x), x), (x,))
    True
    """
    inputs = _as_inputs(inputs)
    diff = [i for i, t in enumerate(inputs) if isinstance(t, Tensor) and t.requires_grad]
    if not diff:
        raise ValueError("gradgradcheck expects at least one input tensor to require gradient.")
    outputs = _as_outputs(fn(*inputs))
    out_idx = [j for j in _differentiable(outputs) if outputs[j].requires_grad]
    if grad_outputs is None:
        rng = numpy.random.default_rng(0)
        grad_outputs = []
        for j in out_idx:
            o = outputs[j]
            g = Tensor(o.device.asarray(rng.standard_normal(o.shape).astype(o.dtype)), o.device, requires_grad=True)
            grad_outputs.append(g)
    else:
        grad_outputs = list(_as_inputs(grad_outputs))
        if len(grad_outputs) != len(out_idx):
            raise ValueError(f"gradgradcheck: got {len(grad_outputs)} grad_outputs for {len(out_idx)} differentiable outputs")
    n_in = len(inputs)
    del outputs

    def first_grads(*args: Any) -> tuple:
        ins, gos = args[:n_in], args[n_in:]
        outs = _as_outputs(fn(*ins))
        outs = [outs[j] for j in out_idx]
        gs = _grad(outs, [ins[i] for i in diff], list(gos), create_graph=True, allow_unused=True)
        return tuple(g for g in gs if g is not None)

    return gradcheck(first_grads, tuple(inputs) + tuple(grad_outputs), eps=eps, atol=atol, rtol=rtol,
                     raise_exception=raise_exception)
