"""A gradient whose complexness differs from its output's is refused, as torch's _make_grads
refuses it (torch/autograd/__init__.py), instead of a cast that drops the imaginary part."""
from __future__ import annotations

import warnings

import numpy as np
import pytest

from threadgrad import engine

MESSAGE = ("For complex Tensors, both grad_output and output are required to have the same dtype. "
           "Mismatch in dtype: grad_output[{i}] has a dtype of {g} and output[{i}] has a dtype of {o}.")


def _real_output():
    x = engine.tensor([1.0, 2.0], requires_grad=True)
    return x, x * 3.0


def _check_engine_still_works():
    x = engine.tensor([1.0, 2.0], requires_grad=True)
    (x * x).sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), [2.0, 4.0])


@pytest.mark.parametrize("api", ["backward", "grad"])
@pytest.mark.parametrize("as_tensor", [True, False])
def test_complex_gradient_of_a_real_output_raises_torchs_error(api, as_tensor):
    """torch's words (its ``_make_grads`` dtype check) with our dtype names; a complex array
    given in place of a tensor is refused the same way, before any cast."""
    x, y = _real_output()
    g = np.array([1 + 2j, 3 - 1j], dtype=np.complex64)
    g = engine.tensor(g) if as_tensor else g
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no ComplexWarning either: nothing is cast
        with pytest.raises(RuntimeError) as e:
            if api == "backward":
                engine.backward(y, g)
            else:
                engine.grad(y, x, grad_outputs=g)
    assert str(e.value) == MESSAGE.format(i=0, g="complex64", o="float32")
    assert x.grad is None
    _check_engine_still_works()


@pytest.mark.parametrize("api", ["backward", "grad"])
def test_real_gradient_of_a_complex_output_raises_torchs_error(api):
    """The other direction torch refuses too; the index is the output's position."""
    x = engine.tensor([1.0, 2.0], requires_grad=True)
    z = engine.tensor(np.array([1 + 1j, 2 - 1j], dtype=np.complex128), requires_grad=True)
    outs = [x * 2.0, z * 2.0]
    grads = [engine.ones(2), engine.tensor(np.array([1.0, 1.0]))]
    with pytest.raises(RuntimeError) as e:
        if api == "backward":
            engine.backward(outs, grads)
        else:
            engine.grad(outs, [x, z], grad_outputs=grads)
    assert str(e.value) == MESSAGE.format(i=1, g="float64", o="complex128")
    assert x.grad is None and z.grad is None
    _check_engine_still_works()


def test_same_kind_gradients_still_cast_to_the_output_dtype():
    """float64 for a float32 output, complex128 for a complex64 output: cast, as before."""
    x, y = _real_output()
    y.backward(engine.tensor(np.array([1.0, 0.5])))
    np.testing.assert_array_equal(x.grad.numpy(), np.array([3.0, 1.5], dtype=np.float32))
    z = engine.tensor(np.array([1 + 1j, 2 - 1j], dtype=np.complex64), requires_grad=True)
    (gz,) = engine.grad(z * 1.0, z, grad_outputs=engine.tensor(np.array([1 + 2j, 1j])))
    assert gz.dtype == np.complex64
    np.testing.assert_array_equal(gz.numpy(), np.array([1 + 2j, 1j], dtype=np.complex64))
