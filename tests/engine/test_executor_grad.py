"""engine.grad: inputs, grad_outputs, allow_unused, materialize_grads, no_grad_vars, and
running only the nodes that lie between the outputs and the inputs."""
from __future__ import annotations

import numpy as np
import pytest

from threadgrad import engine, ops
from threadgrad.engine.tensor import grad_accumulator


def test_grad_returns_tuple_and_leaves_dot_grad_alone():
    x = engine.tensor([1.0, 2.0], requires_grad=True)
    w = engine.tensor([3.0, 4.0], requires_grad=True)
    y = (x * w).sum()
    res = engine.grad(y, [x, w])
    assert isinstance(res, tuple) and len(res) == 2
    gx, gw = res
    assert gx.tolist() == [3.0, 4.0]
    assert gw.tolist() == [1.0, 2.0]
    assert x.grad is None and w.grad is None


def test_grad_single_tensor_input_gives_one_tuple():
    x = engine.tensor(3.0, requires_grad=True)
    res = engine.grad(x * x, x)
    assert len(res) == 1
    assert res[0].item() == 6.0
    assert res[0].shape == ()


def test_grad_with_grad_outputs():
    x = engine.tensor([1.0, 2.0, 3.0], requires_grad=True)
    y = x * x
    (g,) = engine.grad(y, x, grad_outputs=engine.tensor([1.0, 2.0, 3.0]))
    assert g.tolist() == [2.0, 8.0, 18.0]
    z = engine.tensor([1.0, 1.0], requires_grad=True)
    y = x * x
    gx, gz = engine.grad([y, z * 4], [x, z], grad_outputs=[engine.ones(3), engine.tensor([1.0, 2.0])])
    assert gx.tolist() == [2.0, 4.0, 6.0]
    assert gz.tolist() == [4.0, 8.0]


def test_grad_outputs_multiple_outputs_sum():
    x = engine.tensor([2.0], requires_grad=True)
    (g,) = engine.grad([(x * 3).sum(), (x * x).sum()], x)
    assert g.tolist() == [7.0]


def test_grad_with_respect_to_non_leaf():
    x = engine.tensor([1.0, 2.0], requires_grad=True)
    h = x * 3
    y = (h * h).sum()
    (gh,) = engine.grad(y, h)
    assert gh.tolist() == [6.0, 12.0]


def test_grad_with_respect_to_leaf_and_intermediate():
    x = engine.tensor([1.0, 2.0], requires_grad=True)
    h = x * 3
    y = (h * h).sum()
    gx, gh = engine.grad(y, [x, h])
    assert gx.tolist() == [18.0, 36.0]  # 18x
    assert gh.tolist() == [6.0, 12.0]


def test_unused_input_raises_without_allow_unused():
    x = engine.tensor([1.0], requires_grad=True)
    z = engine.tensor([1.0], requires_grad=True)
    y = (x * 2).sum()
    with pytest.raises(RuntimeError, match="appears to not have been used in the graph"):
        engine.grad(y, [x, z], retain_graph=True)
    with pytest.raises(RuntimeError, match="The differentiated Tensor at index 1 appears to not have been used in the graph"):
        engine.grad(y, [x, z], retain_graph=True)


def test_allow_unused_gives_none():
    x = engine.tensor([1.0], requires_grad=True)
    z = engine.tensor([1.0], requires_grad=True)
    gx, gz = engine.grad((x * 2).sum(), [x, z], allow_unused=True)
    assert gx.tolist() == [2.0]
    assert gz is None


def test_materialize_grads_gives_zeros_of_input_shape_and_dtype():
    x = engine.tensor([1.0], requires_grad=True)
    z = engine.tensor(np.ones((2, 3)), requires_grad=True)
    gx, gz = engine.grad((x * 2).sum(), [x, z], materialize_grads=True)
    assert gx.tolist() == [2.0]
    assert gz.shape == (2, 3) and gz.dtype == np.float64
    assert gz.tolist() == [[0.0] * 3] * 2
    x2 = engine.tensor([1.0], requires_grad=True)
    _, gz = engine.grad((x2 * 2).sum(), [x2, z], allow_unused=True, materialize_grads=True)
    assert gz.tolist() == [[0.0] * 3] * 2
    assert not gz.requires_grad


def test_materialized_zeros_require_grad_under_create_graph_as_in_torch():
    x = engine.tensor([1.0, 2.0], requires_grad=True)
    z = engine.tensor([3.0], requires_grad=True)
    gx, gz = engine.grad((x * x).sum(), [x, z], create_graph=True, materialize_grads=True)
    assert gz.requires_grad and gz.is_leaf and gz.tolist() == [0.0]
    assert gx.requires_grad and gx.grad_fn is not None
    (ggx,) = engine.grad((gx.sum() + gz.sum()), [x])  # a second derivative through both
    assert ggx.tolist() == [2.0, 2.0]


def test_allow_unused_false_with_materialize_grads_is_value_error():
    x = engine.tensor([1.0], requires_grad=True)
    with pytest.raises(ValueError, match="allow_unused"):
        engine.grad((x * 2).sum(), x, allow_unused=False, materialize_grads=True)


def test_materialized_zeros_on_input_device(virtual1):
    x = engine.tensor([1.0], requires_grad=True)
    z = engine.tensor([1.0, 2.0], device=virtual1, requires_grad=True)
    _, gz = engine.grad((x * 2).sum(), [x, z], materialize_grads=True)
    assert gz.device is virtual1
    assert gz.tolist() == [0.0, 0.0]


def _two_paths():
    x = engine.tensor([1.0, 2.0], requires_grad=True)
    a = x * 2  # path 1: d/dx = 2
    b = x * x  # path 2: d/dx = 2x
    y = (a + b).sum()
    return x, a, b, y


def test_no_grad_vars_cuts_one_path():
    x, a, b, y = _two_paths()
    (g,) = engine.grad(y, x, no_grad_vars=[b], retain_graph=True)
    assert g.tolist() == [2.0, 2.0]
    (g,) = engine.grad(y, x, no_grad_vars=a, retain_graph=True)
    assert g.tolist() == [2.0, 4.0]
    (g,) = engine.grad(y, x)
    assert g.tolist() == [4.0, 6.0]


def test_no_grad_vars_cutting_every_path_makes_input_unused():
    x, a, b, y = _two_paths()
    with pytest.raises(RuntimeError, match="appears to not have been used in the graph"):
        engine.grad(y, x, no_grad_vars=[a, b], retain_graph=True)
    (g,) = engine.grad(y, x, no_grad_vars=[a, b], allow_unused=True, retain_graph=True)
    assert g is None
    (g,) = engine.grad(y, x, no_grad_vars=[a, b], materialize_grads=True)
    assert g.tolist() == [0.0, 0.0]


def test_no_grad_vars_on_deeper_node_of_one_path():
    x = engine.tensor([3.0], requires_grad=True)
    w = engine.tensor([5.0], requires_grad=True)
    h = x * w  # cut here
    y = (h.exp() * 0 + h * 0 + x * w * 2).sum()  # 2xw survives; every h path is cut
    gx, gw = engine.grad(y, [x, w], no_grad_vars=[h])
    assert gx.tolist() == [10.0]
    assert gw.tolist() == [6.0]


def test_no_grad_vars_does_not_touch_later_calls():
    x, a, b, y = _two_paths()
    engine.grad(y, x, no_grad_vars=[b], retain_graph=True)
    y.backward()
    assert x.grad.tolist() == [4.0, 6.0]


def test_grad_runs_only_needed_nodes():
    x = engine.tensor([1.0, 2.0], requires_grad=True)
    w = engine.tensor([3.0], requires_grad=True)
    fired = []
    e = w.exp()
    e.grad_fn.register_prehook(lambda g: fired.append("exp pre"))
    e.grad_fn.register_hook(lambda gi, go: fired.append("exp post"))
    w.register_post_accumulate_grad_hook(lambda t: fired.append("w acc"))
    x.register_post_accumulate_grad_hook(lambda t: fired.append("x acc"))
    y = (x * 2).sum() + e.sum()
    (g,) = engine.grad(y, x)
    assert g.tolist() == [2.0, 2.0]
    assert fired == []
    assert x.grad is None and w.grad is None


def test_grad_does_not_run_nodes_below_a_non_leaf_input():
    x = engine.tensor([1.0], requires_grad=True)
    h = x * 3
    below = []
    h.grad_fn.register_prehook(lambda g: below.append("h node"))
    x.register_post_accumulate_grad_hook(lambda t: below.append("x acc"))
    y = (h * h).sum()
    (gh,) = engine.grad(y, h)
    assert gh.tolist() == [6.0]
    assert below == []


def test_grad_runs_shared_nodes_needed_by_one_input():
    x = engine.tensor([2.0], requires_grad=True)
    w = engine.tensor([7.0], requires_grad=True)
    s = x * w
    ran = []
    s.grad_fn.register_prehook(lambda g: ran.append(1))
    y = (s * s).sum()
    (gx,) = engine.grad(y, x)
    assert gx.tolist() == [2 * 14.0 * 7.0]  # 2 s w
    assert ran == [1]
    assert w.grad is None


def test_grad_input_not_requiring_grad_raises():
    x = engine.tensor([1.0], requires_grad=True)
    c = engine.tensor([1.0])
    with pytest.raises(RuntimeError, match="does not require grad"):
        engine.grad((x * c).sum(), [x, c])


def test_grad_of_non_scalar_without_grad_outputs_raises():
    x = engine.tensor([1.0, 2.0], requires_grad=True)
    with pytest.raises(RuntimeError, match="grad can be implicitly created only for scalar outputs"):
        engine.grad(x * 2, x)


def test_grad_of_output_not_requiring_grad_raises():
    x = engine.tensor([1.0], requires_grad=True)
    c = engine.tensor([1.0])
    with pytest.raises(RuntimeError, match="does not require grad and does not have a grad_fn"):
        engine.grad(c.sum(), x)


def test_grad_outputs_wrong_shape_raises():
    x = engine.tensor([1.0, 2.0], requires_grad=True)
    with pytest.raises(RuntimeError, match="Mismatch in shape"):
        engine.grad(x * 2, x, grad_outputs=engine.ones(3))


@pytest.mark.parametrize("order", ["shared path first", "shared path second"])
def test_grad_marks_a_node_needed_through_an_already_visited_successor(order: str) -> None:
    """The needed nodes are found in one walk: a node whose only successor was finished
    earlier (reached from another branch) must still be marked needed, whichever branch the
    walk takes first."""
    x = engine.tensor([1.0, 2.0], requires_grad=True)
    z = engine.tensor([4.0, 4.0], requires_grad=True)
    a = x * 2
    left = (a * 5).sum()
    q = a * 3
    ran = []
    q.grad_fn.register_prehook(lambda g: ran.append("q"))
    zbranch = z * 3
    zbranch.grad_fn.register_prehook(lambda g: ran.append("z branch"))
    right = q.sum() + zbranch.sum()
    y = left + right if order == "shared path first" else right + left
    (gx,) = engine.grad(y, x)
    assert gx.tolist() == [16.0, 16.0]  # 2 * 5 + 2 * 3
    assert ran == ["q"]
    assert z.grad is None and x.grad is None


def _walks(outputs, inputs, accumulate):
    """(fast walk taken?, its dependencies and exec_info) and the post-order walk's, for one call."""
    from threadgrad.engine.autograd import _compute_dependencies_and_needed, _post_order_walk
    from threadgrad.engine.executor import GraphTask
    from threadgrad.engine.graph import GraphRoot
    from threadgrad.engine.tensor import gradient_edge

    results = []
    for walk in (_compute_dependencies_and_needed, _post_order_walk):
        gt = GraphTask(False, False, 0, None)
        gt.captures, must_run = {}, set()
        for idx, t in enumerate(inputs):
            node, nr = gradient_edge(t)
            if accumulate and t.grad_fn is None:
                must_run.add(node)
            else:
                gt.captures.setdefault(node, []).append((nr, idx))
        root = GraphRoot(tuple(gradient_edge(t) for t in outputs), [None] * len(outputs))
        walk(gt, root, must_run)
        results.append((gt.runnable is None, dict(gt.dependencies), gt.exec_info - {root}, gt))
    return results


@pytest.mark.parametrize("seed", range(12))
def test_the_fast_needed_walk_finds_what_the_post_order_walk_finds(seed: int) -> None:
    """Note [Needed nodes]: on random DAGs over two leaves and a constant, with random inputs
    (leaves, intermediates, both), grad() and backward(inputs=) find the same dependency counts
    and needed nodes whichever walk runs; the fast one runs exactly when every end is wanted."""
    rng = np.random.default_rng(seed)
    x = engine.tensor([0.3, -0.2], requires_grad=True)
    w = engine.tensor([0.5, 0.1], requires_grad=True)
    c = engine.tensor([1.5, 2.0])
    pool = [x, w, x * c]
    for _ in range(25):
        a = pool[rng.integers(len(pool))]
        if rng.random() < 0.4:
            pool.append(ops.tanh(a) if rng.random() < 0.5 else a * c)
        else:
            pool.append(a + pool[rng.integers(len(pool))])
    y = ops.sum(ops.stack(pool[-4:]))
    candidates = [x, w] + pool[3:-1]
    taken = set()
    for trial in range(6):
        k = 1 + int(rng.integers(3))
        inputs = [candidates[i] for i in rng.choice(len(candidates), size=k, replace=False)]
        if trial < 2:
            inputs = [x, w][: trial + 1]  # leaves only: the fast walk's case when both are reached
        elif trial == 2:
            inputs = [x, w, candidates[2 + int(rng.integers(len(candidates) - 2))]]  # and a node with successors
        for accumulate in (False, True):
            (fast, deps, needed, gt), (_, ref_deps, ref_needed, ref_gt) = _walks([y], inputs, accumulate)
            assert deps == ref_deps
            assert needed == ref_needed
            reached_ends = {n for n in ref_deps if not any(e[0] is not None for e in n.next_edges)}
            wanted = set(gt.captures) | {grad_accumulator(t) for t in inputs if accumulate and t.grad_fn is None}
            assert fast == (reached_ends <= wanted)
            if fast:
                assert set(ref_gt.runnable) >= set(ref_deps)  # the post-order walk would run them all too
            taken.add(fast)
    assert taken == {True, False}  # both walks were compared


def test_grad_and_backward_take_any_iterable_of_tensors_as_torch_does():
    x = engine.tensor([1.0, 2.0], requires_grad=True)
    w = engine.tensor([3.0], requires_grad=True)
    gx, gw = engine.grad((x * w).sum(), (t for t in [x, w]))
    assert gx.tolist() == [3.0, 3.0] and gw.tolist() == [3.0]
    engine.backward(((x * w).sum() for _ in range(1)), inputs=iter([w]))
    assert w.grad.tolist() == [3.0] and x.grad is None
    with pytest.raises(TypeError, match="inputs must be a Tensor or a sequence of Tensors, got ndarray"):
        engine.grad((x * w).sum(), np.array([1.0]))
