"""Pickling, deep-copying, tg.save / tg.load: torch's behaviour (oracle checks skip without torch)."""
from __future__ import annotations

import copy
import io
import pickle

import numpy as np
import pytest

import threadgrad as tg


def _trained_leaf():
    w = tg.tensor([[1.0, -2.0], [0.5, 3.0]], requires_grad=True)
    (w * w).sum().backward()  # now has a grad and an AccumulateGrad (a weakref the old pickle choked on)
    return w


def test_a_leaf_pickles_after_backward_without_its_grad():
    w = _trained_leaf()
    w2 = pickle.loads(pickle.dumps(w))
    assert w2.tolist() == w.tolist() and w2.dtype == w.dtype and w2.requires_grad and w2.is_leaf
    assert w2.grad is None  # torch's pickle does not keep .grad either
    w2.sum().backward()  # a working leaf of its own
    assert w2.grad.tolist() == [[1.0, 1.0], [1.0, 1.0]] and w.grad.tolist() == [[2.0, -4.0], [1.0, 6.0]]


def test_a_non_leaf_comes_back_as_a_leaf_as_in_torch():
    torch = pytest.importorskip("torch")
    y = _trained_leaf() * 2
    y2 = pickle.loads(pickle.dumps(y))
    ty = pickle.loads(pickle.dumps(torch.ones(2, requires_grad=True) * 2))
    assert (y2.is_leaf, y2.requires_grad, y2.grad_fn) == (ty.is_leaf, ty.requires_grad, ty.grad_fn) == (True, True, None)
    assert y2.tolist() == [[2.0, -4.0], [1.0, 6.0]]


@pytest.mark.parametrize("dtype", ["float16", "float32", "float64", "int32", "int64", "bool"])
def test_pickle_keeps_dtype_shape_and_values(dtype):
    t = tg.tensor(np.arange(6).reshape(2, 3).astype(dtype))
    for x in (t, t.T, t[0, 1], tg.zeros(0, 3, dtype=dtype)):  # views, 0-d and empty tensors too
        x2 = pickle.loads(pickle.dumps(x, protocol=pickle.HIGHEST_PROTOCOL))
        assert x2.shape == x.shape and x2.dtype == x.dtype and x2.tolist() == x.tolist()


def test_pickle_keeps_the_device():
    x = tg.ones(2, device="virtual:1")
    assert pickle.loads(pickle.dumps(x)).device == tg.device("virtual:1")


def test_deepcopy_as_torch():
    torch = pytest.importorskip("torch")
    w = _trained_leaf()
    d = copy.deepcopy({"a": w, "b": w})
    assert d["a"] is d["b"]  # the memo: one tensor stays one
    assert d["a"] is not w and d["a"].tolist() == w.tolist() and d["a"].requires_grad
    assert d["a"].grad.tolist() == w.grad.tolist() and d["a"].grad is not w.grad
    d["a"].data[0, 0] = 100.0
    assert w.tolist()[0][0] == 1.0
    with pytest.raises(RuntimeError, match="Only Tensors created explicitly by the user") as ours:
        copy.deepcopy(w * 2)
    with pytest.raises(RuntimeError) as theirs:
        copy.deepcopy(torch.ones(1, requires_grad=True) * 2)
    assert str(ours.value) == str(theirs.value)


def test_save_and_load_tensors_and_optimizer_state(tmp_path):
    w = _trained_leaf()
    opt = tg.optim.Adam([w], lr=0.1)
    opt.step()
    path = tmp_path / "ckpt.pt"
    tg.save({"w": w, "opt": opt.state_dict(), "epoch": 3, "names": ("w",)}, path)
    back = tg.load(path)
    assert back["epoch"] == 3 and back["names"] == ("w",)
    assert back["w"].tolist() == w.tolist() and back["w"].requires_grad
    st = back["opt"]["state"][0]
    assert st["step"].item() == 1.0 and st["exp_avg"].tolist() == opt.state[w]["exp_avg"].tolist()
    assert back["opt"]["param_groups"] == opt.state_dict()["param_groups"]
    buf = io.BytesIO()  # file objects work too
    tg.save([w], buf)
    buf.seek(0)
    assert tg.load(buf)[0].tolist() == w.tolist()


def test_load_weights_only_refuses_other_objects(tmp_path):
    path = tmp_path / "evil.pt"
    with open(path, "wb") as f:
        pickle.dump({"x": io.BytesIO}, f)  # a global a weights-only load must not resolve
    with pytest.raises(pickle.UnpicklingError, match="Unsupported global: GLOBAL _io.BytesIO"):
        tg.load(path)
    assert tg.load(path, weights_only=False)["x"] is io.BytesIO


def test_load_map_location(tmp_path):
    path = tmp_path / "v.pt"
    tg.save({"x": tg.ones(2, device="virtual:1")}, path)
    assert tg.load(path)["x"].device == tg.device("virtual:1")
    assert tg.load(path, map_location="cpu")["x"].device == tg.device("cpu")
    assert tg.load(path, map_location={"virtual:1": "virtual:2"})["x"].device == tg.device("virtual:2")
    assert tg.load(path, map_location=lambda t, loc: t.to("virtual:3"))["x"].device == tg.device("virtual:3")
