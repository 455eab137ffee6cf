"""The indexing and shape ops of ops/scatter.py and ops/rearrange.py (issue 31, item 4) against
torch 2.13: values and gradients at special values, errors, the in-place twins (on tensors and
on views), in-place ops through the new views, nonzero/argwhere/where(cond), and gather's
backward on repeated indices. Skipped without torch."""
from __future__ import annotations

import warnings

import numpy as np
import pytest

import threadgrad as tg

torch = pytest.importorskip("torch")

from index_parity_cases import SPECIAL  # noqa: E402 - needs torch
from test_special_values_parity import _check  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")

SPECIAL_CASES = [(op, case) for op in sorted(SPECIAL) for case in sorted(SPECIAL[op])]


@pytest.mark.parametrize("op, case", SPECIAL_CASES, ids=[c for _, c in SPECIAL_CASES])
def test_values_and_gradients_at_special_values(op, case):
    fn, inputs = SPECIAL[op][case]
    _check(fn, fn, *inputs)


def test_every_new_op_has_special_values():
    from index_parity_cases import NODE_CASES

    assert set(SPECIAL) == set(NODE_CASES)


# --- in-place twins ------------------------------------------------------------------------------

def _pair(values, grad=True):
    a = np.array(values, dtype=np.float64)
    return tg.tensor(a, requires_grad=grad), torch.tensor(a, requires_grad=grad)


def _name(fn):
    """A node's name, torch's ``torch::autograd::CopySlices`` as threadgrad's ``CopySlices``."""
    return fn.name().replace("torch::autograd::", "")


def _L(t):
    return tg if isinstance(t, tg.Tensor) else torch


INPLACE = {
    "index_add_": lambda y, s: y.index_add_(0, _L(y).tensor([3, 0, 3, 7]), s, alpha=-1.5),
    "index_copy_": lambda y, s: y.index_copy_(0, _L(y).tensor([3, 0, 6, 7]), s),
    "index_fill_": lambda y, s: y.index_fill_(1, _L(y).tensor([2, 0]), s[1, 2]),
    "index_fill_ number": lambda y, s: y.index_fill_(1, _L(y).tensor([2, 0]), 4.0),
    "masked_fill_": lambda y, s: y.masked_fill_(y > 1.0, s[0, 0]),
    "masked_fill_ number": lambda y, s: y.masked_fill_(y > 1.0, 0.25),
    "masked_scatter_": lambda y, s: y.masked_scatter_(y > 0.75, s),
    "scatter_": lambda y, s: y.scatter_(0, _L(y).tensor([[0, 3, 5], [1, 2, 4], [6, 7, 0], [5, 4, 3]]), s),
    "scatter_ value": lambda y, s: y.scatter_(1, _L(y).tensor([[2], [0], [1], [1], [0], [2], [2], [0]]), 0.5),
    "scatter_add_": lambda y, s: y.scatter_add_(0, _L(y).tensor([[0, 3, 5], [0, 3, 5], [4, 7, 5], [1, 1, 1]]), s),
    **{f"scatter_reduce_ {r}": (lambda y, s, r=r: y.scatter_reduce_(
        0, _L(y).tensor([[0, 3, 5], [0, 3, 5], [4, 7, 5], [1, 1, 1]]), s, r, include_self=r != "mean"))
       for r in ("sum", "prod", "mean", "amax", "amin")},
}
FINITE_ROWS = np.arange(24, dtype=np.float64).reshape(8, 3) / 10 - 1.1  # distinct: no ties for amax/amin
FINITE_SRC = np.arange(12, dtype=np.float64).reshape(4, 3) / 7 + 0.05


def _run_inplace(lib_pair, name, through_view):
    """The op on ``x * 1`` or, ``through_view``, on its view ``[1:]`` (x has one row more then)."""
    (xo, xt), (so, st) = lib_pair
    outs = []
    for x, s in ((xo, so), (xt, st)):
        y = x * 1.0
        target = y[1:] if through_view else y
        INPLACE[name](target, s)
        outs.append((y, target))
    return outs


@pytest.mark.parametrize("through_view", [False, True], ids=["tensor", "view"])
@pytest.mark.parametrize("name", sorted(INPLACE))
def test_inplace_twins_match_torch(name, through_view):
    """Values, node names and gradients of each in-place twin, on a non-leaf and on a view of
    one (the base then takes CopySlices, as torch's)."""
    rows = np.concatenate([FINITE_ROWS[:1] - 5.0, FINITE_ROWS]) if through_view else FINITE_ROWS
    pair = (_pair(rows), _pair(FINITE_SRC))
    (yo, to), (yt, tt) = _run_inplace(pair, name, through_view)
    np.testing.assert_allclose(yo.detach().numpy(), yt.detach().numpy(), rtol=1e-14)
    assert _name(yo.grad_fn) == _name(yt.grad_fn)
    assert _name(to.grad_fn) == _name(tt.grad_fn)
    w = np.arange(1, rows.size + 1, dtype=np.float64).reshape(rows.shape)
    (yo * tg.tensor(w)).sum().backward()
    (yt * torch.tensor(w)).sum().backward()
    for (a, b) in pair:
        if b.grad is None:
            assert a.grad is None
        else:
            np.testing.assert_allclose(a.grad.numpy(), b.grad.numpy(), rtol=1e-12, atol=1e-15)


def test_inplace_twins_bump_the_version_once_and_refuse_a_leaf():
    for name, fn in INPLACE.items():
        x = tg.tensor(FINITE_ROWS.copy())
        v = x.version
        fn(x, tg.tensor(FINITE_SRC))
        assert x.version == v + 1, name
        leaf = tg.tensor(FINITE_ROWS.copy(), requires_grad=True)
        with pytest.raises(RuntimeError, match="a leaf Variable that requires grad"):
            fn(leaf, tg.tensor(FINITE_SRC))
        with tg.no_grad():
            got = fn(leaf, tg.tensor(FINITE_SRC))
        want = torch.tensor(FINITE_ROWS.copy())
        INPLACE[name](want, torch.tensor(FINITE_SRC))
        assert got is leaf
        np.testing.assert_allclose(leaf.detach().numpy(), want.numpy(), rtol=1e-14)


def test_inplace_twin_saved_input_changed_raises():
    x = tg.tensor(FINITE_ROWS.copy(), requires_grad=True)
    y = x * 1.0
    z = y.exp()  # saves its output
    z.index_fill_(0, tg.tensor([1]), 0.0)
    zt = torch.tensor(FINITE_ROWS.copy(), requires_grad=True).mul(1.0).exp()
    zt.index_fill_(0, torch.tensor([1]), 0.0)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        z.sum().backward()
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        zt.sum().backward()


# --- in-place through the new views ---------------------------------------------------------------

VIEW_WRITES = {
    "diagonal mul_": lambda y: y.diagonal().mul_(3.0),
    "diagonal offset add_": lambda y: y.diagonal(1, 1, 0).add_(y.diagonal(1, 1, 0).clone() * 2),
    "diagonal of a 3-D view": lambda y: y.reshape(2, 4, 3).diagonal(0, 1, 2).mul_(-1.0),
    "movedim add_": lambda y: y.reshape(2, 4, 3).movedim(0, 2)[1].add_(1.5),
    "moveaxis mul_": lambda y: y.moveaxis(0, 1).mul_(y.moveaxis(0, 1).clone()),
    "swapaxes setitem": lambda y: y.swapaxes(0, 1).__setitem__((1, slice(2, 5)), 7.0),
    "swapdims index_fill_": lambda y: y.swapdims(0, 1).index_fill_(1, _L(y).tensor([0, 6]), 0.5),
    "tensor_split piece mul_": lambda y: y.tensor_split(3)[1].mul_(2.0),
    "hsplit piece masked_fill_": lambda y: y.hsplit([1])[1].masked_fill_(y.hsplit([1])[1] > 0, 0.0),
    "diagonal scatter_": lambda y: y.diagonal().scatter_(0, _L(y).tensor([2, 0]), _L(y).tensor([5.0, 6.0],
                                                                                               dtype=y.dtype)),
}


@pytest.mark.parametrize("name", sorted(VIEW_WRITES))
def test_inplace_through_new_views_matches_torch(name):
    """Writes through diagonal, movedim, swapaxes and tensor_split views reach the base, and
    the base's gradient is torch's (CopySlices)."""
    (xo, xt) = _pair(FINITE_ROWS)
    results = []
    for x in (xo, xt):
        y = x * 2.0
        VIEW_WRITES[name](y)
        results.append(y)
    yo, yt = results
    np.testing.assert_allclose(yo.detach().numpy(), yt.detach().numpy(), rtol=1e-14)
    assert _name(yo.grad_fn) == _name(yt.grad_fn)
    w = np.arange(1, 25, dtype=np.float64).reshape(8, 3)
    (yo * tg.tensor(w)).sum().backward()
    (yt * torch.tensor(w)).sum().backward()
    np.testing.assert_allclose(xo.grad.numpy(), xt.grad.numpy(), rtol=1e-12)


def test_new_views_are_views_as_torchs():
    x = tg.zeros(3, 4)
    for name, view in (("diagonal", x.diagonal()), ("movedim", x.movedim(0, 1)), ("swapaxes", x.swapaxes(0, 1)),
                       ("broadcast_to", x.broadcast_to(2, 3, 4)), ("tensor_split", x.tensor_split(2)[0]),
                       ("meshgrid", tg.meshgrid(x[0], x[1], indexing="ij")[0])):
        assert view._base is x, name
    x.diagonal().fill_(1.0)
    assert x.tolist() == torch.zeros(3, 4).fill_diagonal_(1.0).tolist()
    assert x.diagonal().version == x.version
    for copy in (x.flip(0), x.roll(1), x.rot90(), x.diag(), x.tile(2), x.repeat_interleave(2, 0)):
        assert copy._base is None


def test_writing_through_broadcast_to_raises_as_torch():
    with pytest.raises(RuntimeError):
        torch.zeros(3).broadcast_to(2, 3).add_(1.0)
    with pytest.raises(RuntimeError):
        tg.zeros(3).broadcast_to(2, 3).add_(1.0)


def test_a_stale_diagonal_takes_its_history_anew():
    """A diagonal view made before an in-place op on its base reads the base's new history."""
    grads = []
    for lib in (tg, torch):
        x = lib.tensor(FINITE_ROWS[:3].copy(), requires_grad=True)
        y = x * 1.0
        d = y.diagonal()
        y.mul_(y.detach() + 2.0)
        (d * lib.tensor([1.0, 2.0, 3.0], dtype=d.dtype)).sum().backward()
        grads.append(x.grad.numpy())
    np.testing.assert_allclose(*grads, rtol=1e-14)


# --- gather, nonzero, where(cond) ------------------------------------------------------------------

def test_gather_backward_accumulates_repeated_indices():
    """Each repeat of an index adds its gradient (torch's scatter_add in gather's backward)."""
    idx = [[0, 0, 0], [2, 0, 2]]
    grads = []
    for lib in (tg, torch):
        x = lib.tensor(FINITE_ROWS[:3].copy(), requires_grad=True)
        y = lib.gather(x, 0, lib.tensor(idx))
        (y * lib.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]], dtype=y.dtype)).sum().backward()
        grads.append(x.grad.numpy())
    np.testing.assert_array_equal(*grads)
    assert grads[0][0].tolist() == [1.0, 2.0 + 5.0, 3.0]


@pytest.mark.parametrize("values", [[[0.0, 1.0, 0.0], [2.0, 0.0, -1.0]], [0.0, 3.0, 0.0, 4.0], 5.0, 0.0, [],
                                    [[True, False], [True, True]]])
def test_nonzero_argwhere_and_where_of_a_condition_are_torchs(values):
    ours, theirs = tg.tensor(values), torch.tensor(values)
    for fn in (lambda lib, t: lib.nonzero(t), lambda lib, t: lib.argwhere(t), lambda lib, t: t.nonzero(),
               lambda lib, t: t.argwhere()):
        a, b = fn(tg, ours), fn(torch, theirs)
        assert a.dtype == np.int64 and a.shape == tuple(b.shape) and a.tolist() == b.tolist()
    for a, b in ((tg.nonzero(ours, as_tuple=True), torch.nonzero(theirs, as_tuple=True)),
                 (tg.where(ours != 0), torch.where(theirs != 0))):
        assert len(a) == len(b)
        for p, q in zip(a, b):
            assert p.shape == tuple(q.shape) and p.tolist() == q.tolist()


# --- errors as torch's -------------------------------------------------------------------------------

def _errors(fn):
    got = []
    for lib in (tg, torch):
        with pytest.raises(Exception) as info:
            fn(lib, lib.tensor(FINITE_ROWS[:3, :3].copy()))
        got.append(info)
    return got


ERRORS = {
    "scatter index dims": (lambda L, x: x.scatter(0, L.tensor([0, 1]), 1.0), "same number of dimensions"),
    "scatter index dtype": (lambda L, x: x.scatter(0, L.tensor([[0]], dtype=L.int16), 1.0), ""),
    "scatter out of bounds": (lambda L, x: x.scatter(0, L.tensor([[3]]), 1.0), "out of bounds"),
    "scatter_add out of bounds": (lambda L, x: x.scatter_add(0, L.tensor([[5]]), x), "out of bounds"),
    "scatter index too large": (lambda L, x: x.scatter(0, L.tensor([[0, 0, 0, 0]]), 1.0),
                                "Expected index [1, 4] to be no larger than self [3, 3] apart from dimension 0"),
    "scatter src too small": (lambda L, x: x.scatter(0, L.tensor([[0, 0, 0]]), L.ones(1, 2, dtype=L.float64)),
                              "and to be no larger size than src [1, 2]"),
    "scatter src dtype": (lambda L, x: x.scatter(0, L.tensor([[0]]), L.ones(1, 1)),
                          "Expected self.dtype to be equal to src.dtype"),
    "index_add out of bounds": (lambda L, x: x.index_add(0, L.tensor([3]), x[:1]), "out of bounds"),
    "index_copy out of bounds": (lambda L, x: x.index_copy(0, L.tensor([3]), x[:1]), "out of bounds"),
    "index_fill out of bounds": (lambda L, x: x.index_fill(0, L.tensor([-4]), 1.0), "out of bounds"),
    "index_copy int32": (lambda L, x: x.index_copy(0, L.tensor([0], dtype=L.int32), x[:1]),
                         "Expected a long tensor for index"),
    "index_fill int32": (lambda L, x: x.index_fill(0, L.tensor([0], dtype=L.int32), 1.0),
                         "Expected dtype int64 for index"),
    "index_copy count": (lambda L, x: x.index_copy(0, L.tensor([0]), x[:2]), "Number of indices (1) should be"),
    "index_copy dtype": (lambda L, x: x.index_copy(0, L.tensor([0]), L.ones(1, 3)),
                         "self and source expected to have the same dtype"),
    "index_add dtype": (lambda L, x: x.index_add(0, L.tensor([0]), L.ones(1, 3)), "must have the same scalar type"),
    "index_fill 2-d index": (lambda L, x: x.index_fill(0, L.tensor([[0]]), 1.0), "Index has to be a vector/scalar"),
    "take int32": (lambda L, x: x.take(L.tensor([1], dtype=L.int32)), "Expected a long tensor for index"),
    "masked_fill mask shape": (lambda L, x: x.masked_fill(L.ones(4, dtype=L.bool), 1.0),
                               "The size of tensor a (4) must match the size of tensor b (3)"),
    "masked_select mask dtype": (lambda L, x: x.masked_select(L.ones(3, dtype=L.int64)), "expected BoolTensor"),
    "masked_scatter dtype": (lambda L, x: x.masked_scatter(x > 0, L.ones(9)), "to have same dtypes"),
    "masked_fill_ larger mask": (lambda L, x: x.masked_fill_(L.ones(2, 3, 3, dtype=L.bool), 1.0),
                                 "doesn't match the broadcast shape"),
    "take_along_dim int32": (lambda L, x: x.take_along_dim(L.tensor([[0]], dtype=L.int32), 0),
                             "dtype of indices should be Long"),
    "diag_embed same dims": (lambda L, x: x.diag_embed(0, 1, 1), "diagonal dimensions cannot be identical"),
    "movedim out of range": (lambda L, x: x.movedim(3, 0), "Dimension out of range"),
    "meshgrid dtype": (lambda L, x: L.meshgrid(x[0], L.ones(2), indexing="ij"), "same dtype"),
    "repeat_interleave negative counts": (lambda L, x: x.repeat_interleave(L.tensor([-1, 1, 1]), 0),
                                          "repeats can not be negative"),
    "repeat_interleave 2-d counts": (lambda L, x: x.repeat_interleave(L.ones(2, 2, dtype=L.int64)),
                                     "repeats must be 0-dim or 1-dim tensor"),
    "tensor_split 0-d": (lambda L, x: x[0, 0].tensor_split(1), "expected at least a 1-dimensional tensor"),
    "dsplit 2-d": (lambda L, x: x.dsplit(1), "requires a tensor with at least 3 dimension"),
    "rot90 1-d": (lambda L, x: x[0].rot90(), "expected total dims >= 2"),
    "scatter_add dtype": (lambda L, x: x.scatter_add(0, L.tensor([[0]]), L.ones(1, 1, dtype=L.float32)),
                          "dtype"),
    "scatter_reduce reduce": (lambda L, x: x.scatter_reduce(0, L.tensor([[0]]), x, "foo"),
                              "reduce argument must be either sum, prod, mean, amax or amin, got foo"),
    "index_add count": (lambda L, x: x.index_add(0, L.tensor([0]), L.ones(2, 3, dtype=L.float64)),
                        "Number of indices (1) should be equal to source.size(dim): (2), for dim: 0"),
    "index_add shape": (lambda L, x: x.index_add(0, L.tensor([0]), L.ones(1, 2, dtype=L.float64)),
                        "source tensor shape must match self tensor shape"),
    "index_add index": (lambda L, x: x.index_add(0, L.tensor([[0]]), x), "Index is supposed to be a vector"),
    "index_fill value": (lambda L, x: x.index_fill(0, L.tensor([0]), L.ones(2, dtype=L.float64)),
                         "0-dimensional value tensor"),
    "masked_fill mask dtype": (lambda L, x: x.masked_fill(L.ones(3, dtype=L.int64), 1.0), "boolean masks"),
    "masked_scatter short source": (lambda L, x: x.masked_scatter(x > -5, L.ones(2, dtype=L.float64)),
                                    "Number of elements of source < number of ones in mask"),
    "take out of range": (lambda L, x: x.take(L.tensor([9])), "out of range"),
    "take_along_dim dims": (lambda L, x: x.take_along_dim(L.tensor([0]), 1), "same number of dimensions"),
    "flip duplicates": (lambda L, x: x.flip(0, 0), "dim 0 appears multiple times in the list of dims"),
    "fliplr 1-d": (lambda L, x: x[0].fliplr(), "Input must be >= 2-d."),
    "roll align": (lambda L, x: x.roll((1, 2), 0), "shifts and dimensions must align"),
    "rot90 same dims": (lambda L, x: x.rot90(1, (1, 1)), "expected rotation dims to be different"),
    "rot90 three dims": (lambda L, x: x.rot90(1, (0, 1, 0)), "expected total rotation dims == 2"),
    "movedim counts": (lambda L, x: x.movedim((0, 1), (1,)), "movedim: Invalid source or destination dims"),
    "movedim repeats": (lambda L, x: x.movedim((0, 0), (1, 0)), "movedim: repeated dim in `source`"),
    "diagonal same dims": (lambda L, x: x.diagonal(0, 1, 1), "diagonal dimensions cannot be identical"),
    "diag 3-d": (lambda L, x: x.reshape(1, 3, 3).diag(), "diag(): Supports 1D or 2D tensors"),
    "trace 1-d": (lambda L, x: x[0].trace(), "trace: expected a matrix"),
    "repeat_interleave sizes": (lambda L, x: x.repeat_interleave(L.tensor([1, 2]), 0),
                                "repeats must have the same size as input along dim"),
    "repeat_interleave negative": (lambda L, x: x.repeat_interleave(-1), "must be non-negative"),
    "tensor_split zero": (lambda L, x: x.tensor_split(0), "number of sections must be larger than 0"),
    "hsplit divisible": (lambda L, x: x.hsplit(2), "is not divisible by the split_size"),
    "vsplit 1-d": (lambda L, x: x[0].vsplit(1), "requires a tensor with at least 2 dimension"),
    "meshgrid indexing": (lambda L, x: L.meshgrid(x[0], x[1], indexing="ab"), 'indexing must be one of "xy" or'),
    "meshgrid 2-d": (lambda L, x: L.meshgrid(x, x[0], indexing="ij"), "Expected 0D or 1D tensor"),
    "cartesian_prod 2-d": (lambda L, x: L.cartesian_prod(x, x[0]), "Expect a 1D vector"),
    "block_diag 3-d": (lambda L, x: L.block_diag(x.reshape(1, 3, 3)), "Input tensors must have 2 or fewer"),
    "broadcast_tensors": (lambda L, x: L.broadcast_tensors(x, L.ones(2, dtype=L.float64)),
                          "must match the size of tensor"),
}


@pytest.mark.parametrize("name", sorted(ERRORS))
def test_errors_are_torchs(name):
    fn, words = ERRORS[name]
    ours, theirs = _errors(fn)
    assert ours.type is theirs.type, (ours.value, theirs.value)
    assert words in str(ours.value) and words in str(theirs.value), (ours.value, theirs.value)


# --- warnings and the derivative torch does not have -------------------------------------------------

def test_scatter_with_reduce_warns_and_has_no_derivative_as_torch():
    for lib in (tg, torch):
        x = lib.tensor(FINITE_ROWS[:2].copy(), requires_grad=True)
        with pytest.warns(UserWarning, match="The reduce argument of torch.scatter with Tensor src is deprecated"):
            y = (x * 1.0).scatter(0, lib.tensor([[1, 0, 1]]), x[:1] * 2.0, reduce="multiply")
        assert y.grad_fn.name() == "torch::autograd::NotImplemented"
        with pytest.raises(RuntimeError, match="not implemented"):
            y.sum().backward()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        tg.zeros(2, 3).scatter(0, tg.tensor([[1, 0, 1]]), 2.0, reduce="add")  # a value: no warning, as torch


def test_meshgrid_without_indexing_warns_as_torch():
    for lib in (tg, torch):
        with pytest.warns(UserWarning, match="it will be required to pass the indexing argument"):
            a, b = lib.meshgrid(lib.arange(3), lib.arange(2))
        assert tuple(a.shape) == (3, 2) and b.tolist() == [[0, 1]] * 3


def test_scatter_reduce_prod_double_backward_with_two_zeros_raises():
    x = tg.tensor([1.0, 2.0], requires_grad=True)
    s = tg.tensor([0.0, 0.0, 3.0], requires_grad=True)
    y = tg.scatter_reduce(x, 0, tg.tensor([0, 0, 1]), s, "prod")
    with pytest.raises(RuntimeError, match="Double backward is unsupported"):
        tg.autograd.grad(y.sum(), (x, s), create_graph=True)
    gx, gs = tg.autograd.grad(tg.scatter_reduce(x, 0, tg.tensor([0, 0, 1]), s, "prod").sum(), (x, s))
    xt, st = torch.tensor([1.0, 2.0], requires_grad=True), torch.tensor([0.0, 0.0, 3.0], requires_grad=True)
    want = torch.autograd.grad(torch.scatter_reduce(xt, 0, torch.tensor([0, 0, 1]), st, "prod").sum(), (xt, st))
    assert gx.tolist() == want[0].tolist() and gs.tolist() == want[1].tolist()


def test_functional_forms_and_methods_exist_as_in_torch():
    names = ["masked_select", "masked_scatter", "masked_fill", "index_add", "index_copy", "index_fill", "scatter",
             "scatter_add", "scatter_reduce", "take", "take_along_dim", "nonzero", "argwhere", "repeat_interleave",
             "tile", "tensor_split", "hsplit", "vsplit", "dsplit", "flip", "fliplr", "flipud", "roll", "rot90",
             "movedim", "moveaxis", "swapaxes", "swapdims", "diag", "diagonal", "diag_embed", "trace",
             "broadcast_to"]
    x = tg.zeros(2)
    for name in names + ["broadcast_tensors", "meshgrid", "cartesian_prod", "block_diag", "t", "unflatten", "narrow",
                         "detach", "fill_", "zero_"]:
        assert hasattr(tg, name) and hasattr(torch, name), name
    for name in names + ["index_add_", "index_copy_", "index_fill_", "masked_fill_", "masked_scatter_", "scatter_",
                         "scatter_add_", "scatter_reduce_"]:
        assert hasattr(x, name) and hasattr(torch.zeros(2), name), name
    a = np.arange(6.0).reshape(2, 3)
    assert tg.t(tg.tensor(a)).tolist() == torch.t(torch.tensor(a)).tolist()
    assert tg.unflatten(tg.tensor(a), 1, (3, 1)).shape == tuple(torch.unflatten(torch.tensor(a), 1, (3, 1)).shape)


# --- ported from torch's suite (semantics only): odd layouts, empty tensors, edge arguments -------

def _both_ways(fn, *arrays):
    """``fn`` on each library's float64 leaves: values and gradients equal."""
    got = []
    for lib in (tg, torch):
        leaves = [lib.tensor(a, requires_grad=True) for a in arrays]
        out = fn(lib, *leaves)
        outs = out if isinstance(out, (tuple, list)) else (out,)
        total = sum(((o * lib.tensor(np.arange(1.0, o.numel() + 1).reshape(tuple(o.shape)))).sum() for o in outs
                     if o.requires_grad), lib.tensor(0.0, dtype=lib.float64))
        if total.requires_grad:
            total.backward()
        got.append(([o.detach().numpy() for o in outs],
                    [a.grad.numpy() if a.grad is not None else None for a in leaves]))
    (vo, go), (vt, gt) = got
    for a, b in zip(vo, vt):
        assert a.shape == b.shape
        np.testing.assert_allclose(a, b, rtol=1e-13)
    for a, b in zip(go, gt):
        assert (a is None) == (b is None)
        if a is not None:
            np.testing.assert_allclose(a, b, rtol=1e-13)


A34 = np.arange(12.0).reshape(3, 4) / 3 - 1.7
A234 = np.arange(24.0).reshape(2, 3, 4) / 5 - 2.3

PORTED = {
    # test_shape_ops.py: test_flip (several dims, a transposed input), test_flip_empty_tensor
    "flip transposed": (lambda L, x: x.transpose(0, 2).flip(0, 2), A234),
    "flip empty": (lambda L, x: x[:, :0].flip(1), A34),
    # test_shape_ops.py: test_rot90 (k = 4 and -4 are the identity; negative k; 3-D)
    "rot90 k=4": (lambda L, x: x.rot90(4), A34),
    "rot90 k=-3 dims (2, 1)": (lambda L, x: x.rot90(-3, (2, 1)), A234),
    # test_shape_ops.py: test_diagonal, test_diagonal_multidim (offsets past the end: empty)
    "diagonal past the end": (lambda L, x: x.diagonal(7), A34),
    "diagonal of a transposed view": (lambda L, x: x.transpose(0, 1).diagonal(1, 0, 2), A234),
    # test_torch.py: test_roll (shifts larger than the dim, negative dims)
    "roll large shifts": (lambda L, x: x.roll((7, -9), (-1, 0)), A34),
    # test_torch.py: test_tensor_split_* (indices past the end, repeated, decreasing)
    "tensor_split odd indices": (lambda L, x: x.tensor_split([2, 2, 1, 9], 1), A34),
    "tensor_split more sections than elements": (lambda L, x: x.tensor_split(5, 0), A34),
    # test_scatter_gather_ops.py: test_scatter_reduce_non_unique_index (every src to one place)
    "scatter_reduce one place": (lambda L, x: x.scatter_reduce(0, L.tensor([[1, 1, 1, 1]] * 2), x[:2] * 0.5, "mean",
                                                               include_self=False), A34),
    # test_torch.py: test_index_add (a non-contiguous input and source), test_index_copy
    "index_add transposed": (lambda L, x: x.T.index_add(0, L.tensor([2, 0, 2, 1]), x.T[[3, 2, 1, 0]]), A34),
    "index_copy transposed": (lambda L, x: x.T.index_copy(0, L.tensor([3, 1]), x.T[:2] * 3), A34),
    # test_torch.py: test_masked_scatter (the source's leftover elements get no gradient)
    "masked_scatter leftovers": (lambda L, x: x[0].masked_scatter(x[0] > 0, x.reshape(-1)), A34),
    # test_torch.py: test_take (an empty index; a transposed input)
    "take empty index": (lambda L, x: x.take(L.tensor([], dtype=L.int64)), A34),
    "take transposed": (lambda L, x: x.T.take(L.tensor([[0, 1], [11, 2]])), A34),
    # test_torch.py: test_repeat_interleave (zero repeats; output_size)
    "repeat_interleave zeros": (lambda L, x: x.repeat_interleave(L.tensor([0, 0, 0]), 0), A34),
    "repeat_interleave output_size": (lambda L, x: x.repeat_interleave(L.tensor([1, 2, 1, 0]), 1, output_size=4),
                                      A34),
    # test_shape_ops.py: test_movedim (negative and many dims)
    "movedim many": (lambda L, x: x.movedim((-1, 0, 1), (0, 1, 2)), A234),
    # test_torch.py: test_tile (zero reps)
    "tile zero": (lambda L, x: x.tile(0, 2), A34),
    # test_torch.py: test_block_diag (empty blocks)
    "block_diag empty": (lambda L, x: L.block_diag(x[:0], x[:2, :1]), A34),
    # test_torch.py: test_diag_embed (a batch, dims given in either order)
    "diag_embed dims reversed": (lambda L, x: x.diag_embed(-1, 2, 0), A234),
}


@pytest.mark.parametrize("name", sorted(PORTED))
def test_ported_cases_match_torch(name):
    fn, data = PORTED[name]
    _both_ways(fn, data)


@pytest.mark.parametrize("reduce", ["sum", "prod", "mean", "amax", "amin"])
def test_scatters_of_a_0d_input_are_torchs(reduce):
    """A 0-d input, index and src act as 1-element 1-D ones, as in torch (same nodes)."""
    for include_self in (True, False):
        _both_ways(lambda L, x, s: x.scatter_reduce(0, L.tensor(0), s, reduce, include_self=include_self),
                   np.array(1.5), np.array(-2.5))
    _both_ways(lambda L, x, s: (x.scatter(0, L.tensor(0), s), x.scatter_add(-1, L.tensor([0]), s.reshape(1)),
                                x.scatter(0, L.tensor(0), 3.0) * s), np.array(1.5), np.array(-2.5))
    x, s = tg.tensor(1.5, requires_grad=True), tg.tensor(2.0, requires_grad=True)
    assert x.scatter_reduce(0, tg.tensor(0), s, reduce).grad_fn.name() == "ScatterReduceBackward0"


def test_a_cpu_scalar_value_fills_a_tensor_on_another_device():
    """As torch takes a 0-d cpu value for a cuda tensor: it moves, its gradient comes back."""
    x = tg.tensor([1.0, 2.0, 3.0], device="virtual:1", requires_grad=True)
    v = tg.tensor(5.0, requires_grad=True)
    mask = tg.tensor([True, False, True], device="virtual:1")
    y = x.masked_fill(mask, v) + x.index_fill(0, tg.tensor([1], device="virtual:1"), v)
    y.sum().backward()
    assert y.device is x.device and y.tolist() == [6.0, 7.0, 8.0]
    assert v.grad.device is v.device and v.grad.item() == 3.0
    with pytest.raises(RuntimeError, match="same device"):
        x.masked_fill(mask, tg.tensor(5.0, device="virtual:2"))
