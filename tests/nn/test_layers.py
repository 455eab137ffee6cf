"""tg.nn's layers and losses against torch.nn: parameter names and shapes, repr, forward
values and gradients with torch's weights copied in (float64), default initialization's
bounds and moments, and torch's errors for bad input."""
from __future__ import annotations

import math

import numpy as np
import pytest

import threadgrad as tg
from threadgrad import nn


def _torch():
    return pytest.importorskip("torch")


# (constructor args, input shapes, extra input kind); every case built in both libraries
LAYERS = [
    ("Linear", (3, 4), [(5, 3)]),
    ("Linear", (3, 4, False), [(2, 6, 3)]),
    ("Bilinear", (3, 2, 4), [(5, 3), (5, 2)]),
    ("Identity", (7, "x"), [(2, 3)]),
    ("Flatten", (), [(2, 3, 4)]),
    ("Flatten", (0, 1), [(2, 3, 4)]),
    ("Unflatten", (1, (2, 2)), [(3, 4)]),
    ("ReLU", (), [(4, 5)]),
    ("Tanh", (), [(4, 5)]),
    ("Sigmoid", (), [(4, 5)]),
    ("GELU", (), [(4, 5)]),
    ("GELU", ("tanh",), [(4, 5)]),
    ("Softplus", (2.0, 5.0), [(4, 5)]),
    ("Softmax", (1,), [(4, 5)]),
    ("LogSoftmax", (-1,), [(4, 5)]),
    ("SiLU", (), [(4, 5)]),
    ("LeakyReLU", (0.2,), [(4, 5)]),
    ("ELU", (0.7,), [(4, 5)]),
    ("Hardtanh", (-0.5, 0.5), [(4, 5)]),
    ("ReLU6", (), [(4, 5)]),
    ("Mish", (), [(4, 5)]),
    ("LogSigmoid", (), [(4, 5)]),
    ("LayerNorm", (5,), [(4, 5)]),
    ("LayerNorm", ((3, 5),), [(2, 3, 5)]),
    ("LayerNorm", (5, 1e-3, False), [(4, 5)]),
    ("LayerNorm", (5, 1e-5, True, False), [(4, 5)]),
    ("Dropout", (0.3,), [(4, 5)]),  # eval mode below: the identity
]


def _pair(name, args):
    torch = _torch()
    return getattr(nn, name)(*args).double(), getattr(torch.nn, name)(*args).double()


def _copy_weights(ours, theirs):
    ours.load_state_dict({k: tg.tensor(v.detach().numpy()) for k, v in theirs.state_dict().items()})


@pytest.mark.parametrize("name,args,shapes", LAYERS, ids=[f"{n}{a}" for n, a, _ in LAYERS])
def test_layer_matches_torch(name, args, shapes):
    torch = _torch()
    ours, theirs = _pair(name, args)
    ours.eval(), theirs.eval()
    assert repr(ours) == repr(theirs)
    assert [(n, tuple(p.shape)) for n, p in ours.named_parameters()] == \
        [(n, tuple(p.shape)) for n, p in theirs.named_parameters()]
    assert list(ours.state_dict()) == list(theirs.state_dict())
    _copy_weights(ours, theirs)
    rng = np.random.default_rng(1)
    xs = [rng.standard_normal(s) for s in shapes]
    ins_o = [tg.tensor(x, requires_grad=True) for x in xs]
    ins_t = [torch.tensor(x, requires_grad=True) for x in xs]
    out_o, out_t = ours(*ins_o), theirs(*ins_t)
    np.testing.assert_allclose(out_o.detach().numpy(), out_t.detach().numpy(), rtol=1e-10, atol=1e-12)
    g = rng.standard_normal(tuple(out_t.shape))
    out_o.backward(tg.tensor(g))
    out_t.backward(torch.tensor(g))
    for a, b in zip(ins_o, ins_t):
        np.testing.assert_allclose(a.grad.numpy(), b.grad.numpy(), rtol=1e-9, atol=1e-11)
    for (n, p), (_, q) in zip(ours.named_parameters(), theirs.named_parameters()):
        np.testing.assert_allclose(p.grad.numpy(), q.grad.numpy(), rtol=1e-9, atol=1e-11, err_msg=n)


def test_embedding_matches_torch_with_padding():
    torch = _torch()
    ours, theirs = nn.Embedding(6, 3, padding_idx=2).double(), torch.nn.Embedding(6, 3, padding_idx=2).double()
    assert repr(ours) == repr(theirs) and ours.weight[2].tolist() == [0.0, 0.0, 0.0]
    _copy_weights(ours, theirs)
    idx = [[0, 2, 5], [2, 2, 1]]
    o, t = ours(tg.tensor(idx)), theirs(torch.tensor(idx))
    np.testing.assert_allclose(o.detach().numpy(), t.detach().numpy())
    (o * o).sum().backward()
    (t * t).sum().backward()
    np.testing.assert_allclose(ours.weight.grad.numpy(), theirs.weight.grad.numpy())
    assert repr(nn.Embedding(4, 2, padding_idx=-1)) == repr(torch.nn.Embedding(4, 2, padding_idx=-1))
    w = tg.ones(3, 2)
    frozen = nn.Embedding.from_pretrained(w)
    assert not frozen.weight.requires_grad and frozen(tg.tensor([1])).tolist() == [[1.0, 1.0]]
    assert nn.Embedding.from_pretrained(w, freeze=False).weight.requires_grad
    for bad in ([6], [0, -1], [[1, 7]]):  # a negative index is out of range too, as torch's
        with pytest.raises(IndexError, match="index out of range in self"):
            theirs(torch.tensor(bad))
        with pytest.raises(IndexError, match="index out of range in self"):
            ours(tg.tensor(bad))
    assert ours(tg.tensor([5, 0], dtype=tg.int32)).shape == (2, 3)
    with pytest.raises(AssertionError, match="Padding_idx must be within num_embeddings"):
        nn.Embedding(3, 2, padding_idx=3)


LOSSES = [
    ("MSELoss", {}, "real"),
    ("MSELoss", {"reduction": "sum"}, "real"),
    ("L1Loss", {"reduction": "none"}, "real"),
    ("CrossEntropyLoss", {}, "class"),
    ("CrossEntropyLoss", {"ignore_index": 1, "reduction": "sum"}, "class"),
    ("NLLLoss", {}, "logp"),
    ("NLLLoss", {"ignore_index": 0}, "logp"),
    ("NLLLoss", {"weight": [0.2, 1.0, 3.0, 0.5]}, "logp"),
    ("NLLLoss", {"weight": [0.2, 1.0, 3.0, 0.5], "reduction": "none"}, "logp"),
    ("BCELoss", {}, "prob"),
    ("BCELoss", {"weight": [1.0, 2.0, 0.5, 1.0]}, "prob"),
    ("BCEWithLogitsLoss", {}, "binary"),
    ("BCEWithLogitsLoss", {"pos_weight": [1.0, 3.0, 0.5, 2.0], "reduction": "sum"}, "binary"),
    ("SmoothL1Loss", {}, "real"),
    ("SmoothL1Loss", {"beta": 0.3, "reduction": "none"}, "real"),
    ("SmoothL1Loss", {"beta": 0.0}, "real"),
    ("HuberLoss", {"delta": 0.7}, "real"),
    ("HuberLoss", {"reduction": "sum"}, "real"),
    ("KLDivLoss", {"reduction": "batchmean"}, "dist"),
    ("KLDivLoss", {"reduction": "none"}, "dist"),
    ("KLDivLoss", {"reduction": "sum", "log_target": True}, "logdist"),
]


@pytest.mark.parametrize("name,kw,kind", LOSSES, ids=[f"{n}-{'-'.join(k)}" for n, k, _ in LOSSES])
def test_loss_matches_torch(name, kw, kind):
    torch = _torch()
    rng = np.random.default_rng(2)
    x = rng.standard_normal((6, 4))
    if kind == "real":
        target = rng.standard_normal((6, 4))
    elif kind in ("class", "logp"):
        target = rng.integers(0, 4, 6)
        if kind == "logp":
            x = x - np.log(np.exp(x).sum(1, keepdims=True))
    elif kind == "prob":
        x = 1 / (1 + np.exp(-x))
        target = rng.random((6, 4))
    elif kind in ("dist", "logdist"):
        x = x - np.log(np.exp(x).sum(1, keepdims=True))
        target = rng.random((6, 4)) * (rng.random((6, 4)) > 0.2)  # some exact zeros
        target /= target.sum(1, keepdims=True)
        if kind == "logdist":
            target = np.log(target + 0.01)
    else:
        target = (rng.random((6, 4)) > 0.5).astype(float)

    def build(lib):
        args = {k: (lib.tensor(v, dtype=lib.float64) if isinstance(v, list) else v) for k, v in kw.items()}
        return getattr(lib.nn, name)(**args)

    ours, theirs = build(tg), build(torch)
    assert repr(ours) == repr(theirs) and list(ours.state_dict()) == list(theirs.state_dict())
    if kind == "real":
        target[0, 0] = x[0, 0] + 0.3  # |d| = beta exactly: the boundary's side is torch's
    xo, xt = tg.tensor(x, requires_grad=True), torch.tensor(x, requires_grad=True)
    lo, lt = ours(xo, tg.tensor(target)), theirs(xt, torch.tensor(target))
    np.testing.assert_allclose(lo.detach().numpy(), lt.detach().numpy(), rtol=1e-10, atol=1e-12)
    lo.sum().backward()
    lt.sum().backward()
    np.testing.assert_allclose(xo.grad.numpy(), xt.grad.numpy(), rtol=1e-9, atol=1e-12)


def test_default_init_distributions_follow_torch():
    """Bounds are torch's (from the same fan computations), and the moments are those of the
    distribution torch draws from."""
    tg.manual_seed(0)
    fc = nn.Linear(400, 300)
    bound = 1 / math.sqrt(400)
    w = fc.weight.numpy() if not fc.weight.requires_grad else fc.weight.detach().numpy()
    assert np.abs(w).max() <= bound and np.abs(w).max() > 0.99 * bound
    assert abs(w.std() - bound / math.sqrt(3)) < 0.01 * bound  # U(-b, b) has std b/sqrt(3)
    assert np.abs(fc.bias.detach().numpy()).max() <= bound
    bl = nn.Bilinear(50, 7, 20)
    assert np.abs(bl.weight.detach().numpy()).max() <= 1 / math.sqrt(50)
    emb = nn.Embedding(1000, 50).weight.detach().numpy()
    assert abs(emb.mean()) < 0.02 and abs(emb.std() - 1) < 0.02
    ln = nn.LayerNorm(4)
    assert ln.weight.tolist() == [1.0] * 4 and ln.bias.tolist() == [0.0] * 4
    tg.manual_seed(3)
    a = nn.Linear(3, 3).weight.tolist()
    tg.manual_seed(3)
    assert nn.Linear(3, 3).weight.tolist() == a  # tg.manual_seed makes it repeat


def test_bad_input_errors_match_torch():
    torch = _torch()
    for lib in (tg, torch):
        with pytest.raises(RuntimeError, match=r"mat1 and mat2 shapes cannot be multiplied \(2x5 and 3x4\)"):
            lib.nn.Linear(3, 4)(lib.zeros(2, 5))
        with pytest.raises(ValueError, match="dropout probability has to be between 0 and 1, but got 1.5"):
            lib.nn.Dropout(1.5)
        with pytest.raises(RuntimeError, match=r"Given normalized_shape=\[4\], expected input with shape \[\*, 4\]"):
            lib.nn.LayerNorm(4)(lib.zeros(2, 3))
        with pytest.raises(ValueError, match="Target size .* must be the same as input size"):
            lib.nn.BCEWithLogitsLoss()(lib.zeros(2, 3), lib.zeros(2, 2))
        with pytest.raises(ValueError, match=r"Expected input batch_size \(3\) to match target batch_size \(2\)"):
            lib.nn.NLLLoss()(lib.zeros(3, 4), lib.zeros(2, dtype=lib.int64))
        with pytest.raises(TypeError):
            lib.nn.Linear(3, 4)(lib.zeros(2, 3), lib.zeros(1))  # called with the wrong arguments
    m = nn.Linear(3, 4)
    m(tg.zeros(2, 3)).sum().backward()  # still usable after the errors
    assert m.weight.grad.shape == (4, 3)


def test_dropout_train_and_eval():
    tg.manual_seed(0)
    d = nn.Dropout(0.5)
    out = d(tg.ones(1000))
    vals = set(out.tolist())
    assert vals <= {0.0, 2.0} and 350 < out.tolist().count(0.0) < 650
    assert d.eval()(tg.ones(3)).tolist() == [1.0, 1.0, 1.0]
