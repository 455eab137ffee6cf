"""Torch-parity cases for the indexing and shape ops of ops/scatter.py and ops/rearrange.py
(issue 31, item 4), merged into the node-name table of test_node_names_parity.py and run at
special values by test_index_shape_parity.py. Imported only where torch is installed."""
from __future__ import annotations

import warnings

import torch

import threadgrad as tg


def _lib(x):
    return tg if isinstance(x, tg.Tensor) else torch


class Ix(list):
    """An index list that becomes an int64 tensor of the library called."""


def _call(name, *args, **kwargs):
    """``lib.name(x, *args, **kwargs)`` for the library of ``x`` (a second tensor input goes
    last: ``lib.name(x, *args, src)``); each :class:`Ix` becomes an index tensor."""
    def call(x, *more):
        lib = _lib(x)
        conv = [lib.tensor(list(a)) if isinstance(a, Ix) else a for a in args]
        return getattr(lib, name)(x, *conv, *more, **kwargs)
    return call


def _quiet(fn, *args, **kwargs):
    """``fn(*args, **kwargs)`` without the deprecation warning both libraries give scatter's
    reduce= with a tensor src (test_index_shape_parity.py checks it)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        return fn(*args, **kwargs)


def _first(fn):
    return lambda *ts: fn(*ts)[0]


def _mask(x):
    return _lib(x).tensor([[True, False, True], [False, True, True]])


IDX = Ix([[0, 1, 1], [1, 1, 0]])

# op -> {case: (call, shapes of its float64 inputs)}
NODE_CASES = {
    "masked_fill": {"masked_fill number": (lambda x: x.masked_fill(_mask(x), 1.0), [(2, 3)]),
                    "masked_fill tensor": (lambda x, v: x.masked_fill(_mask(x), v.sum()), [(2, 3), (2,)])},
    "masked_select": {"masked_select": (lambda x: x.masked_select(_mask(x)), [(2, 3)])},
    "masked_scatter": {"masked_scatter": (lambda x, s: x.masked_scatter(_mask(x), s), [(2, 3), (6,)])},
    "index_add": {"index_add": (_call("index_add", 0, Ix([1, 1])), [(2, 3), (2, 3)])},
    "index_copy": {"index_copy": (_call("index_copy", 1, Ix([2, 0])), [(2, 3), (2, 2)])},
    "index_fill": {"index_fill number": (_call("index_fill", 1, Ix([2, 0]), 1.0), [(2, 3)]),
                   "index_fill tensor": (lambda x, v: _lib(x).index_fill(x, 1, _lib(x).tensor([2]), v.sum()),
                                         [(2, 3), (2,)])},
    "scatter": {"scatter src": (_call("scatter", 0, IDX), [(2, 3), (2, 3)]),
                "scatter value": (_call("scatter", 0, IDX, 2.0), [(2, 3)]),
                "scatter reduce": (lambda x, s: _quiet(_lib(x).scatter, x, 0, _lib(x).tensor(IDX), s, reduce="add"),
                                   [(2, 3), (2, 3)])},
    "scatter_add": {"scatter_add": (_call("scatter_add", 0, IDX), [(2, 3), (2, 3)])},
    "scatter_reduce": {"scatter_reduce": (_call("scatter_reduce", 0, IDX, reduce="amax"), [(2, 3), (2, 3)])},
    "take": {"take": (_call("take", Ix([[0, 5], [5, 1]])), [(2, 3)])},
    "take_along_dim": {"take_along_dim": (_call("take_along_dim", Ix([[1], [0]]), 1), [(2, 3)]),
                       "take_along_dim flat": (_call("take_along_dim", Ix([4, 0])), [(2, 3)])},
    "flip": {"flip": (_call("flip", [0]), [(2, 3)])},
    "fliplr": {"fliplr": (_call("fliplr"), [(2, 3)])},
    "flipud": {"flipud": (_call("flipud"), [(2, 3)])},
    "roll": {"roll": (_call("roll", 1, 0), [(2, 3)]), "roll flat": (_call("roll", 2), [(2, 3)])},
    "rot90": {"rot90": (_call("rot90"), [(2, 3)])},
    "movedim": {"movedim": (_call("movedim", 0, 1), [(2, 3)])},
    "moveaxis": {"moveaxis": (_call("moveaxis", 0, 1), [(2, 3)])},
    "swapaxes": {"swapaxes": (_call("swapaxes", 0, 1), [(2, 3)])},
    "swapdims": {"swapdims": (_call("swapdims", 0, 1), [(2, 3)])},
    "diagonal": {"diagonal": (_call("diagonal", 1), [(2, 3)])},
    "diag_embed": {"diag_embed": (_call("diag_embed"), [(2, 3)])},
    "diag": {"diag of a matrix": (_call("diag"), [(2, 3)]), "diag of a vector": (_call("diag", 1), [(3,)])},
    "trace": {"trace": (_call("trace"), [(2, 3)])},
    "repeat_interleave": {"repeat_interleave number": (_call("repeat_interleave", 2, 0), [(2, 3)]),
                          "repeat_interleave tensor": (_call("repeat_interleave", Ix([1, 2])), [(2,)])},
    "tile": {"tile": (_call("tile", (2, 1)), [(2, 3)])},
    "tensor_split": {"tensor_split": (_first(_call("tensor_split", 2, 1)), [(2, 3)]),
                     "tensor_split whole": (_first(_call("tensor_split", 1)), [(2, 3)])},
    "hsplit": {"hsplit": (_first(_call("hsplit", [1])), [(2, 3)])},
    "vsplit": {"vsplit": (_first(_call("vsplit", 2)), [(2, 3)])},
    "dsplit": {"dsplit": (_first(_call("dsplit", 2)), [(1, 2, 4)])},
    "broadcast_to": {"broadcast_to": (_call("broadcast_to", (2, 2, 3)), [(2, 3)])},
    "broadcast_tensors": {"broadcast_tensors": (lambda a, b: _lib(a).broadcast_tensors(a, b)[1], [(2, 3), (3,)])},
    "meshgrid": {"meshgrid": (lambda a, b: _lib(a).meshgrid(a, b, indexing="xy")[0], [(2,), (3,)])},
    "cartesian_prod": {"cartesian_prod": (lambda a, b: _lib(a).cartesian_prod(a, b), [(2,), (3,)])},
    "block_diag": {"block_diag": (lambda a, b: _lib(a).block_diag(a, b), [(2, 3), (3,)])},
}


INF, NAN = float("inf"), float("nan")
# (8, 3) rows with zeros, ties, NaN and infinities (as test_special_values_parity.ROWS)
ROWS = [[0.0, 0.0, 0.0], [1.0, -1.0, 1.0], [2.0, 2.0, -1.0], [NAN, 1.0, 2.0], [INF, 1.0, 2.0],
        [-INF, -INF, 0.0], [0.5, -3.0, 3.0], [-2.0, 0.0, 2.0]]
SRC = [[2.0, NAN, 0.0], [2.0, -INF, 0.0], [1.0, 0.0, INF], [0.0, 5.0, 2.0]]  # (4, 3), ties with ROWS too
TO = [[0, 3, 5], [0, 3, 5], [4, 7, 5], [1, 1, 1]]  # where SRC's rows go along dim 0 of ROWS


def _to(x):
    return _lib(x).tensor(TO)


def _m(x):
    return _lib(x).tensor(ROWS).isnan() | (_lib(x).tensor(ROWS) > 1.5)


def _reduce(reduce, include_self=True):
    return lambda x, s: _lib(x).scatter_reduce(x, 0, _to(x), s, reduce, include_self=include_self)


# op -> {case: (call, inputs)}: values and gradients equal torch's, NaN for NaN
SPECIAL = {
    "masked_fill": {"masked_fill": (lambda x, v: x.masked_fill(_m(x), v[0, 1]), (ROWS, SRC))},
    "masked_select": {"masked_select": (lambda x: x.masked_select(_m(x)), (ROWS,))},
    "masked_scatter": {"masked_scatter": (lambda x, s: x.masked_scatter(_m(x), s), (ROWS, SRC))},
    "index_add": {"index_add": (lambda x, s: x.index_add(0, _lib(x).tensor([3, 0, 3, 7]), s, alpha=2.0),
                                (ROWS, SRC))},
    "index_copy": {"index_copy": (lambda x, s: x.index_copy(0, _lib(x).tensor([3, 0, 6, 7]), s), (ROWS, SRC))},
    "index_fill": {"index_fill": (lambda x, v: x.index_fill(1, _lib(x).tensor([2, 0, 2]), v[2, 2]), (ROWS, SRC))},
    "scatter": {"scatter": (lambda x, s: x.scatter(0, _lib(x).tensor([[0, 3, 5], [1, 2, 4], [6, 7, 0], [5, 4, 3]]),
                                                   s), (ROWS, SRC)),
                "scatter value": (lambda x: x.scatter(1, _lib(x).tensor([[2]] * 8), NAN), (ROWS,))},
    "scatter_add": {"scatter_add": (lambda x, s: x.scatter_add(0, _to(x), s), (ROWS, SRC))},
    "scatter_reduce": {f"scatter_reduce {r}{'' if k else ' exclude self'}": (_reduce(r, k), (ROWS, SRC))
                       for r in ("sum", "prod", "mean", "amax", "amin") for k in (True, False)},
    "take": {"take": (lambda x: x.take(_lib(x).tensor([[9, 9], [0, -1], [11, 10]])), (ROWS,))},
    "take_along_dim": {"take_along_dim": (lambda x: x.take_along_dim(_lib(x).tensor([[2], [1], [1], [0], [0], [2],
                                                                                     [1], [1]]), 1), (ROWS,))},
    "flip": {"flip": (lambda x: x.flip(0, 1), (ROWS,))},
    "fliplr": {"fliplr": (lambda x: x.fliplr(), (ROWS,))},
    "flipud": {"flipud": (lambda x: x.flipud(), (ROWS,))},
    "roll": {"roll": (lambda x: x.roll((3, -1), (0, 1)), (ROWS,))},
    "rot90": {"rot90": (lambda x: x.rot90(3), (ROWS,))},
    "movedim": {"movedim": (lambda x: x.reshape(2, 4, 3).movedim(0, 2), (ROWS,))},
    "moveaxis": {"moveaxis": (lambda x: x.moveaxis(1, 0), (ROWS,))},
    "swapaxes": {"swapaxes": (lambda x: x.swapaxes(0, 1), (ROWS,))},
    "swapdims": {"swapdims": (lambda x: x.swapdims(0, 1), (ROWS,))},
    "diagonal": {"diagonal": (lambda x: x.diagonal(-2), (ROWS,))},
    "diag_embed": {"diag_embed": (lambda x: x.diag_embed(1), (ROWS,))},
    "diag": {"diag": (lambda x: x.diag(-3), (ROWS,)), "diag of a vector": (lambda x: x[3].diag(), (ROWS,))},
    "trace": {"trace": (lambda x: x[2:].trace() + x[:3].trace(), (ROWS,))},
    "repeat_interleave": {"repeat_interleave": (lambda x: x.repeat_interleave(2, 1), (ROWS,)),
                          "repeat_interleave tensor": (
                              lambda x: x.repeat_interleave(_lib(x).tensor([1, 0, 3]), 1), (ROWS,))},
    "tile": {"tile": (lambda x: x.tile(2, 1), (ROWS,))},
    "tensor_split": {"tensor_split": (lambda x: _lib(x).cat(x.tensor_split([1, 5])[1:]), (ROWS,))},
    "hsplit": {"hsplit": (lambda x: x.hsplit([2])[0], (ROWS,))},
    "vsplit": {"vsplit": (lambda x: x.vsplit(4)[3], (ROWS,))},
    "dsplit": {"dsplit": (lambda x: x.reshape(2, 4, 3).dsplit([1])[1], (ROWS,))},
    "broadcast_to": {"broadcast_to": (lambda x: x[3].broadcast_to(2, 3), (ROWS,))},
    "broadcast_tensors": {"broadcast_tensors": (lambda x: _lib(x).broadcast_tensors(x[:, :1], x[0])[0], (ROWS,))},
    "meshgrid": {"meshgrid": (lambda x: _lib(x).meshgrid(x[3], x[4], indexing="xy")[1], (ROWS,))},
    "cartesian_prod": {"cartesian_prod": (lambda x: _lib(x).cartesian_prod(x[3], x[5]), (ROWS,))},
    "block_diag": {"block_diag": (lambda x, s: _lib(x).block_diag(x[3:5], s, x[0, 0]), (ROWS, SRC))},
}
