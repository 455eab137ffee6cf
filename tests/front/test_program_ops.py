"""The small front-door functions the ported torch programs needed (threadgrad/_front.py:
``linspace``, ``mm``, ``tril``/``triu``, ``masked_fill``, ``multinomial``, ``contiguous``,
comparisons, ``set_default_device``, ``tg.accelerator``, formatting a 0-d tensor; and ``topk``,
now ops/order.py's), against torch where it is installed."""
from __future__ import annotations

import numpy as np
import pytest

import threadgrad as tg


def _torch():
    return pytest.importorskip("torch")


def test_linspace_and_mm_match_torch():
    torch = _torch()
    for start, end, steps in ((-np.pi, np.pi, 2000), (0, 1, 1), (2, -3, 7), (0.1, 0.7, 1000), (3, 4, 2), (0, 1, 0)):
        for ours, theirs in ((tg.float32, torch.float32), (tg.float64, torch.float64), (tg.int64, torch.int64)):
            np.testing.assert_array_equal(tg.linspace(start, end, steps, dtype=ours).numpy(),
                                          torch.linspace(start, end, steps, dtype=theirs).numpy())  # to the bit
    assert tg.linspace(0, 1, 3, dtype=tg.float64).dtype == tg.float64
    a, b = np.random.default_rng(0).standard_normal((2, 3, 4))
    np.testing.assert_allclose(tg.tensor(a).mm(tg.tensor(b.T)).numpy(), torch.tensor(a).mm(torch.tensor(b.T)).numpy())
    with pytest.raises(RuntimeError, match="mm"):
        tg.mm(tg.ones(2), tg.ones(2, 2))


@pytest.mark.parametrize("fn", ["tril", "triu"])
@pytest.mark.parametrize("diagonal", [-1, 0, 2])
def test_tril_triu_values_and_gradients_match_torch(fn, diagonal):
    torch = _torch()
    x = np.random.default_rng(1).standard_normal((2, 3, 4))
    w = np.random.default_rng(2).standard_normal((2, 3, 4))
    ours = tg.tensor(x, requires_grad=True)
    theirs = torch.tensor(x, requires_grad=True)
    out, ref = getattr(tg, fn)(ours, diagonal), getattr(torch, fn)(theirs, diagonal)
    np.testing.assert_array_equal(out.detach().numpy(), ref.detach().numpy())
    (out * tg.tensor(w)).sum().backward()
    (ref * torch.tensor(w)).sum().backward()
    np.testing.assert_array_equal(ours.grad.numpy(), theirs.grad.numpy())
    assert getattr(ours, fn)(diagonal).shape == (2, 3, 4)
    assert tg.autograd.gradcheck(lambda t: getattr(tg, fn)(t, diagonal), (tg.tensor(x, requires_grad=True),))


def test_masked_fill_causal_softmax_matches_torch():
    torch = _torch()
    x = np.random.default_rng(3).standard_normal((2, 5, 5))
    ours, theirs = tg.tensor(x, requires_grad=True), torch.tensor(x, requires_grad=True)
    mask_ours, mask_theirs = tg.tril(tg.ones(5, 5)) == 0, torch.tril(torch.ones(5, 5)) == 0
    out = tg.nn.functional.softmax(ours.masked_fill(mask_ours, float("-inf")), dim=-1)
    ref = torch.softmax(theirs.masked_fill(mask_theirs, float("-inf")), dim=-1)
    np.testing.assert_allclose(out.detach().numpy(), ref.detach().numpy(), rtol=1e-12)
    w = np.random.default_rng(4).standard_normal((2, 5, 5))
    (out * tg.tensor(w)).sum().backward()
    (ref * torch.tensor(w)).sum().backward()
    np.testing.assert_allclose(ours.grad.numpy(), theirs.grad.numpy(), rtol=1e-10, atol=1e-14)
    assert tg.masked_fill(tg.zeros(2), tg.tensor([True, False]), tg.tensor(3.0)).tolist() == [3.0, 0.0]
    with pytest.raises(RuntimeError, match="boolean"):
        tg.zeros(2).masked_fill(tg.ones(2), 1.0)


def test_multinomial_draws_from_the_distribution():
    tg.manual_seed(0)
    probs = tg.tensor([[0.0, 0.2, 0.8], [0.5, 0.5, 0.0]])
    draws = tg.multinomial(probs, 2000, replacement=True)
    assert draws.shape == (2, 2000) and draws.dtype == tg.int64
    counts = [np.bincount(row, minlength=3) / 2000 for row in draws.numpy()]
    assert counts[0][0] == 0 and counts[1][2] == 0
    np.testing.assert_allclose(counts[0], [0.0, 0.2, 0.8], atol=0.03)
    np.testing.assert_allclose(counts[1], [0.5, 0.5, 0.0], atol=0.04)
    without = tg.multinomial(tg.ones(6), 6)
    assert sorted(without.tolist()) == list(range(6))
    g = tg.Generator().manual_seed(5)
    first = tg.multinomial(tg.ones(10), 3, generator=g).tolist()
    assert first == tg.multinomial(tg.ones(10), 3, generator=tg.Generator().manual_seed(5)).tolist()
    with pytest.raises(RuntimeError, match="n_sample"):
        tg.multinomial(tg.ones(2), 3)


def test_comparisons_format_contiguous_and_devices():
    x = tg.tensor([1.0, 2.0, 3.0])
    assert x.eq(2.0).tolist() == [False, True, False] and tg.ne(x, 2.0).tolist() == [True, False, True]
    assert x.lt(2).tolist() == [True, False, False] and x.ge(2).tolist() == [False, True, True]
    assert x.gt(2).tolist() == [False, False, True] and tg.le(x, 2).tolist() == [True, True, False]
    assert f"{x.sum():.2f}" == "6.00" and f"{x}" == str(x)
    with pytest.raises(TypeError, match="unsupported format string"):
        f"{x:.2f}"
    assert x.contiguous() is x
    tg.set_default_device("cpu")
    tg.set_default_device(None)
    with pytest.raises(NotImplementedError, match="set_default_device"):
        tg.set_default_device("virtual:1")
    assert tg.accelerator.is_available() == tg.cuda.is_available()
    assert (tg.accelerator.current_accelerator() is None) == (not tg.cuda.is_available())


@pytest.mark.parametrize("dim,largest", [(-1, True), (0, False), (1, True)])
def test_topk_matches_torch_with_gradients(dim, largest):
    torch = _torch()
    x = np.random.default_rng(6).standard_normal((4, 6))
    ours, theirs = tg.tensor(x, requires_grad=True), torch.tensor(x, requires_grad=True)
    got, ref = ours.topk(3, dim=dim, largest=largest), torch.topk(theirs, 3, dim=dim, largest=largest)
    np.testing.assert_array_equal(got.values.detach().numpy(), ref.values.detach().numpy())
    np.testing.assert_array_equal(got.indices.numpy(), ref.indices.numpy())
    w = np.random.default_rng(7).standard_normal(tuple(ref.values.shape))
    (got[0] * tg.tensor(w)).sum().backward()
    (ref[0] * torch.tensor(w)).sum().backward()
    np.testing.assert_array_equal(ours.grad.numpy(), theirs.grad.numpy())
    with pytest.raises(RuntimeError, match="k out of range"):
        tg.topk(tg.ones(3), 4)
