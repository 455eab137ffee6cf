"""One seeded generator of random autograd programs, as plain data.

A program is a JSON-ready dict; nothing in it is a tensor or a callable, so the same program
runs on any backend (threadgrad today, torch for the differential check) and prints as is for
a replay. Schema:

``seed``
    the seed it was drawn from (``generate(seed)`` gives the same program again).
``leaves``
    ``{name: 3x3 list of floats}``; every leaf requires grad. Values are multiples of 1/8.
``consts``
    ``{name: 3x3 list}``: tensors that do not require grad.
``steps``
    the forward, in order: ``{"out", "op", "args", ...}``. ``op`` is one of UNARY, BINARY,
    ``"to"`` (with ``"device"``), ``"detach"``, ``"vwrite"`` (with ``"variant"``, one of
    ``VWRITE``: an in-place write through a view of ``args[0]``'s clone, from ``args[1]``), ``"r_tanh"`` / ``"r_mul"`` (a custom Function
    whose backward calls ``grad`` itself: reentrant backward), ``"fault"`` (a custom Function
    whose backward raises ``"kind"``) or ``"checkpoint"`` (with ``"use_reentrant"``, a
    ``"body"`` of steps over the names ``a0, a1, ...`` (its args), the leaves (used as closure
    variables: a parameter used inside and outside) and earlier body names, and ``"result"``).
    Every value is a 3x3 float64 tensor.
    A top-level step may carry ``"saved_hooks"``: it runs under saved-tensor hooks that keep a
    detached copy of each saved tensor (``"copy"``) or a host copy (``"cpu"``, torch's
    ``save_on_cpu``): values are unchanged, so gradients must be too; the unpacked tensors
    must stand for the originals in the graph.
``retain``
    values whose ``retain_grad()`` is called (by thread ``"retain_thread"``).
``hooks``
    ``{"id", "kind", "target", "thread", ...}``, registered concurrently by their threads
    before any call: ``tensor`` (``register_hook``; ``"scale"`` None observes, a number
    returns ``g * scale``), ``pre`` (``grad_fn.register_prehook``, same), ``post``
    (``grad_fn.register_hook``, observes; with a ``"shift"`` it adds it to each gradient it
    returns; a tensor or pre hook with one adds it too), ``post_acc`` (on a leaf; ``"inplace_scale"``
    multiplies ``.grad`` in place, only in single-thread programs), ``raise`` (a tensor hook
    raising ``"fault"``). ``temp_hooks``: ``[thread, target]`` pairs, each a hook registered
    and removed again before the calls (it must never run).
``threads``
    per thread, its calls, run in order: ``{"id", "api": "backward" | "grad", "root",
    "grad_output": 3x3, "inputs": None | [names], "fault": None | "exc" | "kbi"}``. Every
    call retains the graph; ``grad`` uses ``allow_unused=True``.
``churn``
    True: between its calls each thread registers an observing no-op hook on a value of the
    shared graph and removes it after the call (hooks changing while other threads run).

What the generator keeps out, and why (each would make the expected result depend on the
schedule, so no exact comparison is possible):

* the order of hooks on one target: all hooks of a target are registered by one thread, in
  program order (an observing hook sees a different value before and after a scaling one);
* ``backward(inputs=[h])`` for a non-leaf ``h`` not in ``retain``: torch makes ``h`` retain
  its grad from then on, so which concurrent calls fill ``h.grad`` would depend on timing;
* ``post_acc`` hooks modifying ``.grad`` when calls run concurrently (the result depends on
  which call's accumulation the hook follows), and ``post_acc`` / ``tensor`` hooks on a leaf
  used inside a reentrant checkpoint (the inner backward accumulates it separately, so the
  hook counts differ from the plain reference by design, as in torch);
* ``grad()`` or ``backward(inputs=...)`` through a reentrant checkpoint (torch refuses it:
  "Checkpointing is not compatible with .grad()");
* random ops (dropout): the RNG streams of the backends differ, and under threads the
  checkpoint's RNG replay is its own test (tests/engine/test_checkpoint.py);
* in-place ops while calls run: which thread sees which version is a race by definition. The
  forward's in-place writes through views (``generate(seed, inplace=True)``) run before any
  call, on one thread, so they are in.

Faulting calls use a root of their own whose first node raises, so a failing call has run
nothing (no accumulation, no hook) when it fails, whatever the schedule.
"""
from __future__ import annotations

import json
import random
from typing import Any

UNARY = ("tanh", "exp", "clone", "scale", "rowroll", "splitswap", "treshape", "sumk")
# In-place writes through views, done in the forward (before any call, on one thread): only in
# programs made with ``generate(seed, inplace=True)``; interpreter._vwrite says what each does.
VWRITE = ("slice_mul", "buffer_fill", "alias_write", "nograd_view", "stale_view", "tview_add")
# More steps for the differential check against torch (``generate(seed, extended=True)``, issue
# 33): custom Functions marking a view or a retained tensor dirty, node post-hooks on CopySlices
# and on composite ops, all with hooks that change a gradient by more than a scaling.
VWRITE_EXTENDED = ("dirty_view", "dirty_retained", "slices_hook", "composite_vm", "composite_index")
BINARY = ("add", "mul", "matmul")
DEVICES = ("cpu", "virtual:1", "virtual:2")
BOUND = 2.0  # values larger than this get a tanh before exp / mul / matmul: nothing overflows


def _grid(rng: random.Random) -> list:
    return [[rng.randint(-8, 8) / 8 for _ in range(3)] for _ in range(3)]


def _gout(rng: random.Random) -> list:
    return [[float(rng.choice((-2, -1, 1, 2))) for _ in range(3)] for _ in range(3)]


class _Builder:
    """Tracks, per value name: device, requires_grad, a bound on |value|, and whether it
    depends on a reentrant checkpoint."""

    def __init__(self, rng: random.Random, steps: list, info: dict, prefix: str):
        self.rng, self.steps, self.info, self.prefix = rng, steps, info, prefix
        self.n = 0

    def emit(self, op: str, args: list, **extra: Any) -> str:
        name = f"{self.prefix}{self.n}"
        self.n += 1
        self.steps.append({"out": name, "op": op, "args": list(args), **extra})
        a = [self.info[x] for x in args]
        dev = extra.get("device", a[0]["dev"] if a else "cpu")
        rg = any(x["rg"] for x in a) and op != "detach"
        rck = any(x["rck"] for x in a)
        b = max(x["bound"] for x in a)
        if op in ("tanh", "r_tanh"):
            b = 1.0
        elif op == "exp":
            b = 2.72 ** b
        elif op in ("mul", "r_mul"):
            b = a[0]["bound"] * a[1]["bound"]
        elif op == "matmul":
            b = 3 * a[0]["bound"] * a[1]["bound"]
        elif op == "add":
            b = a[0]["bound"] + a[1]["bound"]
        elif op == "sumk":
            b = 4 * b
        elif op == "scale":
            b = abs(extra["factor"]) * b
        elif op == "vwrite":
            bx, by = a[0]["bound"], a[1]["bound"]
            b = {"slice_mul": bx * by, "buffer_fill": max(2 * by, bx), "alias_write": bx + by,
                 "nograd_view": max(bx, bx * by), "stale_view": bx * by, "tview_add": bx + by,
                 "dirty_view": 2 * bx * max(by, 1.0), "dirty_retained": bx * by, "slices_hook": bx * by,
                 "composite_vm": bx + 3 * bx * by, "composite_index": 2 * bx}[extra["variant"]]
            if extra["variant"] == "alias_write":
                rg = a[1]["rg"]  # the alias is outside x's graph: only y's write puts it in one
            elif extra["variant"] == "composite_index":
                rg = a[0]["rg"]  # y is not used
        self.info[name] = {"dev": dev, "rg": rg, "bound": b, "rck": rck}
        return name

    def small(self, x: str) -> str:
        """x itself, or tanh(x) when x may be large."""
        return x if self.info[x]["bound"] <= BOUND else self.emit("tanh", [x])

    def on(self, x: str, dev: str) -> str:
        return x if self.info[x]["dev"] == dev else self.emit("to", [x], device=dev)

    def op(self, pool: list, inplace: bool = False, extended: bool = False) -> str:
        """One random unary/binary/reentrant op over values drawn from ``pool`` (``inplace``: or
        an in-place write through a view, one op in three; ``extended``: from VWRITE_EXTENDED too)."""
        rng = self.rng
        if inplace and rng.random() < 1 / 3:
            x, y = self.small(rng.choice(pool[-4:])), self.small(rng.choice(pool))
            variant = rng.choice(VWRITE + VWRITE_EXTENDED if extended else VWRITE)
            return self.emit("vwrite", [x, self.on(y, self.info[x]["dev"])], variant=variant)
        kind = rng.choice(UNARY + BINARY + ("r_tanh", "r_mul", "to", "detach"))
        x = rng.choice(pool[-4:]) if rng.random() < 0.7 else rng.choice(pool)
        if kind == "to":
            others = [d for d in DEVICES if d != self.info[x]["dev"]]
            return self.emit("to", [x], device=rng.choice(others))
        if kind == "detach":
            if rng.random() < 0.5:  # keep the graph mostly connected
                return self.emit("detach", [x])
            kind = "clone"
        if kind in UNARY or kind == "r_tanh":
            if kind in ("exp", "sumk", "scale"):
                x = self.small(x)
            extra = {"factor": rng.choice((0.5, -2.0, 3.0))} if kind == "scale" else {}
            return self.emit(kind, [x], **extra)
        y = rng.choice(pool)
        x, y = self.small(x), self.small(y)
        y = self.on(y, self.info[x]["dev"])
        return self.emit(kind, [x, y])


def generate(seed: int, inplace: bool = False, extended: bool = False) -> dict:
    """The program of ``seed``: the same dict every time, on every platform. ``inplace`` adds
    in-place writes through views to the forward (``VWRITE``; other seeds' programs are
    unchanged by it). ``extended`` (implies ``inplace``) draws them from ``VWRITE_EXTENDED``
    too, and gives some tensor and node hooks a shift (``"shift"``: the hook adds it, so it does
    more than scale), drawn from a stream of its own: programs made without it are unchanged."""
    inplace = inplace or extended
    rng = random.Random(seed)
    leaves = {f"p{i}": _grid(rng) for i in range(rng.randint(2, 4))}
    consts = {"c0": _grid(rng)}
    info: dict = {n: {"dev": "cpu", "rg": True, "bound": 1.0, "rck": False} for n in leaves}
    info["c0"] = {"dev": "cpu", "rg": False, "bound": 1.0, "rck": False}
    steps: list = []
    top = _Builder(rng, steps, info, "v")
    pool = list(leaves) + ["c0"]
    rck_leaves: set = set()  # leaves used inside a reentrant checkpoint's body
    for _ in range(rng.randint(4, 9)):
        if rng.random() < 0.25:
            pool.append(_checkpoint(rng, top, pool, leaves, rck_leaves))
        else:
            pool.append(top.op(pool, inplace, extended))
    n_threads = rng.choice((1, 2, 2, 3, 4))
    values = [v for v in pool if v.startswith("v") and info[v]["rg"]]
    if not values:  # everything was detached: one more op on a leaf
        values = [top.emit("mul", ["p0", top.on("p1", "cpu")])]
    hookable = [v for v in values] + [p for p in leaves if p not in rck_leaves]
    retain = sorted(set(rng.sample(values, min(len(values), rng.randint(0, 2)))))
    hooks: list = []
    owner = {}  # target -> the one thread that registers its hooks (see the module doc)
    for hid in range(rng.randint(0, 5)):
        kind = rng.choice(("tensor", "tensor", "pre", "post", "post_acc"))
        targets = [p for p in leaves if p not in rck_leaves] if kind == "post_acc" else \
            (values if kind in ("pre", "post") else hookable)
        if not targets:
            continue
        target = rng.choice(targets)
        hook = {"id": hid, "kind": kind, "target": target,
                "thread": owner.setdefault(target, rng.randrange(n_threads))}
        if kind in ("tensor", "pre"):
            hook["scale"] = rng.choice((None, None, 2.0, 0.5, -1.0))
        if kind == "post_acc":
            hook["inplace_scale"] = rng.choice((None, 0.5)) if n_threads == 1 else None
        hooks.append(hook)
    temp_hooks = [[rng.randrange(n_threads), rng.choice(hookable)] for _ in range(rng.randint(0, 3))]
    roots = sorted(set(rng.sample(values, min(len(values), rng.randint(1, 3)))))
    fault_roots: dict = {}
    for _ in range(rng.choice((0, 0, 1, 2))):
        fault = rng.choice(("exc", "kbi"))
        x = top.on(rng.choice(values), rng.choice(DEVICES))
        if rng.random() < 0.5:
            r = top.emit("fault", [x], kind=fault)
        else:
            r = top.emit("clone", [x])
            hooks.append({"id": len(hooks) + 100, "kind": "raise", "target": r, "fault": fault,
                          "thread": rng.randrange(n_threads)})
        fault_roots[r] = fault
    leaf_names = sorted(leaves)
    threads: list = []
    cid = 0
    for _ in range(n_threads):
        calls = []
        for _ in range(rng.randint(1, 3)):
            if fault_roots and rng.random() < 0.3:
                # every leaf asked for: the faulting node is on a path to one, so it runs
                root = rng.choice(sorted(fault_roots))
                api, fault = ("backward", fault_roots[root]) if info[root]["rck"] else \
                    (rng.choice(("backward", "grad")), fault_roots[root])
                inputs = leaf_names if api == "grad" else None
            else:
                root, fault = rng.choice(roots), None
                api = "backward" if info[root]["rck"] else rng.choice(("backward", "grad"))
                inputs = None
            if not fault and (api == "grad" or (not info[root]["rck"] and rng.random() < 0.4)):
                # grad() and backward(inputs=): leaves, retained values, and for grad() any value
                cands = leaf_names + (retain if api == "backward" else values)
                inputs = sorted(set(rng.sample(cands, rng.randint(1, min(3, len(cands))))))
            calls.append({"id": cid, "api": api, "root": root, "grad_output": _gout(rng),
                          "inputs": inputs, "fault": fault})
            cid += 1
        threads.append(calls)
    # Saved-tensor hooks on some top-level ops, drawn from a stream of their own so that the
    # rest of every seed's program is what it was before this feature existed.
    hooks_rng = random.Random(seed * 7919 + 17)
    for step in steps:
        if step["op"] not in ("checkpoint", "fault") and hooks_rng.random() < 0.25:
            step["saved_hooks"] = hooks_rng.choice(("copy", "cpu"))
    if extended:
        # a tensor marked dirty after retain_grad(): its .grad is compared (item 2)
        retain = sorted(set(retain) | {st["out"] for st in steps if st.get("variant") == "dirty_retained"
                                        and info[st["out"]]["rg"]})
        shift_rng = random.Random(seed * 6151 + 3)
        for hook in hooks:
            if hook["kind"] in ("tensor", "pre", "post") and shift_rng.random() < 0.5:
                hook["shift"] = shift_rng.choice((0.25, -0.5))
    return {"seed": seed, "leaves": leaves, "consts": consts, "steps": steps, "retain": retain,
            "retain_thread": rng.randrange(n_threads), "hooks": hooks, "temp_hooks": temp_hooks,
            "threads": threads, "churn": n_threads > 1 and rng.random() < 0.5}


def _checkpoint(rng: random.Random, top: _Builder, pool: list, leaves: dict, rck_leaves: set) -> str:
    """A checkpoint step: args on one device, a body of 1-3 ops that may use leaves directly."""
    reentrant = rng.random() < 0.5
    rg_pool = [v for v in pool if top.info[v]["rg"]]
    args = [top.small(rng.choice(rg_pool))]  # at least one arg requires grad (torch warns else)
    if rng.random() < 0.5:
        args.append(top.on(top.small(rng.choice(pool)), top.info[args[0]]["dev"]))
    body: list = []
    binfo = {f"a{i}": dict(top.info[a]) for i, a in enumerate(args)}
    binfo.update({p: dict(top.info[p]) for p in leaves})
    inner = _Builder(rng, body, binfo, "b")
    bpool = [f"a{i}" for i in range(len(args))]
    for _ in range(rng.randint(1, 3)):
        if rng.random() < 0.3:  # a parameter used inside the checkpoint (and maybe outside)
            p = rng.choice(sorted(leaves))
            if reentrant:
                rck_leaves.add(p)
            bpool.append(inner.op(bpool + [p]))
        else:
            bpool.append(inner.op(bpool))
    result = bpool[-1]
    if not binfo[result]["rg"] or result.startswith("a"):
        result = inner.emit("tanh", [bpool[-1] if binfo[bpool[-1]]["rg"] else "a0"])
    out = top.emit("checkpoint", args, use_reentrant=reentrant, body=body, result=result,
                   device=binfo[result]["dev"])
    top.info[out].update(bound=binfo[result]["bound"], rck=reentrant or top.info[out]["rck"])
    return out


def dumps(program: dict) -> str:
    """The program as one line of JSON (what a failing test prints, for a replay)."""
    return json.dumps(program, separators=(",", ":"))
