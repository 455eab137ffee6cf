"""``Tensor.data`` is torch's (Note [Tensor.data] in engine/tensor.py): each read is a new
tensor over the same array, outside autograd, with a version counter of its own; ``p.data = t``
makes ``p`` share ``t``'s array. torch is the oracle wherever it is installed: each behaviour
below is checked on both libraries, errors by their message fragments."""
from __future__ import annotations

import numpy as np
import pytest

import threadgrad as tg
from threadgrad import engine, ops


def _torch():
    return pytest.importorskip("torch")


def _facts(d) -> tuple:
    """What a ``.data`` read is, in terms both libraries answer."""
    version = d._version if hasattr(d, "_version") else d.version
    return (d.requires_grad, d.is_leaf, d.grad_fn is None, d._base is None, version)


# --- reading -----------------------------------------------------------------------------------

def test_reading_data_gives_a_new_detached_tensor_sharing_the_array():
    t = engine.tensor([1.0, 2.0], dtype=np.float64, requires_grad=True)
    d = t.data
    assert type(d) is engine.Tensor and d is not t and t.data is not d  # a new tensor per read
    assert d._data is t._data  # the same array: no copy
    assert d.device is t.device and d.dtype == t.dtype and d.shape == t.shape
    assert _facts(d) == (False, True, True, True, 0)
    assert d._vc is not t._vc  # its own version counter (detach() shares t's; .data does not)


@pytest.mark.parametrize("kind", ["leaf", "leaf_no_grad", "non_leaf", "view", "bumped"])
def test_what_a_data_read_is_matches_torch(kind):
    torch = _torch()

    def make(lib, tensor):
        x = tensor([1.0, 2.0, 3.0], requires_grad=kind != "leaf_no_grad")
        if kind == "non_leaf":
            return x * 2
        if kind == "view":
            return x[0:2]
        if kind == "bumped":
            x = tensor([1.0, 2.0, 3.0])
            x.add_(1.0)
            x.add_(1.0)
        return x

    ours = make(tg, tg.tensor).data
    theirs = make(torch, torch.tensor).data
    assert _facts(ours) == _facts(theirs)
    assert _facts(ours) == (False, True, True, True, 0)


def test_data_of_a_parameter_is_a_plain_tensor_as_in_torch():
    torch = _torch()
    p = tg.nn.Parameter(tg.ones(2))
    assert type(p.data) is engine.Tensor and p.data._data is p._data
    assert type(torch.nn.Parameter(torch.ones(2)).data) is torch.Tensor


def test_data_of_a_virtual_device_tensor_stays_on_its_device():
    t = engine.tensor([1.0, 2.0], device="virtual:1", requires_grad=True)
    d = t.data
    assert d.device is t.device and d._data is t._data
    d.mul_(3.0)
    assert t.tolist() == [3.0, 6.0] and t.version == 0


def test_in_place_ops_on_data_write_the_array_unseen_by_autograd_as_in_torch():
    """An in-place op through ``.data`` on a leaf that requires grad is allowed under grad mode,
    bumps only the alias's counter, and a graph that saved the tensor backprops with the new
    values without a version error: torch's ``variable_data()``."""
    torch = _torch()
    results = []
    for lib in (tg, torch):
        x = lib.tensor([1.0, 2.0], dtype=lib.float64, requires_grad=True)
        y = (x * x).sum()  # saves x
        d = x.data
        d.add_(1.0)
        d.mul_(2.0)
        versions = (x._version if lib is torch else x.version, d._version if lib is torch else d.version)
        y.backward()
        results.append((x.tolist(), versions, x.grad.tolist(), x.requires_grad, x.is_leaf))
    assert results[0] == results[1]
    assert results[0] == ([4.0, 6.0], (0, 2), [8.0, 12.0], True, True)


def test_the_alias_and_the_tensor_count_versions_apart_as_in_torch():
    torch = _torch()
    results = []
    for lib in (tg, torch):
        ver = (lambda t: t._version) if lib is torch else (lambda t: t.version)
        a = lib.ones(3)
        b = a.data
        b.add_(1)
        row = [ver(a), ver(b)]
        a.add_(1)
        row += [ver(a), ver(b), a.tolist()]
        results.append(row)
    assert results[0] == results[1] == [0, 1, 1, 1, [3.0, 3.0, 3.0]]


def test_data_of_a_view_writes_the_base_and_is_not_a_view_as_in_torch():
    torch = _torch()
    results = []
    for lib in (tg, torch):
        ver = (lambda t: t._version) if lib is torch else (lambda t: t.version)
        b = lib.ones(4)
        v = b[:2]
        d = v.data
        d.add_(5)
        results.append((b.tolist(), ver(b), ver(v), d._base is None, d.is_leaf))
    assert results[0] == results[1] == ([6.0, 6.0, 1.0, 1.0], 0, 0, True, True)


def test_every_in_place_method_through_data_reaches_the_tensor():
    x = engine.tensor([1.0, 2.0, 3.0], requires_grad=True)
    x.data.fill_(2.0)
    x.data.mul_(3.0)
    x.data.sub_(engine.tensor([1.0, 1.0, 1.0]))
    x.data.div_(5.0)
    assert x.tolist() == [1.0, 1.0, 1.0]
    x.data.copy_(engine.tensor([4.0, 5.0, 6.0]))
    x.data[0] = 7.0
    assert x.tolist() == [7.0, 5.0, 6.0]
    x.data.zero_()
    assert x.tolist() == [0.0, 0.0, 0.0] and x.version == 0 and x.is_leaf and x.requires_grad


def test_requires_grad_on_the_alias_stays_on_the_alias_as_in_torch():
    torch = _torch()
    for lib in (tg, torch):
        x = lib.ones(2)
        d = x.data
        d.requires_grad_()
        assert d.requires_grad and not x.requires_grad


def test_numpy_and_clone_of_data_as_in_torch():
    """``x.data.numpy()`` works on a tensor that requires grad (the alias does not), and
    ``x.data.clone()`` is a copy outside the graph, in both libraries."""
    torch = _torch()
    for lib in (tg, torch):
        x = lib.tensor([1.0, 2.0], requires_grad=True)
        a = x.data.numpy()
        assert isinstance(a, np.ndarray) and a.tolist() == [1.0, 2.0]
        a[0] = 9.0  # a cpu tensor's numpy() shares its memory, in both
        c = x.data.clone()
        c.add_(1.0)
        assert x.tolist() == [9.0, 2.0] and c.tolist() == [10.0, 3.0]
        assert not c.requires_grad and c.grad_fn is None


# --- assigning ---------------------------------------------------------------------------------

def test_assigning_a_tensor_shares_its_array_and_keeps_the_tensor_as_in_torch():
    """``p.data = t``: the same object, now over ``t``'s array (another shape and dtype are
    fine), with its own history, requires_grad and version counter; writes to either show in
    the other, but bump only the writer's counter (torch's set_data)."""
    torch = _torch()
    results = []
    for lib in (tg, torch):
        ver = (lambda t: t._version) if lib is torch else (lambda t: t.version)
        p = lib.tensor([1.0, 2.0], requires_grad=True)
        ident = id(p)
        t = lib.zeros(2, 3, dtype=lib.float64)
        p.data = t
        t.add_(1)
        results.append((id(p) == ident, tuple(p.shape), str(p.dtype).replace("torch.", ""), p.tolist(),
                        p.requires_grad, p.is_leaf, ver(p), ver(t)))
    assert results[0] == results[1]
    assert results[0] == (True, (2, 3), "float64", [[1.0] * 3] * 2, True, True, 0, 1)


def test_assigning_keeps_the_version_counter_and_the_views_of_the_tensor_as_in_torch():
    """Port of torch's test_autograd.py TestAutograd.test_version_counter, the ``x.data = y`` part:
    the assignment preserves ``x``'s version counter, still shared with its view ``xz``."""
    torch = _torch()
    for lib in (tg, torch):
        ver = (lambda t: t._version) if lib is torch else (lambda t: t.version)
        x = lib.randn(1, 2)
        x.add_(1).add_(1)
        xz = x[:]
        xz.add_(1)
        saved = ver(x)
        x.data = lib.randn(2, 3)
        assert ver(x) == saved
        x.add_(1)
        assert ver(x) > saved and ver(x) == ver(xz)
        xz.add_(1)
        assert ver(x) == ver(xz)


def test_assigning_to_a_non_leaf_keeps_its_grad_fn_as_in_torch():
    torch = _torch()
    for lib in (tg, torch):
        x = lib.ones(2, requires_grad=True)
        y = x * 2
        fn = y.grad_fn
        y.data = lib.zeros(2)
        assert y.grad_fn is fn and y.tolist() == [0.0, 0.0]


def test_an_integer_tensor_may_take_integer_data_unless_it_requires_grad_as_in_torch():
    torch = _torch()
    for lib in (tg, torch):
        p = lib.ones(2)
        p.data = lib.zeros(3, dtype=lib.int64)
        assert p.tolist() == [0, 0, 0]
        q = lib.ones(2, requires_grad=True)
        with pytest.raises(RuntimeError, match="data set to a tensor that requires gradients must be floating "
                                               "point or complex dtype"):
            q.data = lib.zeros(2, dtype=lib.int64)
        assert q.tolist() == [1.0, 1.0]


@pytest.mark.parametrize("bad, name", [([1.0, 2.0], "list"), (3.0, "float"), (None, "NoneType"),
                                       (np.ones(2), "numpy.ndarray"), (np.float64(1.0), "numpy.float64")])
def test_assigning_a_non_tensor_raises_torchs_type_error_and_changes_nothing(bad, name):
    p = engine.tensor([1.0, 2.0], requires_grad=True)
    with pytest.raises(TypeError, match=f"^Variable data has to be a tensor, but got {name}$"):
        p.data = bad
    assert type(p._data) is np.ndarray and p.tolist() == [1.0, 2.0]
    ops.sum(p).backward()
    assert p.grad.tolist() == [1.0, 1.0]
    torch = pytest.importorskip("torch")
    with pytest.raises(TypeError, match=f"^Variable data has to be a tensor, but got {name}$"):
        torch.ones(2).data = bad


def test_deleting_data_raises_torchs_error():
    torch = _torch()
    for lib in (tg, torch):
        x = lib.ones(2, requires_grad=True)
        with pytest.raises(RuntimeError, match="Deleting tensor data is not allowed. Delete tensor instead!"):
            del x.data
        assert x.tolist() == [1.0, 1.0]


def test_assigning_a_tensor_of_another_device_is_refused():
    """threadgrad's own rule (torch lets one dense device take another's storage): a tensor's
    device is fixed, its AccumulateGrad and .grad were set up for it; move it with .to()."""
    p = engine.tensor([1.0, 2.0], requires_grad=True)
    q = engine.tensor([1.0, 2.0], device="virtual:1")
    with pytest.raises(RuntimeError, match="data set to a tensor on virtual:1, but this tensor is on cpu"):
        p.data = q
    with pytest.raises(RuntimeError, match="data set to a tensor on cpu, but this tensor is on virtual:1"):
        q.data = p
    assert p.device.type == "cpu" and q.device.index == 1


# --- the SGD idioms ----------------------------------------------------------------------------

@pytest.mark.parametrize("idiom", ["add_alpha", "isub", "assign"])
def test_sgd_idioms_on_data_match_torch(idiom):
    """torch's hand-written steps: ``p.data.add_(g, alpha=-lr)``, ``p.data -= lr * p.grad`` (an
    in-place sub on the alias, then the assignment of the same array back) and ``p.data =
    p.data - lr * p.grad``; values, versions and leafness as in torch, and p still a leaf."""
    torch = _torch()
    a0 = np.array([0.5, -1.0, 2.0])
    got = []
    for lib in (tg, torch):
        ver = (lambda t: t._version) if lib is torch else (lambda t: t.version)
        p = lib.tensor(a0, requires_grad=True)
        for _ in range(3):
            (lib.tanh(p) * p).sum().backward()
            if idiom == "add_alpha":
                p.data.add_(p.grad, alpha=-0.3)
            elif idiom == "isub":
                p.data -= 0.3 * p.grad
            else:
                p.data = p.data - 0.3 * p.grad
            p.grad = None
        got.append((p.detach().numpy().copy(), ver(p), p.is_leaf, p.requires_grad, p.grad_fn is None))
    np.testing.assert_allclose(got[0][0], got[1][0], rtol=1e-12)
    assert got[0][1:] == got[1][1:] == (0, True, True, True)


def test_data_assignment_under_a_saved_graph_matches_torch():
    """A graph saved p; p.data changes; backward uses the new values without an error, in both."""
    torch = _torch()
    a0 = np.array([0.5, -1.0, 2.0])
    p = engine.tensor(a0, dtype=np.float64, requires_grad=True)
    tp = torch.tensor(a0, requires_grad=True)
    y = ops.sum(ops.mul(p, p))
    ty = (tp * tp).sum()
    p.data = p.data * 2.0
    tp.data = tp.data * 2.0
    y.backward()
    ty.backward()
    np.testing.assert_allclose(p.grad.numpy(), tp.grad.numpy(), rtol=1e-12)


def test_regression_examples_manual_sgd_loop_matches_torch():
    """pytorch/examples' regression/main.py, its update line unchanged:
    ``for param in fc.parameters(): param.data.add_(-0.1 * param.grad)``; same weights and
    batches on both libraries, the loss of every step and the final weights must agree."""
    torch = _torch()
    rng = np.random.default_rng(0)
    w_target, b_target = rng.standard_normal((4, 1)) * 5, float(rng.standard_normal() * 5)

    def batch():
        x = rng.standard_normal(32)
        feats = np.stack([x ** i for i in range(1, 5)], 1).astype(np.float32)
        return feats, (feats @ w_target + b_target).astype(np.float32)

    fc = tg.nn.Linear(4, 1)
    tfc = torch.nn.Linear(4, 1)
    versions = (fc.weight.version, tfc.weight._version)  # (its initialization's in-place draw)
    fc.weight.data = tg.tensor(tfc.weight.detach().numpy().copy())  # torch's p.data = t, too
    fc.bias.data.copy_(tg.tensor(tfc.bias.detach().numpy()))
    losses, tlosses = [], []
    for _ in range(40):
        bx, by = batch()
        for lib, model, out in ((tg, fc, losses), (torch, tfc, tlosses)):
            model.zero_grad()
            output = lib.nn.functional.smooth_l1_loss(model(lib.tensor(bx)), lib.tensor(by))
            out.append(output.item())
            output.backward()
            for param in model.parameters():
                param.data.add_(-0.1 * param.grad)
    np.testing.assert_allclose(losses, tlosses, rtol=1e-4)
    assert losses[-1] < losses[0]
    np.testing.assert_allclose(fc.weight.detach().numpy(), tfc.weight.detach().numpy(), rtol=1e-4, atol=1e-5)
    assert (fc.weight.version, tfc.weight._version) == versions  # no step moved them
    assert fc.weight.is_leaf and fc.weight.requires_grad


@pytest.mark.timeout(60)
@pytest.mark.parametrize("workers", [0, 2])
def test_data_idiom_in_post_accumulate_grad_hooks_matches_torch(workers):
    """The optimizer-in-backward pattern with torch's old idiom: each parameter steps in its own
    post-accumulate-grad hook (``p.data -= lr * p.grad; p.grad = None``), with and without
    parallel cpu workers; torch as the oracle."""
    torch = _torch()
    rng = np.random.default_rng(5)
    ws = [rng.standard_normal((4, 4)) / 2 for _ in range(3)]
    xa = rng.standard_normal((2, 4))
    lr = 0.1

    def hook(p):
        p.data -= lr * p.grad
        p.grad = None

    params = [engine.tensor(w, dtype=np.float64, requires_grad=True) for w in ws]
    tparams = [torch.tensor(w, requires_grad=True) for w in ws]
    for p, tp in zip(params, tparams):
        p.register_post_accumulate_grad_hook(hook)
        tp.register_post_accumulate_grad_hook(hook)
    prev = engine.set_cpu_workers(workers)
    try:
        for _ in range(3):
            x, tx = engine.tensor(xa, dtype=np.float64), torch.tensor(xa)
            branches = [ops.tanh(ops.matmul(x, p)) for p in params]  # independent branches
            tbranches = [torch.tanh(tx @ tp) for tp in tparams]
            ops.sum(ops.add(ops.add(branches[0], branches[1]), branches[2])).backward()
            (tbranches[0] + tbranches[1] + tbranches[2]).sum().backward()
    finally:
        engine.set_cpu_workers(prev)
    for p, tp in zip(params, tparams):
        assert type(p._data) is np.ndarray and p.grad is None and tp.grad is None and p.version == 0
        np.testing.assert_allclose(p.detach().numpy(), tp.detach().numpy(), rtol=1e-12, atol=1e-14)
