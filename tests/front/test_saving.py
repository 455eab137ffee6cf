"""Pickling, deep-copying, tg.save / tg.load: torch's behaviour (oracle checks skip without torch)."""
from __future__ import annotations

import collections
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


# ---- issue 34, item 5: everything tg.save writes, tg.load reads back --------------------------

def _round_trip(obj, protocol=None, **load_kw):
    buf = io.BytesIO()
    if protocol is None:
        tg.save(obj, buf)
    else:
        tg.save(obj, buf, pickle_protocol=protocol)
    buf.seek(0)
    return tg.load(buf, **load_kw)


def _same_tensor(a, b):
    assert type(a) is type(b) and a.shape == b.shape and a.dtype == b.dtype and a.device == b.device
    assert a.requires_grad == b.requires_grad and a.detach().tolist() == b.detach().tolist()


def _optimizer_states():
    """state_dicts of SGD with momentum and of Adam with amsgrad, after two steps: nested dicts,
    lists, tuples (betas), None (SGD's unset buffers), tensors and numbers."""
    states = []
    for make in (lambda ps: tg.optim.SGD(ps, lr=0.1, momentum=0.9, nesterov=True),
                 lambda ps: tg.optim.Adam([{"params": ps[:1]}, {"params": ps[1:], "lr": 0.01}], amsgrad=True),
                 lambda ps: tg.optim.AdamW(ps, betas=(0.8, 0.9))):
        ps = [tg.tensor([[1.0, -2.0]], requires_grad=True), tg.tensor([0.5], requires_grad=True)]
        opt = make(ps)
        for _ in range(2):
            (ps[0] * ps[0]).sum().backward()  # ps[1] gets no gradient: no state of its own
            opt.step()
        states.append(opt.state_dict())
    return states


@pytest.mark.parametrize("protocol", [None, 2, 3, 4, pickle.HIGHEST_PROTOCOL])
def test_load_reads_back_everything_save_writes(protocol):
    """Protocol 2 wrote builtins under Python 2's names (``__builtin__.set``) and every empty
    tensor's bytes as ``__builtin__.bytes()``, which the weights-only allowlist refused."""
    base = tg.arange(12, dtype=tg.float64).reshape(3, 4)
    obj = {
        "empty": tg.zeros(0), "empty2d": tg.zeros(2, 0, 3, dtype=tg.int64), "scalar": tg.tensor(2.5),
        "complex": tg.tensor([1 + 2j, -3j]), "complex64": tg.tensor([1 + 2j], dtype=tg.complex64),
        "bool": tg.tensor([[True, False]]), "half": tg.tensor([1.5], dtype=tg.float16),
        "leaf": tg.ones(2, requires_grad=True),
        "transposed": base.T, "strided": base[::2, ::-3], "expanded": tg.tensor([1.0, 2.0]).expand(3, 2),
        "set": {1, 2.5, "a", (3, 4)}, "frozenset": frozenset({"x"}), "complex number": 3 - 1j,
        "bytes": b"\x00\xff", "no bytes": b"", "slice": slice(1, None, 2), "none": None,
        "ordered": collections.OrderedDict(a=1, b=[2.0, {"c": (tg.ones(1),)}]),
        "optimizers": _optimizer_states(),
    }
    back = _round_trip(obj, protocol)
    assert back.keys() == obj.keys()
    for k in ("empty", "empty2d", "scalar", "complex", "complex64", "bool", "half", "leaf",
              "transposed", "strided", "expanded"):
        _same_tensor(back[k], obj[k])
    for k in ("set", "frozenset", "complex number", "bytes", "no bytes", "slice", "none"):
        assert back[k] == obj[k] and type(back[k]) is type(obj[k])
    assert type(back["ordered"]) is collections.OrderedDict and back["ordered"]["b"][0] == 2.0
    _same_tensor(back["ordered"]["b"][1]["c"][0], obj["ordered"]["b"][1]["c"][0])
    for mine, theirs in zip(back["optimizers"], obj["optimizers"]):
        assert mine["param_groups"] == theirs["param_groups"] and mine["state"].keys() == theirs["state"].keys()
        for i, st in theirs["state"].items():
            assert mine["state"][i].keys() == st.keys()
            for k, v in st.items():
                if isinstance(v, tg.Tensor):
                    _same_tensor(mine["state"][i][k], v)
                else:
                    assert mine["state"][i][k] == v


def test_a_loaded_optimizer_state_resumes_exactly():
    def run(resume):
        w = tg.tensor([1.0, -2.0, 3.0], requires_grad=True)
        opt = tg.optim.Adam([w], lr=0.1, amsgrad=True)
        for i in range(4):
            if resume and i == 2:
                state = _round_trip({"w": w, "opt": opt.state_dict()})
                w = state["w"]
                opt = tg.optim.Adam([w], lr=0.1, amsgrad=True)
                opt.load_state_dict(state["opt"])
            opt.zero_grad()
            (w * w * w).sum().backward()
            opt.step()
        return w.tolist()
    assert run(resume=True) == run(resume=False)


def test_tensors_sharing_memory_load_sharing_it_as_in_torch():
    torch = pytest.importorskip("torch")

    def check(lib, mod, save, load):
        base = lib.arange(12.0).reshape(3, 4)
        buf = io.BytesIO()
        save({"base": base, "row": base[1], "col": base[:, 2], "t": base.T, "again": base}, buf)
        buf.seek(0)
        back = load(buf)
        assert back["again"] is back["base"]
        back["base"][1, 2] = -1.0
        return back["row"].tolist(), back["col"].tolist(), back["t"][2, 1].item()

    ours = check(tg, tg, tg.save, tg.load)
    theirs = check(torch, torch, torch.save, torch.load)
    assert ours == theirs == ([4.0, 5.0, -1.0, 7.0], [2.0, -1.0, 10.0], -1.0)


def test_an_expanded_tensor_loads_as_a_copy_it_may_write():
    """An expand's array repeats memory (stride 0) and numpy keeps it read-only; a loaded one
    sharing the saved buffer would come back writable, each write landing on several elements."""
    x = _round_trip(tg.tensor([1.0, 2.0]).expand(3, 2))
    x[0, 0] = 9.0
    assert x.tolist() == [[9.0, 2.0], [1.0, 2.0], [1.0, 2.0]]


def test_a_saved_view_keeps_its_device_and_map_location():
    base = tg.arange(6.0, device="virtual:1")
    back = _round_trip([base, base[2:]], map_location="virtual:2")
    assert back[0].device == back[1].device == tg.device("virtual:2")
    back[0][3] = 0.0
    assert back[1].tolist() == [2.0, 0.0, 4.0, 5.0]


class _RunsCode:
    def __reduce__(self):
        return (print, ("code ran",))


def _forged(storage_bytes, offset, shape, strides, dtype):
    """A file naming threadgrad's own rebuild functions with arguments save never writes."""
    from threadgrad.engine import serialization as ser

    class _Storage:
        def __reduce__(self):
            return (ser.rebuild_storage, (storage_bytes,))

    class _View:
        def __reduce__(self):
            return (ser.rebuild_tensor_view, (_Storage(), offset, shape, strides, dtype, "cpu", False))
    return pickle.dumps(_View(), protocol=2)


@pytest.mark.parametrize("payload", [
    pickle.dumps(_RunsCode(), protocol=2), pickle.dumps(_RunsCode()),
    b"\x80\x02c__builtin__\neval\nq\x00X\x06\x00\x00\x001 + 1 q\x01\x85q\x02Rq\x03.",  # __builtin__.eval("1 + 1")
    b"\x80\x02c__builtin__\ngetattr\nq\x00.",
    b"\x80\x02c__builtin__\nbytes\nq\x00J\x00\xe1\xf5\x05\x85q\x01Rq\x02.",  # bytes(100_000_000)
    b"\x80\x02c_codecs\nencode\nq\x00X\x01\x00\x00\x00xX\x0a\x00\x00\x00zlib_codec\x86q\x01Rq\x02.",
], ids=["reduce-2", "reduce-current", "eval", "getattr", "bytes-n", "codec"])
def test_load_still_refuses_code_and_other_calls(payload, capsys):
    with pytest.raises(pickle.UnpicklingError, match="Weights only load failed"):
        tg.load(io.BytesIO(payload))
    assert "code ran" not in capsys.readouterr().out


@pytest.mark.parametrize("offset, shape, strides, dtype, message", [
    (0, (4,), (8,), "<f8", "strides is incompatible"),  # past the end of the 16-byte buffer
    (-8, (1,), (8,), "<f8", "strides is incompatible"),  # before its start
    (0, (2,), (-8,), "<f8", "strides is incompatible"),  # backwards from its start
    (0, (2,), (8,), "|O", "cannot have dtype"),  # bytes read as object pointers
])
def test_a_forged_view_cannot_reach_outside_its_storage(offset, shape, strides, dtype, message):
    with pytest.raises(ValueError, match=message):
        tg.load(io.BytesIO(_forged(b"\x00" * 8 + b"\x01" * 8, offset, shape, strides, dtype)))
