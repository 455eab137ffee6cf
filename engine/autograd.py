"""The autograd API: ``backward``, ``grad``, their ``_async`` forms, ``queue_callback``.

>>> from threadgrad import engine
>>> x = engine.tensor([1.0, 2.0], requires_grad=True)
>>> (gx,) = engine.grad((x ** 2).sum(), x)
>>> gx.tolist()
[2.0, 4.0]
"""
from __future__ import annotations

import contextlib
import threading
import warnings
import weakref
from concurrent.futures import Future
from typing import Any, Callable, Sequence, Union

import numpy

from .. import devices

from . import _state, executor as _executor
from ._locks import OwnLock
from ._state import tls
from .executor import GraphTask, _current_streams, get_engine
from .graph import GraphRoot, Node
from .tensor import Tensor, _wrap, gradient_edge

TensorOrTensors = Union[Tensor, Sequence[Tensor]]


def _as_tuple(x: Any, what: str) -> tuple:
    if isinstance(x, Tensor):
        return (x,)
    if not isinstance(x, (tuple, list, str, bytes)) and hasattr(x, "__iter__") and not hasattr(x, "shape"):
        x = tuple(x)  # a generator or another iterable of tensors, as torch takes them
    if isinstance(x, (tuple, list)):
        for i, t in enumerate(x):
            if not isinstance(t, Tensor):
                raise TypeError(f"{what}[{i}] must be a Tensor, got {type(t).__name__}")
        return tuple(x)
    raise TypeError(f"{what} must be a Tensor or a sequence of Tensors, got {type(x).__name__}")


def _inputs_tuple(inputs: Any, api: str) -> tuple:
    """``inputs`` of backward()/grad() (``api``) as a non-empty tuple of tensors that require
    grad, refused in torch's words."""
    inp = _as_tuple(inputs, "inputs")
    if not inp:
        raise RuntimeError(f"`inputs` argument to `{api}()` cannot be empty.")
    for i, t in enumerate(inp):
        if not t._rg:
            if api == "backward":  # torch's run_backward calls retain_grad() on each input first
                raise RuntimeError("can't retain_grad on Tensor that has requires_grad=False "
                                   f"(inputs[{i}] of backward())")
            raise RuntimeError(f"One of the differentiated Tensors does not require grad (inputs[{i}])")
    return inp


def _complex_mismatch(i: int, grad_dtype: Any, out_dtype: Any) -> RuntimeError:
    """torch's error for a complex gradient of a real output, or a real one of a complex output
    (a cast would drop the imaginary part, or invent a zero one)."""
    return RuntimeError(
        "For complex Tensors, both grad_output and output are required to have the same dtype. "
        f"Mismatch in dtype: grad_output[{i}] has a dtype of {grad_dtype} and output[{i}] has a dtype of {out_dtype}."
    )


def _make_grads(outputs: tuple, grads: Any, create_graph: bool, what: str) -> list:
    """Check or create the root gradients: one per output, same shape/device, float dtype."""
    for out in outputs:
        if out._base is not None:  # See Note [Stale views] in ops/views.py
            _state.refresh_view(out, what)
    if grads is None and len(outputs) == 1:
        out = outputs[0]
        if out._rg and not out._data.shape:
            # The usual call, loss.backward() on a 0-d loss: its gradient is a 0-d one (the
            # general loop below makes the same; measured: 3.2 -> 1.3 us under cProfile)
            dev = out.device
            with dev.guard():
                return [_wrap(dev.xp.asarray(1, dtype=out._data.dtype), dev)]
    if grads is None:
        grads = (None,) * len(outputs)
    elif isinstance(grads, Tensor) or not isinstance(grads, (tuple, list)):
        grads = (grads,)
    if len(grads) != len(outputs):
        raise RuntimeError(f"got {len(outputs)} tensors and {len(grads)} gradients")
    result = []
    for i, (out, g) in enumerate(zip(outputs, grads)):
        if not out._rg:
            raise RuntimeError(f"element {i} of tensors does not require grad and does not have a grad_fn")
        if g is None:
            if out._data.size != 1:
                raise RuntimeError(
                    f"grad can be implicitly created only for scalar outputs (output {i} has shape {tuple(out.shape)}); "
                    f"pass a gradient of that shape, e.g. y.backward(engine.ones_like(y))"
                )
            xp = out.device.xp
            with out.device.guard():
                # A 0-d output (a loss) by asarray: numpy's ones() is Python code (measured 0.99 -> 0.24 us)
                one = xp.asarray(1, dtype=out.dtype) if not out._data.shape else xp.ones(out.shape, dtype=out.dtype)
                result.append(_wrap(one, out.device))
            continue
        if not isinstance(g, Tensor):
            if numpy.iscomplexobj(g) != (out.dtype.kind == "c"):  # before the cast drops an imaginary part
                raise _complex_mismatch(i, getattr(g, "dtype", None) or numpy.asarray(g).dtype, out.dtype)
            g = Tensor(out.device.xp.asarray(g, dtype=out.dtype), out.device)
        if g.shape != out.shape:
            raise RuntimeError(
                f"Mismatch in shape: grad_output[{i}] has a shape of {tuple(g.shape)} and output[{i}] has a shape of {tuple(out.shape)}."
            )
        if g.device is not out.device:
            raise RuntimeError(f"{what}[{i}] is on device {g.device}, but output[{i}] is on device {out.device}; move it with .to()")
        if g.dtype != out.dtype:
            if (g.dtype.kind == "c") != (out.dtype.kind == "c"):
                raise _complex_mismatch(i, g.dtype, out.dtype)
            if g.dtype.kind not in "fc":
                raise TypeError(f"{what}[{i}] has dtype {g.dtype}; a gradient must have a floating point dtype like output[{i}] ({out.dtype})")
            g = Tensor(g._data.astype(out.dtype), out.device)
        elif not (create_graph and g._rg):
            # A new Tensor object over the same array: the user keeps theirs, so the
            # AccumulateGrad steal rule sees the array shared and copies (no aliasing).
            g = _wrap(g._data, g.device)
        result.append(g)
    return result


def _compute_dependencies(gt: GraphTask, root: Node) -> None:
    """Count, for every node reachable from ``root``, its incoming edges (iteratively).

    A node is first reached when it enters ``deps``, so ``deps`` doubles as the visited set
    (the root has no incoming edge and is never a key). Measured: 0.45 -> 0.3 us per node."""
    deps = gt.dependencies
    cut = gt.cut
    stack = [root]
    pop, push = stack.pop, stack.append
    while stack:
        for edge in pop().next_edges:
            nxt = edge[0]
            if nxt is None or (cut and edge in cut):
                continue
            if nxt in deps:
                deps[nxt] += 1
            else:
                deps[nxt] = 1
                push(nxt)


def _compute_dependencies_and_needed(gt: GraphTask, root: Node, must_run: set) -> None:
    """For grad()/backward(inputs=): count dependencies as :func:`_compute_dependencies`
    does and find the nodes that must run (PyTorch's ``exec_info``): those on a path from
    ``root`` to a captured or must-run node. Captured nodes are evaluated (to read their
    inputs) but run only if needed themselves. See Note [Needed nodes]."""
    if not gt.cut and _dependencies_if_every_end_is_wanted(gt, root, must_run):
        return
    gt.dependencies.clear()
    _post_order_walk(gt, root, must_run)


# Note [Needed nodes]
# ~~~~~~~~~~~~~~~~~~~
# As torch's exec_info: grad() captures the gradient arriving at each input's node, and the
# node runs only if it is needed (on a path to another input); backward(inputs=) instead
# makes each input's node needed (must_run), so it runs with its hooks. A single root is
# torch's graph root (no dummy node above it): it is always evaluated, so its tensor hooks
# and retains_grad run even when it is neither needed nor captured; _capture_and_call runs
# only those for it, as for a captured node that is not needed.
#
# Where the graph ends (a node from which no edge leads on: a leaf's AccumulateGrad, or a
# node whose inputs need no gradient), a node is needed only if it must run. Everywhere
# else a node is needed if one of its successors is needed or captured. So when every end
# the walk reaches is captured or must run, as in grad(loss, leaves) and
# backward(inputs=leaves), every node that is not an end is needed: each path from it
# leads to a wanted end. Then one plain dependency walk that also checks the ends replaces
# the post-order walk (measured on a 10,000-node chain, same run: 0.37 -> 0.16 us per node;
# a plain backward's count takes 0.15), and ``runnable`` stays None: _route tests no edge.
# That is safe only without no_grad_vars, whose cut edges _route skips through the runnable
# test, hence the ``not gt.cut`` guard. A graph with an end nobody asked for (a leaf that
# requires grad left out of ``inputs``) takes the post-order walk after the partial count
# is dropped; an AccumulateGrad is checked when first reached, not when popped, so a
# depth-first walk that meets such a leaf early wastes little of the graph.

def _dependencies_if_every_end_is_wanted(gt: GraphTask, root: Node, must_run: set) -> bool:
    """:func:`_compute_dependencies` that also checks every end it reaches; True and
    ``exec_info`` set if each end is captured or must run, False (counts left partial)
    at the first that is not. See Note [Needed nodes]."""
    deps = gt.dependencies
    captures = gt.captures
    stack = [root]
    pop, push = stack.pop, stack.append
    while stack:
        fn = pop()
        end = True
        for edge in fn.next_edges:
            nxt = edge[0]
            if nxt is None:
                continue
            end = False
            if nxt in deps:
                deps[nxt] += 1
            else:
                if not nxt.next_edges and nxt not in captures and nxt not in must_run:  # type: ignore[operator]
                    return False  # an AccumulateGrad nobody asked for, seen as soon as reached
                deps[nxt] = 1
                push(nxt)
        if end and fn not in captures and fn not in must_run:  # type: ignore[operator]
            return False
    # Every node is needed but the captured ends that need not run. (A captured node with
    # successors leads on to wanted ends, so it is needed, as the post-order walk finds.)
    needed = set(deps)
    needed.add(root)
    needed.difference_update([n for n in captures if n not in must_run and _is_end(n)])  # type: ignore[union-attr]
    gt.exec_info = needed
    return True


def _is_end(node: Node) -> bool:
    for edge in node.next_edges:
        if edge[0] is not None:
            return False
    return True


def _post_order_walk(gt: GraphTask, root: Node, must_run: set) -> None:
    """:func:`_compute_dependencies_and_needed` for any graph: count dependencies and find
    the needed nodes in one walk.

    One iterative post-order DFS: a node is finished when its edges are exhausted, and then it
    marks its parent needed if it is needed or captured. In a DAG a node reached again is
    already finished, so its status is final. Measured on a 10,000-node chain: 0.35 + 1.2 us
    per node as two passes -> 0.9 us per node as one (in a slow phase of the machine; 0.37
    in a quiet one, against 0.15 for a plain count).
    """
    deps = gt.dependencies
    cut = gt.cut
    captures = gt.captures
    needed: set = set()
    stack = [(root, iter(root.next_edges))]
    push, pop = stack.append, stack.pop
    while stack:
        top = stack[-1]
        fn = top[0]
        for edge in top[1]:
            nxt = edge[0]
            if nxt is None or (cut and edge in cut):
                continue
            if nxt in deps:
                deps[nxt] += 1
                if nxt in needed or nxt in captures:  # type: ignore[operator]
                    needed.add(fn)
            else:
                deps[nxt] = 1
                push((nxt, iter(nxt.next_edges)))
                break
        else:
            pop()
            if fn in must_run:
                needed.add(fn)
            if stack and (fn in needed or fn in captures):  # type: ignore[operator]
                needed.add(stack[-1][0])
    needed.add(root)
    gt.exec_info = needed
    gt.runnable = needed.union(captures)  # type: ignore[arg-type]


def _run_backward(outputs: tuple, grads: list, keep_graph: bool, create_graph: bool,
                  inputs: tuple | None, accumulate: bool, no_grad_vars: tuple = ()) -> GraphTask:
    """Build the GraphTask for one backward()/grad() call and execute it; return it done."""
    eng = get_engine()
    edges = (gradient_edge(outputs[0]),) if len(outputs) == 1 else tuple([gradient_edge(t) for t in outputs])
    root = GraphRoot(edges, grads)
    gt = GraphTask(keep_graph, create_graph, tls.total_depth + 1 if tls.current_task is not None else 0, None)  # type: ignore[arg-type]
    if no_grad_vars:
        gt.cut = frozenset(gradient_edge(t) for t in no_grad_vars if t._rg)
    if inputs is not None:
        gt.captures = {}
        must_run = set()
        for idx, t in enumerate(inputs):
            node, nr = gradient_edge(t)
            if accumulate:
                # backward(inputs=): each input's node runs, as torch's (a leaf's AccumulateGrad;
                # a non-leaf's grad_fn, whose retains_grad hook fills its .grad: see backward())
                must_run.add(node)
            else:
                gt.captures.setdefault(node, []).append((nr, idx))
        gt.captured = [None] * len(inputs)
        _compute_dependencies_and_needed(gt, root, must_run)
        if len(edges) == 1 and edges[0][0] is not None:
            # The single root is always evaluated (Note [Needed nodes]): as a capture point with
            # nothing to capture, it reaches _capture_and_call, never the executor's fast path.
            gt.captures.setdefault(edges[0][0], [])
            if gt.runnable is not None:
                gt.runnable.add(edges[0][0])
    else:
        _compute_dependencies(gt, root)
    if _executor._profiler is None:
        eng.execute(gt, root)
    else:  # the call's span: See Note [Profiler hooks] in executor.py
        _executor._profiler.run_call(eng.execute, gt, root)
    return gt


class _Reported(Exception):
    """Stands in GraphTask.error once the caller has taken the real exception."""


_REPORTED = _Reported("this backward call failed; its exception was raised to the caller")


def _result(gt: GraphTask) -> Any:
    """The finished GraphTask's result, or raise its exception. Before raising, the task
    drops its references to the exception: the exception's traceback holds the frames that
    ran the task (their locals hold the task), so exception -> traceback -> frame -> task ->
    exception would be a cycle keeping the whole failed graph, saved activations included,
    alive until the cycle collector runs. The task stays failed for any of its tasks still
    in flight (``error`` is not None)."""
    e = gt.error
    if e is None:
        return gt.captured if gt.captures is not None else None
    gt.error = _REPORTED
    try:
        raise e
    finally:
        e = None


def backward(tensors: TensorOrTensors, grad_tensors: Any = None, retain_graph: bool | None = None,
             create_graph: bool = False, inputs: TensorOrTensors | None = None) -> None:
    """Accumulate the gradient of ``tensors`` into the ``.grad`` of every leaf they depend on
    (or only of ``inputs``). Non-scalar outputs need ``grad_tensors`` of their shape.

    ``retain_graph`` defaults to ``create_graph``; without it the graph's saved tensors are
    freed as it runs. Returns when every node has run and every final callback has run.

    >>> from threadgrad import engine
    >>> w = engine.tensor([3.0], requires_grad=True)
    >>> engine.backward((w * w).sum())
    >>> w.grad.tolist()
    [6.0]
    """
    outputs = _as_tuple(tensors, "tensors")
    inp = None if inputs is None else _inputs_tuple(inputs, "backward")
    if inp is not None:
        # As torch's run_backward: a non-leaf input's gradient reaches its .grad through its
        # retains_grad hook, run once where it is captured (a no-op on leaves, whose
        # AccumulateGrad runs). Accumulating the capture as well counted it twice with an
        # earlier retain_grad(). Like torch, the tensor keeps retains_grad afterwards.
        for t in inp:
            t.retain_grad()
    grads = _make_grads(outputs, grad_tensors, create_graph, "grad_tensors")
    if create_graph:
        # torch's TORCH_WARN_ONCE (Engine::execute); Python's default filter shows it once per
        # call site.
        warnings.warn(CREATE_GRAPH_WARNING, UserWarning, stacklevel=2)
    keep = create_graph if retain_graph is None else bool(retain_graph)
    _result(_run_backward(outputs, grads, keep, create_graph, inp, accumulate=True))


CREATE_GRAPH_WARNING = (
    "Using backward() with create_graph=True will create a reference cycle between the parameter and its gradient "
    "which can cause a memory leak. We recommend using autograd.grad when creating the graph to avoid this. If you "
    "have to use this function, make sure to reset the .grad fields of your parameters to None after use to break "
    "the cycle and avoid the leak."
)


def grad(outputs: TensorOrTensors, inputs: TensorOrTensors, grad_outputs: Any = None,
         retain_graph: bool | None = None, create_graph: bool = False, allow_unused: bool | None = None,
         no_grad_vars: TensorOrTensors | None = None, materialize_grads: bool = False) -> tuple:
    """Return d(outputs)/d(input) for each input, without touching any ``.grad``.

    Only the nodes on paths from ``outputs`` to ``inputs`` run. An input the outputs do not
    depend on is an error unless ``allow_unused`` (then None, or zeros with
    ``materialize_grads``). ``no_grad_vars`` cuts every gradient path through those tensors.

    >>> from threadgrad import engine
    >>> x = engine.tensor(2.0, requires_grad=True)
    >>> (g,) = engine.grad(x ** 3, x, create_graph=True)
    >>> (gg,) = engine.grad(g, x)
    >>> g.item(), gg.item()
    (12.0, 12.0)
    """
    if allow_unused is None:
        allow_unused = materialize_grads
    elif not allow_unused and materialize_grads:
        raise ValueError(
            "Expected allow_unused to be True or not passed when materialize_grads=True, but got: allow_unused=False."
        )
    outs = _as_tuple(outputs, "outputs")
    inps = _inputs_tuple(inputs, "grad")
    cut = _as_tuple(no_grad_vars, "no_grad_vars") if no_grad_vars is not None else ()
    grads = _make_grads(outs, grad_outputs, create_graph, "grad_outputs")
    keep = create_graph if retain_graph is None else bool(retain_graph)
    gt = _run_backward(outs, grads, keep, create_graph, inps, accumulate=False, no_grad_vars=cut)
    result = list(_result(gt))
    for i, g in enumerate(result):
        if g is None:
            if not allow_unused:
                raise RuntimeError(
                    f"The differentiated Tensor at index {i} appears to not have been used in the graph. "
                    "Set allow_unused=True if this is the desired behavior."
                )
            if materialize_grads:
                t = inps[i]
                with t.device.guard():
                    result[i] = _wrap(t.device.xp.zeros(t.shape, dtype=t.dtype), t.device)
                # torch's zeros_like(input, requires_grad=create_graph): a leaf a further grad can reach
                result[i]._rg = create_graph
    return tuple(result)


def _async(fn: Callable[..., Any], args: tuple, kwargs: dict) -> Future:
    """Run a whole backward()/grad() call on an engine pool thread; return its Future."""
    fut: Future = Future()
    fut.set_running_or_notify_cancel()
    # The call must see the caller's thread-local state, as a synchronous call would.
    state = (tls.grad_enabled, tls.anomaly, tls.anomaly_check_nan, tls.saved_hooks, tls.saved_hooks_disabled)
    # See Note [Streams]: the call runs on the caller's current streams, so the root gradients
    # are made there and the caller's streams are the ones synced before the future completes.
    streams = _current_streams() if devices.streams_in_use else {}

    def job() -> None:
        # The exception's traceback will hold this frame: it must not reach the future that
        # holds the exception (a cycle), so the future leaves the closure cell first.
        nonlocal fut
        f, fut = fut, None
        (tls.grad_enabled, tls.anomaly, tls.anomaly_check_nan, tls.saved_hooks, tls.saved_hooks_disabled) = state
        result = error = None
        try:
            with contextlib.ExitStack() as stack:
                for dev, stream in streams.items():
                    stack.enter_context(dev.stream_context(stream))
                result = fn(*args, **kwargs)
        except BaseException as e:  # noqa: BLE001 - surfaces from future.result()
            error = e
        finally:
            # The pool thread's defaults (and streams) again before the future completes: its
            # done-callbacks run on this thread, and must not run under the caller's state.
            tls.grad_enabled, tls.anomaly, tls.anomaly_check_nan, tls.saved_hooks = True, False, True, ()
            tls.saved_hooks_disabled = None
        try:
            if error is None:
                f.set_result(result)
            else:
                f.set_exception(error)
        finally:
            f = result = error = None

    returned = fut
    get_engine().run_async(job)
    return returned


def backward_async(tensors: TensorOrTensors, grad_tensors: Any = None, retain_graph: bool | None = None,
                   create_graph: bool = False, inputs: TensorOrTensors | None = None) -> Future:
    """Like :func:`backward`, but returns a ``concurrent.futures.Future`` at once; the work
    runs on engine threads and ``future.result()`` returns None or raises the error."""
    return _async(backward, (tensors, grad_tensors, retain_graph, create_graph, inputs), {})


def grad_async(outputs: TensorOrTensors, inputs: TensorOrTensors, grad_outputs: Any = None,
               retain_graph: bool | None = None, create_graph: bool = False, allow_unused: bool | None = None,
               no_grad_vars: TensorOrTensors | None = None, materialize_grads: bool = False) -> Future:
    """Like :func:`grad`, returning a Future whose result is the tuple of gradients."""
    return _async(grad, (outputs, inputs, grad_outputs, retain_graph, create_graph, allow_unused,
                         no_grad_vars, materialize_grads), {})


def current_graph_task() -> GraphTask | None:
    """The GraphTask of the innermost backward call running a node (or hook) on this thread,
    None outside backward. It tells backward calls apart (an observer keeps it, and reads its
    ``done`` later); ``queue_callback`` binds to the same task."""
    return tls.current_task


def queue_callback(fn: Callable[[], None]) -> None:
    """Run ``fn()`` once, after every node of the innermost running backward call has run
    and before that call returns. Only valid while a backward runs (from a node or hook)."""
    gt = tls.current_task
    if gt is None:
        raise RuntimeError("Final callbacks can only be installed during backward pass.")
    if not callable(fn):
        raise TypeError(f"queue_callback needs a callable, got {type(fn).__name__}")
    with gt.lock:
        gt.final_callbacks.append(fn)


class _MultiHandle:
    """The handle of :func:`register_multi_grad_hook`: ``remove()`` removes every tensor hook."""

    __slots__ = ("handles",)

    def __init__(self, handles: list) -> None:
        self.handles = handles

    def remove(self) -> None:
        for h in self.handles:
            h.remove()

    def __enter__(self) -> "_MultiHandle":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.remove()


def register_multi_grad_hook(tensors: Sequence[Tensor], fn: Callable, *, mode: str = "all") -> _MultiHandle:
    """torch.autograd.graph.register_multi_grad_hook: one hook over several tensors.

    ``mode="all"``: ``fn(grads)`` runs once per backward call that computes a gradient for
    any of ``tensors``, with one entry per tensor (None for those the call did not reach). It
    runs as a final callback of that call (``queue_callback``), after every node; torch runs it
    as soon as the last of these gradients is computed, so only its order relative to other
    hooks differs. ``mode="any"``: ``fn(grad)`` runs with the first of these gradients each
    backward call computes. Safe with concurrent backward calls: each call has its own state.
    """
    if mode not in ("all", "any"):
        raise ValueError(f"Expects mode to be one of ('all', 'any') but got {mode}")
    tensors = tuple(tensors)
    box = OwnLock()  # a lock for the hooks' closures, remade at fork (Note [Locks across fork])
    handles = []
    if mode == "all":
        pending: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # GraphTask -> grads

        def fire(gt: GraphTask) -> None:
            with box.lock:
                grads = pending.pop(gt)
            fn(tuple(grads))

        def make(i: int) -> Callable:
            def hook(g: Any) -> None:
                gt = tls.current_task
                with box.lock:
                    grads = pending.get(gt)
                    first = grads is None
                    if first:
                        grads = pending[gt] = [None] * len(tensors)
                    grads[i] = g
                if first:
                    queue_callback(lambda: fire(gt))
            return hook

        handles = [t.register_hook(make(i)) for i, t in enumerate(tensors)]
    else:
        fired: weakref.WeakSet = weakref.WeakSet()  # GraphTasks that ran fn already

        def hook_any(g: Any) -> None:
            gt = tls.current_task
            with box.lock:
                if gt in fired:
                    return
                fired.add(gt)
            fn(g)

        handles = [t.register_hook(hook_any) for t in tensors]
    return _MultiHandle(handles)


def set_cpu_workers(n: int) -> int:
    """Run the ready cpu nodes of each backward on ``n`` helper threads beside its caller;
    return the previous value.

    0, the default, is PyTorch's schedule: the thread that called backward runs every cpu node
    of its call itself, in the engine's exact priority order. With ``n > 0``, a backward started
    afterwards is parallel: independent ready cpu nodes run at once on the caller and the
    helpers (shared in turn by the parallel calls in flight). Gradients are the same; the order
    in which independent nodes run, and the thread a node or hook runs on, are not fixed.
    It helps where nodes release the GIL (BLAS, large numpy kernels) and, on free-threaded
    CPython, everywhere; with the GIL, tiny ops get slower. docs/autograd.md says which
    orderings still hold; Note [Parallel cpu workers] in engine/executor.py how it works.
    """
    return get_engine().set_cpu_workers(n)
