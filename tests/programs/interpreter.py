"""Run a generated program (generator.py) on a backend (backends.py), and the two oracles.

``run(program, backend, concurrent)`` runs it for real: every feature as written (devices,
checkpoints, reentrant Functions, hooks registered by their threads, retain_grad, the calls
of each thread on its own thread, faults). ``reference(program, backend)`` is the
straightforward reading, on one thread: the forward built plainly (a checkpoint is a direct
call, a reentrant Function its plain op, a device hop a ``clone``), the hooks registered in
program order, and each call computed alone by one ``grad()`` of its own; the ``.grad`` of
leaves and retained values, and what post-accumulate-grad hooks see, are summed here in
numpy instead of by the engine. Both give an ``Outcome``; ``compare`` lists differences.

Tolerance (``RTOL``): 1e-12 relative (and absolute, for values near 0). Exact equality is
not a property the engine has: tanh/exp and matmul are not exact in float64, and several
gradients meeting in one input buffer or one ``.grad`` are summed in the order the schedule
gives, which moves the last bits. A lost, doubled or misrouted contribution moves them by
far more: gradient outputs are +-1 or +-2 and values are bounded (generator.BOUND).
Counts (hook calls), None-ness, exception types and messages are compared exactly.
"""
from __future__ import annotations

import random
import threading
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .backends import FAULT_MESSAGE, raise_fault

RTOL = 1e-12
FAULT_TYPES = {"exc": "InjectedFault", "kbi": "KeyboardInterrupt"}


@dataclass
class Outcome:
    calls: dict = field(default_factory=dict)   # call id -> ("ok", [array|None] | None) or ("raised", type, msg)
    grads: dict = field(default_factory=dict)   # leaf or retained name -> array | None
    hooks: dict = field(default_factory=dict)   # hook id -> [count, sum of what it saw | None]
    # The reference saw a call fail in a program hook (not an injected fault): how much of
    # that backward reached the leaves first depends on the engine's order, so .grad values
    # are not compared (call outcomes and hook counts still are).
    partial: bool = False


def outcome_to_json(o: Outcome) -> dict:
    """``o`` as plain JSON data (arrays as nested lists), for outcomes recorded from torch."""
    arr = (lambda a: None if a is None else a.tolist())
    calls = {str(k): (["ok", None if v[1] is None else [arr(a) for a in v[1]]] if v[0] == "ok" else list(v))
             for k, v in o.calls.items()}
    return {"calls": calls, "grads": {k: arr(v) for k, v in o.grads.items()},
            "hooks": {str(k): list(v) for k, v in o.hooks.items()}, "partial": o.partial}


def outcome_from_json(d: dict) -> Outcome:
    """The inverse of :func:`outcome_to_json`."""
    arr = (lambda a: None if a is None else np.array(a, dtype=np.float64))
    calls = {int(k): (("ok", None if v[1] is None else [arr(a) for a in v[1]]) if v[0] == "ok" else tuple(v))
             for k, v in d["calls"].items()}
    return Outcome(calls=calls, grads={k: arr(v) for k, v in d["grads"].items()},
                   hooks={int(k): list(v) for k, v in d["hooks"].items()}, partial=d["partial"])


# --- the forward --------------------------------------------------------------------------

def _apply(be: Any, step: dict, env: dict, plain: bool) -> Any:
    op, a = step["op"], [env[x] for x in step["args"]]
    if op in ("add", "mul", "tanh", "exp", "matmul", "clone", "detach"):
        return getattr(be, op)(*a)
    if op == "scale":
        return be.mul(a[0], step["factor"])
    if op == "rowroll":  # basic slicing and cat: rows (1, 2, 0)
        return be.cat([a[0][1:], a[0][:1]], 0)
    if op == "splitswap":  # split views, put back in the other order
        top, rest = be.split(a[0], [1, 2], 0)
        return be.cat([rest, top], 0)
    if op == "treshape":  # transpose, flatten (a copy of a non-contiguous view), back to 3x3
        return be.reshape(be.reshape(be.transpose(a[0], 0, 1), (9,)), (3, 3))
    if op == "sumk":  # a broadcasting add of a keepdim reduction
        return be.add(a[0], be.sum(a[0], 0, True))
    if op == "to":
        return be.clone(a[0]) if plain else be.hop(a[0], step["device"])
    if op == "r_tanh":
        return be.tanh(a[0]) if plain else be.RTanh.apply(a[0])
    if op == "r_mul":
        return be.mul(*a) if plain else be.RMul.apply(*a)
    if op == "fault":
        return be.Fault.apply(a[0], step["kind"])
    if op == "vwrite":
        return _vwrite(be, step["variant"], *a)
    if op == "checkpoint":
        leaves = {k: v for k, v in env.items() if k.startswith("p")}

        def body(*args: Any) -> Any:
            benv = dict(leaves)
            benv.update({f"a{i}": t for i, t in enumerate(args)})
            for s in step["body"]:
                benv[s["out"]] = _apply(be, s, benv, plain)
            return benv[step["result"]]

        if not plain:
            return be.checkpoint(body, *a, use_reentrant=step["use_reentrant"])
        # The reentrant variant's node has an edge to every argument (backends.Tie); the
        # non-reentrant one records the body's own graph only, as the plain run does.
        return be.Tie.apply(body(*a), *a) if step["use_reentrant"] else body(*a)
    raise AssertionError(f"unknown op {op!r}")


def _vwrite(be: Any, variant: str, x: Any, y: Any) -> Any:
    """An in-place write through a view (generator.VWRITE), on a clone of ``x``: what torch
    records as CopySlices, and the view cases issue 16 fixed."""
    out = be.clone(x)
    if variant == "slice_mul":  # a recorded in-place op on a basic-slice view: the base rebases
        out[1:].mul_(y[1:])
    elif variant == "buffer_fill":  # fill a preallocated buffer outside the graph, slice by slice
        out = be.zeros_like(x)
        out[0] = y[0] * 2.0
        out[1:] = x[1:]
    elif variant == "alias_write":  # through a view of a detach() alias: the alias joins the graph
        out = out.detach()
        out[1].add_(y[1])
    elif variant == "nograd_view":  # a view made under no_grad: requires grad, gradient goes nowhere
        with be.no_grad():
            v = out[1:]
        out = be.cat([out[:1], v * y[1:]], 0)
    elif variant == "stale_view":  # a view taken before an in-place op on its base
        v = out[:2]
        out.mul_(y)
        out = be.cat([v, out[2:]], 0)
    elif variant == "tview_add":  # a view of a view (transpose, then a row) written in place
        be.transpose(out, 0, 1)[0].add_(y[0])
    elif variant == "dirty_view":  # a custom Function marks a view dirty (issue 33, item 1)
        v = out[1:]
        be.DirtyMul.apply(v, y[1:])
        if v.requires_grad:
            v.register_hook(_bend(be))  # on the view's new history: sees only its own later use
        out = be.add(out, be.cat([v, v[:1]], 0))
    elif variant == "dirty_retained":  # retain_grad(), then a Function marks it dirty (item 2)
        if out.requires_grad:
            out.retain_grad()
            out.register_hook(_bend(be))  # stays on the old node, as torch's
        out = be.DirtyMul.apply(out, y)
    elif variant == "slices_hook":  # a node post-hook on CopySlices that does more than scale (item 4)
        out[1].mul_(y[1])
        _post(be, out)
    elif variant == "composite_vm":  # matmul of a vector and a matrix, a post-hook on its node (item 5)
        r = be.matmul(x[0], y)
        _post(be, r)
        out = be.add(out, r)
    elif variant == "composite_index":  # x[1, 0:2]: Select, then Slice; a post-hook on its node (item 5)
        r = out[1, 0:2]
        _post(be, r)
        out = be.add(out, be.cat([r, r[:1]], 0))
    else:
        raise AssertionError(f"unknown vwrite variant {variant!r}")
    return out


def _bend(be: Any) -> Any:
    """A tensor hook that changes the gradient by more than a scaling: g / 2 + 1/4."""
    return lambda g: be.add(be.mul(g, 0.5), 0.25)


def _post(be: Any, t: Any) -> None:
    """A node post-hook on ``t``'s grad_fn (if any) that gives each gradient it returns
    g / 2 + 1/4 (None stays None): it changes them by more than a scaling."""
    if t.grad_fn is not None:
        t.grad_fn.register_hook(lambda gins, gouts: tuple(None if g is None else be.add(be.mul(g, 0.5), 0.25)
                                                          for g in gins))


def build(program: dict, be: Any, plain: bool) -> dict:
    """name -> tensor for the leaves, constants and every step's output (plain: no faults)."""
    env = {n: be.tensor(v, True) for n, v in program["leaves"].items()}
    env.update({n: be.tensor(v, False) for n, v in program["consts"].items()})
    for step in program["steps"]:
        if plain and step["op"] == "fault":
            continue
        if step.get("saved_hooks") and not plain:  # the plain reference saves as is: same values
            with be.saved_hooks(step["saved_hooks"]):
                env[step["out"]] = _apply(be, step, env, plain)
        else:
            env[step["out"]] = _apply(be, step, env, plain)
    return env


# --- hooks --------------------------------------------------------------------------------

class _Recorder:
    def __init__(self, be: Any, with_sums: bool):
        self.be, self.with_sums = be, with_sums
        self.lock = threading.Lock()
        self.hooks: dict = {}

    def __call__(self, hid: int, g: Any, with_sum: bool = True) -> None:
        if g is not None and with_sum:
            s = float((g if isinstance(g, np.ndarray) else self.be.to_numpy(g)).sum())
        else:
            s = None
        with self.lock:
            rec = self.hooks.setdefault(hid, [0, 0.0 if with_sum else None])
            rec[0] += 1
            if rec[1] is not None and s is not None:
                rec[1] += s


def _register(hook: dict, t: Any, be: Any, rec: _Recorder) -> Any:
    """Register one program hook on tensor ``t``; return its handle."""
    hid, kind, scale, shift = hook["id"], hook["kind"], hook.get("scale"), hook.get("shift")

    def change(g):  # what a tensor or pre hook returns for g (None: keep it)
        if scale is None and shift is None:
            return None
        # (given None, a hook that changes the gradient raises TypeError, in both libraries)
        g = g if scale is None else be.mul(g, scale)
        return g if shift is None else be.add(g, shift)

    if kind == "tensor":
        def fn(g):
            rec(hid, g)
            return change(g)
        return t.register_hook(fn)
    if kind == "pre":
        def fn(gouts):
            rec(hid, gouts[0])
            new = change(gouts[0])
            return None if new is None else (new,) + tuple(gouts[1:])
        return t.grad_fn.register_prehook(fn)
    if kind == "post":
        def fn(gins, gouts):
            rec(hid, gouts[0])
            if shift is not None:
                return tuple(None if g is None else be.add(g, shift) for g in gins)
            return None
        return t.grad_fn.register_hook(fn)
    if kind == "post_acc":
        inplace = hook.get("inplace_scale")

        def fn(leaf):
            # what .grad holds is only schedule-free when one thread makes the calls
            rec(hid, leaf.grad, with_sum=rec.with_sums)
            if inplace is not None:
                leaf.grad.mul_(inplace)
        return t.register_post_accumulate_grad_hook(fn)
    if kind == "raise":
        fault = hook["fault"]

        def fn(g):
            raise_fault(fault)
        return t.register_hook(fn)
    raise AssertionError(kind)


def _noop_tensor_hook(g: Any) -> None:
    return None


def _noop_pre_hook(gouts: Any) -> None:
    return None


# --- the real run --------------------------------------------------------------------------

def _call(be: Any, env: dict, call: dict) -> tuple:
    root = env[call["root"]]
    gout = be.full_like(call["grad_output"], root)
    inputs = None if call["inputs"] is None else [env[n] for n in call["inputs"]]
    try:
        if call["api"] == "backward":
            be.backward(root, gout, inputs)
            return ("ok", None)
        res = be.grad(root, inputs, gout)
        return ("ok", [None if g is None else be.to_numpy(g) for g in res])
    except BaseException as e:  # noqa: BLE001 - KeyboardInterrupt included: it is a result here
        return ("raised", type(e).__name__, str(e))


def run(program: dict, be: Any, concurrent: bool = True, timeout: float = 60.0) -> Outcome:
    """Run ``program`` with every feature; ``concurrent``: each thread of the program on a
    thread of its own (hook registration, then a barrier, then the calls)."""
    env = build(program, be, plain=False)
    n = len(program["threads"])
    rec = _Recorder(be, with_sums=n == 1)
    out = Outcome()
    lock = threading.Lock()
    churn_targets = sorted({h["target"] for h in program["hooks"]} | set(program["retain"]) |
                           set(program["leaves"]))

    def setup(t: int) -> None:
        if t == program["retain_thread"]:
            for name in program["retain"]:
                env[name].retain_grad()
        for hook in program["hooks"]:
            if hook["thread"] == t:
                _register(hook, env[hook["target"]], be, rec)
        for owner, target in program["temp_hooks"]:
            if owner == t:
                env[target].register_hook(lambda g, _t=target: rec(-1, g)).remove()

    def calls(t: int) -> None:
        for call in program["threads"][t]:
            handles = []
            if program["churn"]:
                rng = random.Random(program["seed"] * 1000 + call["id"])
                x = env[rng.choice(churn_targets)]
                handles.append(x.register_hook(_noop_tensor_hook))
                if x.grad_fn is not None:
                    handles.append(x.grad_fn.register_prehook(_noop_pre_hook))
            result = _call(be, env, call)
            for h in handles:
                h.remove()
            with lock:
                out.calls[call["id"]] = result

    if concurrent and n > 1:
        barrier = threading.Barrier(n)
        errors: list = []

        def body(t: int) -> None:
            try:
                setup(t)
                barrier.wait(timeout)
                calls(t)
            except BaseException as e:  # noqa: BLE001 - re-raised on the caller's thread
                errors.append(e)
                barrier.abort()

        threads = [threading.Thread(target=body, args=(t,), name=f"combo-{t}", daemon=True) for t in range(n)]
        for th in threads:
            th.start()
        for th in threads:
            th.join(timeout)
        hung = [th.name for th in threads if th.is_alive()]
        if hung:
            raise AssertionError(f"threads still running after {timeout}s (hang): {hung}")
        if errors:
            raise errors[0]
    else:
        for t in range(n):
            setup(t)
        for t in range(n):
            calls(t)
    for name in list(program["leaves"]) + list(program["retain"]):
        g = env[name].grad
        out.grads[name] = None if g is None else be.to_numpy(g)
    out.hooks = {k: v for k, v in rec.hooks.items()}
    return out


# --- the sequential reference --------------------------------------------------------------

def reference(program: dict, be: Any) -> Outcome:
    """What ``run`` must give, computed the plain way (see the module docstring)."""
    env = build(program, be, plain=True)
    rec = _Recorder(be, with_sums=len(program["threads"]) == 1)
    out = Outcome()
    for hook in program["hooks"]:
        if hook["kind"] not in ("post_acc", "raise"):
            _register(hook, env[hook["target"]], be, rec)
    seen: dict = {}  # retained name -> the gradient it was given in the current call

    for name in program["retain"]:  # registered last: retain_grad runs after every tensor hook
        env[name].register_hook(lambda g, _n=name: seen.__setitem__(_n, be.to_numpy(g)))
    grads: dict = {name: None for name in list(program["leaves"]) + list(program["retain"])}
    post_acc = [h for h in program["hooks"] if h["kind"] == "post_acc"]
    leaves = sorted(program["leaves"])
    for calls in program["threads"]:
        for call in calls:
            if call["fault"]:
                out.calls[call["id"]] = ("raised", FAULT_TYPES[call["fault"]], FAULT_MESSAGE)
                continue
            seen.clear()
            counts = {hid: r[0] for hid, r in rec.hooks.items()}
            root = env[call["root"]]
            gout = be.full_like(call["grad_output"], root)
            names = call["inputs"] if call["inputs"] is not None else leaves
            # The root is asked for too: torch (one root tensor) always runs the root's tensor
            # hooks and retain_grad, even when no input is reachable from it; capturing it
            # runs exactly those. Its captured gradient is dropped.
            try:
                res = be.grad(root, [env[n] for n in names] + [root], gout)[:len(names)]
            except Exception as e:  # noqa: BLE001 - a hook of the program raised (e.g. given None)
                out.calls[call["id"]] = ("raised", type(e).__name__, str(e))
                out.partial = True
                continue
            res = [None if g is None else be.to_numpy(g) for g in res]
            if call["api"] == "backward":
                _run_input_nodes(program, call, names, res, counts, rec)
            for name, g in seen.items():
                grads[name] = g if grads[name] is None else grads[name] + g
            if call["api"] == "grad":
                out.calls[call["id"]] = ("ok", res)
                continue
            out.calls[call["id"]] = ("ok", None)
            for name, g in zip(names, res):
                if name not in program["leaves"] or g is None:
                    continue  # retained inputs were counted through `seen`
                grads[name] = g if grads[name] is None else grads[name] + g
                for hook in post_acc:
                    if hook["target"] == name:
                        r = rec.hooks.setdefault(hook["id"], [0, 0.0 if rec.with_sums else None])
                        r[0] += 1
                        if r[1] is not None:
                            r[1] += float(grads[name].sum())
                        if hook.get("inplace_scale") is not None:
                            grads[name] = grads[name] * hook["inplace_scale"]
    out.grads = grads
    out.hooks = {k: v for k, v in rec.hooks.items()}
    return out


def _run_input_nodes(program: dict, call: dict, names: list, res: list, counts: dict, rec: _Recorder) -> None:
    """torch's ``backward(inputs=[h])`` for a non-leaf ``h`` *runs* h's node (the engine
    marks it needed, as it does every input of ``backward``; ``grad()`` only captures), so its
    node pre- and post-hooks run on the gradient h got after its tensor hooks. The plain
    ``grad()`` of the reference captures h: when those hooks did not run in this call (h's
    node was not needed for another input), run them here, in program order."""
    for name, g in zip(names, res):
        if name in program["leaves"] or g is None:
            continue
        node_hooks = [h for h in program["hooks"] if h["target"] == name and h["kind"] in ("pre", "post")]
        if not node_hooks or any(rec.hooks.get(h["id"], [0])[0] != counts.get(h["id"], 0) for h in node_hooks):
            continue
        for h in node_hooks:
            if h["kind"] == "pre":
                rec(h["id"], g)
                g = g if h.get("scale") is None else g * h["scale"]
        for h in node_hooks:
            if h["kind"] == "post":
                rec(h["id"], g)


# --- comparing -----------------------------------------------------------------------------

def _close(a: Any, b: Any) -> bool:
    if a is None or b is None:
        return a is None and b is None
    return a.shape == b.shape and bool(np.allclose(a, b, rtol=RTOL, atol=RTOL))


def _strip_node(message: str) -> str:
    """A threadgrad error message without the node threadgrad appends (`` [raised in X ...]``)."""
    return message.split(" [raised in ", 1)[0]


def compare(expected: Outcome, actual: Outcome) -> list:
    """Human-readable differences between two outcomes (empty: they agree)."""
    diffs = []
    for cid in sorted(set(expected.calls) | set(actual.calls)):
        e, a = expected.calls.get(cid), actual.calls.get(cid)
        if e is None or a is None or e[0] != a[0]:
            diffs.append(f"call {cid}: expected {e!r:.300}, got {a!r:.300}")
        elif e[0] == "raised":
            # (threadgrad appends the failing node's name to torch's message: Note [Errors])
            if e[1] != a[1] or (e[2] not in a[2] and _strip_node(e[2]) not in a[2]):
                diffs.append(f"call {cid}: expected {e[1]}({e[2]!r}), got {a[1]}({a[2]!r})")
        elif e[1] is not None and (len(e[1]) != len(a[1]) or not all(map(_close, e[1], a[1]))):
            diffs.append(f"call {cid} (grad): expected {e[1]}, got {a[1]}")
    for name in sorted(set(expected.grads) | set(actual.grads)) if not expected.partial else ():
        e, a = expected.grads.get(name), actual.grads.get(name)
        if not _close(e, a):
            diffs.append(f"{name}.grad: expected {None if e is None else e.tolist()}, "
                         f"got {None if a is None else a.tolist()}")
    for hid in sorted(set(expected.hooks) | set(actual.hooks)):
        e, a = expected.hooks.get(hid, [0, None]), actual.hooks.get(hid, [0, None])
        if e[0] != a[0] or (e[1] is not None and a[1] is not None and
                            not np.isclose(e[1], a[1], rtol=RTOL, atol=RTOL)):
            diffs.append(f"hook {hid}: expected (calls, sum seen) {e}, got {a}")
    return diffs
