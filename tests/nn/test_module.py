"""tg.nn.Module, Parameter and the containers, against torch.nn where installed: registration,
iteration, state_dict keys and load_state_dict's results and errors, repr, hooks, to(),
pickling, and many threads calling one module."""
from __future__ import annotations

import copy
import pickle
import threading
from collections import OrderedDict

import numpy as np
import pytest

import threadgrad as tg
from threadgrad import nn


def _torch():
    return pytest.importorskip("torch")


def _tree(lib):
    """The same module tree built from either library: a shared parameter, a non-persistent
    buffer, nested containers."""
    class Block(lib.nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = lib.nn.Linear(3, 4)
            self.register_buffer("running", lib.zeros(4))
            self.register_buffer("scratch", lib.ones(2), persistent=False)
            self.act = lib.nn.ReLU()

        def forward(self, x):
            return self.act(self.fc(x)) + self.running

    class Net(lib.nn.Module):
        def __init__(self):
            super().__init__()
            self.blocks = lib.nn.ModuleList([Block(), Block()])
            self.head = lib.nn.Sequential(OrderedDict(proj=lib.nn.Linear(4, 2), drop=lib.nn.Dropout(0.1)))
            self.extra = lib.nn.ParameterList([lib.nn.Parameter(lib.zeros(2, 2)), lib.nn.Parameter(lib.ones(1))])
            self.table = lib.nn.ParameterDict({"b": lib.nn.Parameter(lib.ones(3)), "a": lib.nn.Parameter(lib.zeros(1))})
            self.by_name = lib.nn.ModuleDict({"x": lib.nn.Tanh(), "y": lib.nn.Identity()})
            self.scale = lib.nn.Parameter(lib.ones(1))
            self.tied = self.blocks[0].fc  # a module reached twice
            self.absent = None

        def forward(self, x):
            for b in self.blocks:
                x = b(x[..., :3]) if x.shape[-1] != 3 else b(x)
            return self.head(x) * self.scale

    return Net()


def test_names_and_keys_match_torch():
    torch = _torch()
    ours, theirs = _tree(tg), _tree(torch)
    assert [n for n, _ in ours.named_parameters()] == [n for n, _ in theirs.named_parameters()]
    assert [n for n, _ in ours.named_parameters(remove_duplicate=False)] == \
        [n for n, _ in theirs.named_parameters(remove_duplicate=False)]
    assert [n for n, _ in ours.named_buffers()] == [n for n, _ in theirs.named_buffers()]
    assert [n for n, _ in ours.named_modules()] == [n for n, _ in theirs.named_modules()]
    assert [n for n, _ in ours.named_modules(remove_duplicate=False)] == \
        [n for n, _ in theirs.named_modules(remove_duplicate=False)]
    assert [n for n, _ in ours.named_children()] == [n for n, _ in theirs.named_children()]
    assert [n for n, _ in ours.named_parameters(prefix="m", recurse=True)] == \
        [n for n, _ in theirs.named_parameters(prefix="m", recurse=True)]
    assert [n for n, _ in ours.named_parameters(recurse=False)] == [n for n, _ in theirs.named_parameters(recurse=False)]
    assert list(ours.state_dict()) == list(theirs.state_dict())
    assert list(ours.state_dict(prefix="p.")) == list(theirs.state_dict(prefix="p."))
    assert list(ours.state_dict(prefix="q")) == list(theirs.state_dict(prefix="q"))
    assert list(ours.state_dict(prefix="p.")._metadata) == list(theirs.state_dict(prefix="p.")._metadata)
    assert list(ours.state_dict()._metadata) == list(theirs.state_dict()._metadata)
    assert [tuple(p.shape) for p in ours.parameters()] == [tuple(p.shape) for p in theirs.parameters()]
    assert len(list(ours.parameters())) == len(list(theirs.parameters()))  # the shared Linear's once


def test_repr_matches_torch():
    torch = _torch()
    ours, theirs = repr(_tree(tg)), repr(_tree(torch))
    # The parameter lines name the dtype in each library's words; everything else is the same.
    strip = [line for line in ours.splitlines() if "Parameter containing" not in line]
    assert strip == [line for line in theirs.splitlines() if "Parameter containing" not in line]
    assert repr(nn.ParameterList([nn.Parameter(tg.zeros(2, 3)), tg.ones(1)])).splitlines()[1:] == \
        ["    (0): Parameter containing: [threadgrad.float32 of size 2x3]",
         "    (1): Parameter containing: [threadgrad.float32 of size 1]", ")"]
    assert repr(nn.Parameter(tg.zeros(2))).startswith("Parameter containing:\ntensor([0., 0.]")


def test_state_dict_round_trip_through_torch_values():
    """Weights copied from a torch model through numpy give torch's outputs."""
    torch = _torch()
    theirs = _tree(torch).double().eval()
    ours = _tree(tg).double().eval()
    result = ours.load_state_dict({k: tg.tensor(v.numpy()) for k, v in theirs.state_dict().items()})
    assert repr(result) == "<All keys matched successfully>"
    x = np.random.default_rng(0).standard_normal((5, 3))
    np.testing.assert_allclose(ours(tg.tensor(x)).detach().numpy(), theirs(torch.tensor(x)).detach().numpy(),
                               rtol=1e-12, atol=1e-12)


def test_load_state_dict_errors_match_torch():
    torch = _torch()
    ours, theirs = _tree(tg), _tree(torch)
    sd_o = {k: v for k, v in ours.state_dict().items() if k != "scale"}
    sd_t = {k: v for k, v in theirs.state_dict().items() if k != "scale"}
    sd_o["head.proj.weight"] = tg.zeros(3, 3)
    sd_t["head.proj.weight"] = torch.zeros(3, 3)
    sd_o["bogus"], sd_t["bogus"] = tg.zeros(1), torch.zeros(1)
    sd_o["blocks.0.nope"], sd_t["blocks.0.nope"] = tg.zeros(1), torch.zeros(1)
    with pytest.raises(RuntimeError) as ours_err:
        ours.load_state_dict(sd_o)
    with pytest.raises(RuntimeError) as theirs_err:
        theirs.load_state_dict(sd_t)
    assert str(ours_err.value) == str(theirs_err.value)
    # strict=False: the size mismatch still raises; without it, torch's result
    del sd_o["head.proj.weight"], sd_t["head.proj.weight"]
    r_o, r_t = ours.load_state_dict(sd_o, strict=False), theirs.load_state_dict(sd_t, strict=False)
    assert r_o.missing_keys == r_t.missing_keys and r_o.unexpected_keys == r_t.unexpected_keys
    assert repr(r_o) == repr(r_t)
    with pytest.raises(TypeError, match="Expected state_dict to be dict-like"):
        ours.load_state_dict([1, 2])
    # the module still works after each error
    ours(tg.zeros(2, 3))


def test_load_state_dict_copies_in_place_and_assign():
    m = nn.Linear(2, 2)
    w = m.weight
    m.load_state_dict({"weight": tg.ones(2, 2), "bias": tg.zeros(2)})
    assert m.weight is w and w.tolist() == [[1.0, 1.0], [1.0, 1.0]] and w.requires_grad
    new = tg.full((2, 2), 3.0)
    m.load_state_dict({"weight": new, "bias": tg.zeros(2)}, assign=True)
    assert m.weight is not w and isinstance(m.weight, nn.Parameter) and m.weight.tolist()[0] == [3.0, 3.0]


def test_registration_errors_match_torch():
    torch = _torch()

    def errors(lib):
        out = []
        m = lib.nn.Module()
        for fn in (lambda: m.register_buffer("a.b", lib.zeros(1)),
                   lambda: m.register_buffer("", lib.zeros(1)),
                   lambda: m.register_buffer(1, lib.zeros(1)),
                   lambda: m.register_buffer("x", 3),
                   lambda: m.register_parameter("w", lib.zeros(1)),
                   lambda: m.register_parameter("a.b", None),
                   lambda: m.register_parameter("train", None),
                   lambda: m.add_module("a.b", lib.nn.ReLU()),
                   lambda: m.add_module("x", 3),
                   lambda: m.__getattr__("missing"),
                   lambda: m(1)):
            try:
                fn()
                out.append(None)
            except Exception as e:  # noqa: BLE001
                out.append(type(e).__name__)
        m.w = lib.nn.Parameter(lib.zeros(1))
        try:
            m.w = lib.zeros(1)
        except TypeError as e:
            out.append(str(e).split("'")[2])  # the words after the type name
        m.sub = lib.nn.ReLU()
        try:
            m.sub = 3
        except TypeError as e:
            out.append(str(e).split("'")[2])
        return out

    assert errors(tg) == errors(torch)
    with pytest.raises(AttributeError, match="'Linear' object has no attribute 'foo'"):
        nn.Linear(1, 1).foo
    with pytest.raises(NotImplementedError, match='Module \\[Module\\] is missing the required "forward" function'):
        nn.Module()(1)
    with pytest.raises(ValueError, match="Cannot assign non-leaf Tensor to parameter 'w'"):
        nn.Module().register_parameter("w", nn.Parameter(tg.ones(1)) * 2 if False else _nonleaf_param())
    with pytest.raises(AttributeError, match="cannot assign parameters before Module.__init__"):
        class Early(nn.Module):
            def __init__(self):
                self.w = nn.Parameter(tg.zeros(1))
        Early()


def _nonleaf_param():
    """A Parameter object whose grad_fn is set (torch refuses it at registration)."""
    p = nn.Parameter(tg.ones(1))
    q = p * 2
    p2 = object.__new__(nn.Parameter)
    for slot in tg.Tensor.__slots__:
        if slot != "__weakref__":
            object.__setattr__(p2, slot, object.__getattribute__(q, slot))
    return p2


def test_attribute_reassignment_moves_between_registries():
    m = nn.Module()
    m.x = nn.Parameter(tg.zeros(1))
    m.x = None
    assert "x" in m._parameters and m.x is None and list(m.state_dict()) == []
    m.y = nn.ReLU()
    del m.y
    assert "y" not in m._modules
    m.register_buffer("b", tg.zeros(1))
    m.b = tg.ones(2)  # a tensor assigned to a buffer's name stays a buffer
    assert list(m.state_dict()) == ["b"] and m.b.tolist() == [1.0, 1.0]
    m.c = nn.Buffer(tg.ones(1), persistent=False)
    assert "c" in m._buffers and "c" not in m.state_dict()
    assert "x" in dir(m) and "b" in dir(m)


def test_train_eval_apply_zero_grad_requires_grad():
    m = nn.Sequential(nn.Linear(2, 2), nn.Dropout(), nn.Sequential(nn.Dropout()))
    m.eval()
    assert all(not sub.training for sub in m.modules())
    m.train()
    assert all(sub.training for sub in m.modules())
    with pytest.raises(ValueError, match="training mode is expected to be boolean"):
        m.train("yes")
    seen = []
    m.apply(lambda sub: seen.append(type(sub).__name__))
    assert seen == ["Linear", "Dropout", "Dropout", "Sequential", "Sequential"]  # torch's post-order
    m(tg.ones(3, 2)).sum().backward()
    assert m[0].weight.grad is not None
    m.zero_grad(set_to_none=False)
    assert m[0].weight.grad.tolist() == [[0.0, 0.0], [0.0, 0.0]]
    m.zero_grad()
    assert m[0].weight.grad is None
    m.requires_grad_(False)
    assert not any(p.requires_grad for p in m.parameters())


def test_to_dtype_device_keeps_parameter_objects():
    m = nn.Linear(3, 2)
    m.register_buffer("steps", tg.zeros(1, dtype=tg.int64))
    w = m.weight
    opt = tg.optim.SGD(m.parameters(), lr=0.1)
    m.double()
    assert m.weight is w and w.dtype == tg.float64 and m.steps.dtype == tg.int64  # integer buffers stay
    m.float()
    assert w.dtype == tg.float32
    m.to(tg.float64)
    assert w.dtype == tg.float64
    with pytest.raises(TypeError, match="nn.Module.to only accepts floating point"):
        m.to(tg.int32)
    m.to("virtual:1")
    assert str(w.device) == "virtual:1" and str(m.steps.device) == "virtual:1" and m.weight is w
    out = m(tg.ones(4, 3, dtype=tg.float64, device="virtual:1")).sum()
    out.backward()
    assert str(w.grad.device) == "virtual:1"
    opt.step()  # the optimizer made before .to() still holds the same parameters
    m.cpu()
    assert str(w.device) == "cpu" and str(w.grad.device) == "cpu"
    m.to(tg.zeros(1, dtype=tg.float32))
    assert w.dtype == tg.float32


def test_containers_behave_like_torch():
    torch = _torch()
    for lib in (tg, torch):
        seq = lib.nn.Sequential(lib.nn.Linear(1, 2), lib.nn.ReLU(), lib.nn.Linear(2, 3))
        assert len(seq) == 3 and isinstance(seq[-1], lib.nn.Linear)
        assert isinstance(seq[1:], lib.nn.Sequential) and len(seq[1:]) == 2
        assert list(seq[1:]._modules) == ["1", "2"]
        seq.append(lib.nn.Tanh())
        del seq[0]
        assert list(seq._modules) == ["0", "1", "2"]
        with pytest.raises(IndexError, match="index 5 is out of range"):
            seq[5]
        ml = lib.nn.ModuleList([lib.nn.ReLU()])
        ml.append(lib.nn.Tanh())
        ml.extend([lib.nn.Sigmoid()])
        ml.insert(0, lib.nn.Identity())
        assert [type(x).__name__ for x in ml] == ["Identity", "ReLU", "Tanh", "Sigmoid"]
        assert [type(x).__name__ for x in ml[1:3]] == ["ReLU", "Tanh"]
        with pytest.raises(TypeError, match="ModuleList.extend should be called with an iterable"):
            ml.extend(lib.nn.ReLU())
        md = lib.nn.ModuleDict({"a": lib.nn.ReLU()})
        md["b"] = lib.nn.Tanh()
        assert list(md) == ["a", "b"] and "a" in md and len(md) == 2
        assert type(md.pop("a")).__name__ == "ReLU" and list(md.keys()) == ["b"]
        pl = lib.nn.ParameterList([lib.zeros(2)])
        pl.append(lib.ones(1))
        assert all(isinstance(p, lib.nn.Parameter) for p in pl) and len(pl) == 2
        assert [n for n, _ in pl.named_parameters()] == ["0", "1"]
        pd = lib.nn.ParameterDict({"w": lib.zeros(1)})
        pd["v"] = lib.ones(2)
        assert isinstance(pd["v"], lib.nn.Parameter) and list(pd) == ["w", "v"]
        assert [n for n, _ in pd.named_parameters()] == ["w", "v"]
    def mixed(lib):  # runs of equal entries collapse, as torch prints them
        m = lib.nn
        return m.ModuleList([m.Linear(2, 2), m.Linear(2, 2), m.ReLU(), m.Linear(2, 2),
                             m.Sequential(m.ReLU(), m.Tanh()), m.Sequential(m.ReLU(), m.Tanh())])

    assert repr(mixed(tg)) == repr(mixed(torch)) and "(4-5): 2 x Sequential(" in repr(mixed(tg))
    assert repr(nn.ModuleList()) == repr(torch.nn.ModuleList())


def test_hooks_modify_inputs_and_outputs_and_remove():
    torch = _torch()

    def run(lib):
        m = lib.nn.Linear(2, 2)
        calls = []
        h1 = m.register_forward_pre_hook(lambda mod, args: (args[0] * 2,))
        h2 = m.register_forward_hook(lambda mod, args, out: calls.append("post") or out * 0 + 1)
        h3 = m.register_forward_pre_hook(lambda mod, args: calls.append("first"), prepend=True)
        h4 = m.register_forward_hook(lambda mod, args, kwargs, out: calls.append(("kw", sorted(kwargs))),
                                     with_kwargs=True)
        out = m(lib.ones(1, 2))
        for h in (h1, h2, h3, h4):
            h.remove()
        plain = m(lib.ones(1, 2))
        return calls, out.tolist(), plain.shape

    ours, theirs = run(tg), run(torch)
    assert ours[0] == theirs[0] and ours[1] == theirs[1] and tuple(ours[2]) == tuple(theirs[2])
    m = nn.Identity()
    with m.register_forward_hook(lambda mod, a, o: o + 1):
        assert m(tg.zeros(1)).tolist() == [1.0]
    assert m(tg.zeros(1)).tolist() == [0.0]
    seen = []
    m.register_forward_hook(lambda mod, a, o: seen.append("always"), always_call=True)
    m.forward = lambda x: 1 / 0  # noqa: E731
    with pytest.raises(ZeroDivisionError):
        m(tg.zeros(1))
    assert seen == ["always"]


def test_pickle_deepcopy_and_save():
    m = nn.Sequential(nn.Linear(2, 3), nn.ReLU())
    m.register_forward_hook(lambda *a: None)  # (a lambda is not picklable: torch drops nothing, so use deepcopy)
    c = copy.deepcopy(m)
    assert isinstance(c[0].weight, nn.Parameter) and c[0].weight is not m[0].weight
    assert c[0].weight.tolist() == m[0].weight.tolist()
    m2 = nn.Sequential(nn.Linear(2, 3), nn.ReLU())
    p = pickle.loads(pickle.dumps(m2))
    assert p[0].weight.tolist() == m2[0].weight.tolist() and p[0].weight.requires_grad
    p(tg.ones(1, 2)).sum().backward()
    import os
    import tempfile
    path = os.path.join(tempfile.mkdtemp(), "m.pt")
    tg.save(m2.state_dict(), path)
    back = tg.load(path)
    assert list(back) == ["0.weight", "0.bias"]
    tg.save({"params": list(m2.parameters())}, path)  # Parameters load under weights_only, as torch's
    params = tg.load(path)["params"]
    assert all(isinstance(q, nn.Parameter) and q.requires_grad for q in params)
    m3 = nn.Sequential(nn.Linear(2, 3), nn.ReLU())
    m3.load_state_dict(back)
    assert m3[0].bias.tolist() == m2[0].bias.tolist()


def test_parameter_is_a_leaf_sharing_memory():
    t = tg.zeros(3)
    p = nn.Parameter(t)
    assert p.requires_grad and p.is_leaf and isinstance(p, tg.Tensor)
    with tg.no_grad():
        p.add_(1.0)
    assert t.tolist() == [1.0, 1.0, 1.0]  # shares the array, as torch's Parameter(t)
    assert not nn.Parameter(tg.zeros(1), requires_grad=False).requires_grad
    assert nn.Parameter().shape == (0,)
    assert type(p * 2) is tg.Tensor


@pytest.mark.timeout(120)
def test_one_module_many_threads_forward_backward_and_hooks():
    """Eight threads call one model and backward into its shared parameters while others add
    and remove hooks: every gradient is the exact sum, and no call sees a torn hook table."""
    tg.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 1)).double()
    xs = [tg.randn(5, 4, dtype=tg.float64) for _ in range(8)]
    reps = 10
    expected = [tg.zeros(*p.shape, dtype=tg.float64) for p in model.parameters()]
    for x in xs:
        grads = tg.autograd.grad(model(x).sum(), list(model.parameters()))
        expected = [e + g * reps for e, g in zip(expected, grads)]
    errors = []
    stop = threading.Event()

    def caller(x):
        try:
            for _ in range(reps):
                model(x).sum().backward()
        except Exception as e:  # noqa: BLE001
            errors.append(e)

    def hooker():
        try:
            while not stop.is_set():
                h = model[0].register_forward_hook(lambda mod, a, o: None)
                g = model[2].register_forward_pre_hook(lambda mod, a: None)
                h.remove()
                g.remove()
        except Exception as e:  # noqa: BLE001
            errors.append(e)

    threads = [threading.Thread(target=caller, args=(x,)) for x in xs]
    hook_thread = threading.Thread(target=hooker)
    hook_thread.start()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    stop.set()
    hook_thread.join()
    assert not errors, errors
    for p, e in zip(model.parameters(), expected):
        np.testing.assert_allclose(p.grad.numpy(), e.numpy(), rtol=1e-10, atol=1e-12)
    assert not model[0]._forward_hooks and not model[2]._forward_pre_hooks


def _hooked_pair(lib):
    """A two-input module with backward hooks and pre-hooks, torch's numbers copied in."""
    class Mix(lib.nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = lib.nn.Linear(3, 2)

        def forward(self, a, scale, b):
            return self.fc(a) * scale, (b * 3).sum()

    m = Mix().double()
    with lib.no_grad():
        m.fc.weight.copy_(lib.tensor(np.arange(6.0).reshape(2, 3) / 7))
        m.fc.bias.copy_(lib.tensor([0.1, -0.2], dtype=lib.float64))
    return m


def test_full_backward_hooks_match_torch():
    torch = _torch()

    def run(lib):
        m = _hooked_pair(lib)
        log = []
        m.register_full_backward_pre_hook(lambda mod, go: log.append(("pre", [None if g is None else g.tolist()
                                                                               for g in go])) or (go[0] * 2, go[1]))
        m.register_full_backward_hook(lambda mod, gi, go: log.append(
            ("post", [None if g is None else g.tolist() for g in gi], [None if g is None else g.tolist() for g in go])))
        h = m.register_full_backward_hook(lambda mod, gi, go: (gi[0] * 10, None, gi[2]))
        a = lib.tensor(np.ones((2, 3)), requires_grad=True)
        b = lib.tensor([1.0, 2.0], dtype=lib.float64, requires_grad=True)
        out, s = m(a, 0.5, b)
        ((out ** 2).sum() + s).backward()
        grads = (a.grad.tolist(), b.grad.tolist(), m.fc.weight.grad.tolist())
        h.remove()
        a.grad = None
        out, s = m(a, 0.5, b.detach())  # only one input requires grad now
        (out ** 2).sum().backward()
        # no input requires grad: the hooks still run, with grad_input all None
        frozen = []
        m.register_full_backward_hook(lambda mod, gi, go: frozen.append(gi))
        m.requires_grad_(True)
        out, _ = m(lib.tensor(np.ones((1, 3))), 1.0, lib.zeros(1, dtype=lib.float64))
        with pytest.warns(UserWarning, match="Full backward hook is firing when gradients are computed with "
                                             "respect to module outputs since no inputs require gradients"):
            out.sum().backward()
        return log, grads, a.grad.tolist(), frozen

    ours, theirs = run(tg), run(torch)
    assert ours[0] == theirs[0] and ours[1] == theirs[1] and ours[2] == theirs[2]
    assert ours[3] == theirs[3] == [(None, None, None)]


@pytest.mark.timeout(120)
def test_backward_hooks_from_many_threads_see_their_own_gradients():
    """Each call has its own hook state: with eight threads calling one module, every hook call
    pairs its own call's grad_output (k) with its own grad_input (k * W), never another's."""
    m = nn.Linear(2, 1, bias=False).double()
    with tg.no_grad():
        m.weight.copy_(tg.tensor([[0.5, -2.0]], dtype=tg.float64))
    seen = []
    lock = threading.Lock()

    def hook(mod, gi, go):
        with lock:
            seen.append((go[0].item(), gi[0].tolist()))

    m.register_full_backward_hook(hook)
    errors = []

    def worker(k):
        try:
            for _ in range(20):
                x = tg.ones(1, 2, dtype=tg.float64, requires_grad=True)
                (m(x) * float(k)).sum().backward()
        except Exception as e:  # noqa: BLE001
            errors.append(e)

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(1, 9)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    assert len(seen) == 160 and sorted({go for go, _ in seen}) == [float(k) for k in range(1, 9)]
    assert all(gi == [[go * 0.5, go * -2.0]] for go, gi in seen)
