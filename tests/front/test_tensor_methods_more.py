"""Tensor methods torch programs call that are existing ops under torch's names: chunk, unbind,
narrow, index_select, repeat, unflatten (values and gradients against torch), new_zeros /
new_ones / new_empty / new_full / new_tensor, type_as, nelement, element_size, is_contiguous,
and the in-place random fills uniform_ / normal_ (torch's refusal on a leaf that requires
grad), the node names narrow and index_select record, and max / min's return types. Skipped
without torch."""
from __future__ import annotations

import numpy as np
import pytest

import threadgrad as tg

torch = pytest.importorskip("torch")

X0 = np.arange(24.0).reshape(2, 3, 4)
CASES = {
    "chunk even": lambda lib, x: x.chunk(2, 2),
    "chunk uneven": lambda lib, x: x.chunk(3, -1),
    "chunk fewer pieces": lambda lib, x: x.chunk(3, 1),
    "unbind": lambda lib, x: x.unbind(1),
    "torch.unbind": lambda lib, x: lib.unbind(x, 0),
    "narrow": lambda lib, x: x.narrow(2, 1, 2),
    "torch.narrow, negative start": lambda lib, x: lib.narrow(x, -1, -3, 2),
    "index_select": lambda lib, x: x.index_select(1, lib.tensor([2, 0, 2])),
    "torch.index_select, a 0-d index": lambda lib, x: lib.index_select(x, 2, lib.tensor(1)),
    "narrow, all of the dim": lambda lib, x: x.narrow(1, 0, 3),
    "repeat": lambda lib, x: x.repeat(2, 1, 3),
    "repeat, a new dim": lambda lib, x: x.repeat(2, 2, 1, 1),
    "repeat, a tuple": lambda lib, x: x.repeat((1, 2, 1)),
    "unflatten": lambda lib, x: x.unflatten(2, (2, 2)),
    "unflatten with -1": lambda lib, x: x.unflatten(-1, (2, -1)),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_method_matches_torch(name):
    got = []
    for lib in (torch, tg):
        x = lib.tensor(X0, requires_grad=True)
        out = CASES[name](lib, x)
        outs = out if isinstance(out, tuple) else (out,)
        sum((o * lib.tensor(np.arange(o.numel()).reshape(tuple(o.shape)) + 1.0)).sum() for o in outs).backward()
        got.append(([o.detach().numpy() for o in outs], x.grad.numpy()))
    assert len(got[0][0]) == len(got[1][0])
    for want, mine in zip(got[0][0], got[1][0]):
        np.testing.assert_array_equal(mine, want)
    np.testing.assert_array_equal(got[1][1], got[0][1])


@pytest.mark.parametrize("name", ["narrow", "torch.narrow, negative start", "narrow, all of the dim", "index_select",
                                  "torch.index_select, a 0-d index"])
def test_node_names_as_torch(name):
    # torch: narrow is a slice (SliceBackward0 even for all of the dim, where x[:] is an alias);
    # index_select records IndexSelectBackward0, not indexing's IndexBackward0
    theirs = CASES[name](torch, torch.tensor(X0, requires_grad=True)).grad_fn
    ours = CASES[name](tg, tg.tensor(X0, requires_grad=True)).grad_fn
    assert ours.name() == type(theirs).__name__


def test_index_select_saves_its_index_as_torch():
    # IndexSelectBackward0 saves the index: a second backward without retain_graph, or one after
    # the index changed in place, raises as torch's
    for lib in (torch, tg):
        x, index = lib.tensor(X0, requires_grad=True), lib.tensor([0, 2])
        y = lib.index_select(x, 1, index).sum()
        y.backward()
        with pytest.raises(RuntimeError, match="Specify retain_graph=True"):
            y.backward()
        y = x.index_select(1, index).sum()
        index.add_(0)
        with pytest.raises(RuntimeError, match="modified by an inplace operation"):
            y.backward()


@pytest.mark.parametrize("name", ["max", "min"])
def test_max_min_with_dim_return_torchs_types(name):
    got = [getattr(lib.tensor(X0), name)(1) for lib in (torch, tg)]
    assert type(got[1]).__name__ == type(got[0]).__name__ == name
    for field in ("values", "indices"):
        np.testing.assert_array_equal(getattr(got[1], field).numpy(), getattr(got[0], field).numpy())
    values, indices = getattr(tg, name)(tg.tensor(X0), dim=0, keepdim=True)  # still a pair
    assert values.shape == indices.shape == (1, 3, 4)


def test_new_tensors_and_facts_as_torch():
    for lib in (torch, tg):
        x = lib.tensor(X0)
        assert x.new_zeros(2, 3).shape == (2, 3) and x.new_zeros(2, 3).numpy().dtype == np.float64
        assert x.new_ones((2,)).tolist() == [1.0, 1.0] and x.new_full((2,), 7.0).tolist() == [7.0, 7.0]
        assert x.new_empty(4).shape == (4,) and x.new_tensor([1, 2]).numpy().dtype == np.float64
        assert x.new_zeros(2, requires_grad=True).requires_grad
        assert x.type_as(lib.tensor([1], dtype=lib.float32)).numpy().dtype == np.float32
        assert (x.nelement(), x.element_size(), x.is_contiguous(), x.transpose(0, 1).is_contiguous()) == \
            (24, 8, True, False)


def test_random_fills_as_torch():
    for lib in (torch, tg):
        w = lib.zeros(3, requires_grad=True)
        with pytest.raises(RuntimeError, match="a leaf Variable that requires grad is being used in an in-place "
                                               "operation"):
            w.uniform_()
        with lib.no_grad():
            w.uniform_(2, 3)
        assert 2 <= float(w.detach().min()) and float(w.detach().max()) < 3
        v = lib.empty(4000).normal_(5, 0.1)
        assert abs(v.mean().item() - 5) < 0.01 and abs(v.std().item() - 0.1) < 0.01
        # a non-leaf overwritten in place gets no gradient through what it held
        a = lib.ones(3, requires_grad=True)
        b = a * 2
        b.uniform_()
        b.sum().backward()
        assert a.grad.tolist() == [0.0, 0.0, 0.0]
