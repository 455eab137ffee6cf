"""Samples for the indexing and shape ops of ops/scatter.py and ops/rearrange.py (issue 31,
item 4), merged into ``samples.SAMPLES`` (kept apart so that the shared table grows by one
block). samples.py loads this file by its path and calls :func:`make` with its helpers, so it
works wherever samples.py is loaded from (tests/devices loads it by path too). Index tensors
are made on the input's device, as these ops want them there."""
from __future__ import annotations

from typing import Callable

import numpy as np

from threadgrad import engine


def _i(x: engine.Tensor, values: list) -> engine.Tensor:
    """An int64 index tensor on ``x``'s device."""
    return engine.tensor(values, dtype=engine.int64, device=x.device)


def _scatter_ref(a: np.ndarray, dim: int, index: np.ndarray, src: np.ndarray, how: str = "set") -> np.ndarray:
    out = a.copy()
    for pos in np.ndindex(*index.shape):
        target = list(pos)
        target[dim] = index[pos]
        if how == "set":
            out[tuple(target)] = src[pos]
        else:
            out[tuple(target)] += src[pos]
    return out


IDX = [[0, 1, 2, 0], [2, 2, 1, 0]]           # for a (3, 4) input along dim 0, a (2, 4) src
MASK = [[True, False, True, False], [False, False, True, True], [True, True, False, False]]


def _mask(x: engine.Tensor) -> engine.Tensor:
    return engine.tensor(MASK, device=x.device)


def make(Sample: type, t: Callable, distinct: Callable) -> dict[str, Callable[[], list]]:
    """The samples, built with samples.py's ``Sample``, ``t`` and ``distinct``."""
    def _reduce_samples() -> list:
        out = []
        for reduce in ("sum", "prod", "mean", "amax", "amin"):
            for include_self in (True, False):
                # amax/amin: input and source on two interleaved grids 0.25 apart, so no two
                # values come within a finite difference of a tie (a kink of max)
                x, src = (t(3, 4), t(2, 4)) if reduce not in ("amax", "amin") else (
                    distinct(3, 4), engine.tensor(distinct(2, 4, grad=False)._data + 0.25, requires_grad=True))
                out.append(Sample(x, src,
                                  call=lambda op, x, s, r=reduce, k=include_self: op(x, 0, _i(x, IDX), s, r,
                                                                                    include_self=k),
                                  desc=f"{reduce} include_self={include_self}"))
        # distinct() puts every tensor's entries on one grid (k / 2 + 0.1), so src could tie
        # with the input (an amax kink: a wrong numerical Jacobian); src moves off that grid
        src = engine.tensor(distinct(4, 2, grad=False)._data + 0.25, requires_grad=True)
        out.append(Sample(distinct(3, 4), src, desc="amax dim 1, src larger than the index",
                          call=lambda op, x, s: op(x, 1, _i(x, [[3, 3], [0, 1], [2, 2]]), s, "amax")))
        return out

    return {
        # ops/scatter.py
        "masked_fill": lambda: [
            Sample(t(3, 4), call=lambda op, x: op(x, _mask(x), 2.5), ref=lambda a: np.where(MASK, 2.5, a)),
            Sample(t(3, 4), t(), call=lambda op, x, v: op(x, _mask(x), v), ref=lambda a, v: np.where(MASK, v, a),
                   desc="0-d tensor value"),
            Sample(t(4), call=lambda op, x: op(x, _mask(x), -1.0), ref=lambda a: np.where(MASK, -1.0, a),
                   desc="input broadcast to the mask"),
        ],
        "masked_select": lambda: [
            Sample(t(3, 4), call=lambda op, x: op(x, _mask(x)), ref=lambda a: a[np.array(MASK)]),
            Sample(t(3, 1), call=lambda op, x: op(x, _mask(x)),
                   ref=lambda a: np.broadcast_to(a, (3, 4))[np.array(MASK)],
                   desc="broadcast"),
        ],
        "masked_scatter": lambda: [
            Sample(t(3, 4), t(2, 4), call=lambda op, x, s: op(x, _mask(x), s)),
            Sample(t(4), t(9), call=lambda op, x, s: op(x, _mask(x), s), desc="input broadcast, larger source"),
        ],
        "index_add": lambda: [
            Sample(t(3, 4), t(3, 4), call=lambda op, x, s: op(x, 0, _i(x, [0, 2, 0]), s),
                   ref=lambda a, s: a + np.array([s[0] + s[2], 0 * s[0], s[1]])),
            Sample(t(3, 4), t(3, 2), call=lambda op, x, s: op(x, 1, _i(x, [3, 1]), s, alpha=-2.0), desc="dim 1, alpha"),
        ],
        "index_copy": lambda: [
            Sample(t(3, 4), t(2, 4), call=lambda op, x, s: op(x, 0, _i(x, [2, 0]), s),
                   ref=lambda a, s: np.stack([s[1], a[1], s[0]])),
            Sample(t(3, 4), t(3, 1), call=lambda op, x, s: op(x, -1, _i(x, [1]), s), desc="dim -1"),
        ],
        "index_fill": lambda: [
            Sample(t(3, 4), call=lambda op, x: op(x, 1, _i(x, [3, 1, 3]), -1.5),
                   ref=lambda a: np.where(np.isin(np.arange(4), [1, 3]), -1.5, a)),
            Sample(t(3, 4), t(), call=lambda op, x, v: op(x, 0, _i(x, [2, 2]), v), desc="0-d tensor value, repeats"),
        ],
        "scatter": lambda: [
            Sample(t(3, 4), t(2, 4), call=lambda op, x, s: op(x, 0, _i(x, [[0, 1, 2, 0], [2, 0, 1, 1]]), s),
                   ref=lambda a, s: _scatter_ref(a, 0, np.array([[0, 1, 2, 0], [2, 0, 1, 1]]), s)),
            Sample(t(3, 4), call=lambda op, x: op(x, 1, _i(x, [[3], [0], [1]]), 0.5), desc="value"),
            Sample(t(3, 4), t(3, 4), call=lambda op, x, s: op(x, 1, _i(x, [[3], [0], [1]]), s),
                   desc="src larger than the index"),
            Sample(t(3, 4, grad=False), call=lambda op, x: op(x, 0, _i(x, IDX), 1.5, reduce="add"), grad=False,
                   ref=lambda a: _scatter_ref(a, 0, np.array(IDX), np.full((2, 4), 1.5), "add"),
                   desc="value, reduce=add (no derivative)"),
        ],
        "scatter_add": lambda: [
            Sample(t(3, 4), t(2, 4), call=lambda op, x, s: op(x, 0, _i(x, IDX), s),
                   ref=lambda a, s: _scatter_ref(a, 0, np.array(IDX), s, "add")),
            Sample(t(3, 4), t(3, 3), call=lambda op, x, s: op(x, 1, _i(x, [[0, 0], [3, 1], [2, 2]]), s),
                   desc="dim 1, src larger, repeats"),
        ],
        "scatter_reduce": _reduce_samples,
        "take": lambda: [
            Sample(t(3, 4), call=lambda op, x: op(x, _i(x, [[0, 11], [5, 5]])),
                   ref=lambda a: a.ravel()[[[0, 11], [5, 5]]]),
            Sample(t(3, 4), call=lambda op, x: op(x, _i(x, [-1, 0, -1])), ref=lambda a: a.ravel()[[-1, 0, -1]],
                   desc="negative, repeated"),
        ],
        "take_along_dim": lambda: [
            Sample(t(3, 4), call=lambda op, x: op(x, _i(x, [[1], [0], [3]]), 1),
                   ref=lambda a: np.take_along_axis(a, np.array([[1], [0], [3]]), 1)),
            Sample(t(3, 4), call=lambda op, x: op(x, _i(x, [2, 5, 5])), ref=lambda a: a.ravel()[[2, 5, 5]],
                   desc="flat"),
            Sample(t(3, 4), call=lambda op, x: op(x, _i(x, [[1, 0]]), 1), desc="broadcast indices"),
        ],
        # ops/rearrange.py
        "flip": lambda: [
            Sample(t(2, 3, 2), args=([0, 2],), ref=lambda a: a[::-1, :, ::-1]),
            Sample(t(3), args=(0,), ref=lambda a: a[::-1], desc="int dim"),
            Sample(t(), args=([],), ref=lambda a: a, desc="0-d"),
        ],
        "fliplr": lambda: [Sample(t(2, 3), ref=np.fliplr)],
        "flipud": lambda: [Sample(t(2, 3), ref=np.flipud), Sample(t(3), ref=np.flipud, desc="1-d")],
        "roll": lambda: [
            Sample(t(3, 4), args=(1, 0), ref=lambda a: np.roll(a, 1, 0)),
            Sample(t(3, 4), args=(-5,), ref=lambda a: np.roll(a, -5), desc="flattened"),
            Sample(t(3, 4), args=((1, 2), (0, 1)), ref=lambda a: np.roll(a, (1, 2), (0, 1)), desc="two dims"),
        ],
        "rot90": lambda: [
            Sample(t(2, 3), ref=np.rot90),
            Sample(t(2, 3, 2), args=(3, (2, 0)), ref=lambda a: np.rot90(a, 3, (2, 0)), desc="k=3 dims (2, 0)"),
            Sample(t(2, 3), args=(-2,), ref=lambda a: np.rot90(a, -2), desc="k=-2"),
        ],
        "movedim": lambda: [
            Sample(t(2, 3, 4), args=(0, -1), ref=lambda a: np.moveaxis(a, 0, -1)),
            Sample(t(2, 3, 4), args=((0, 1), (2, 0)), ref=lambda a: np.moveaxis(a, (0, 1), (2, 0)), desc="two dims"),
        ],
        "moveaxis": lambda: [Sample(t(2, 3, 4), args=(2, 0), ref=lambda a: np.moveaxis(a, 2, 0))],
        "swapaxes": lambda: [Sample(t(2, 3, 4), args=(0, 2), ref=lambda a: np.swapaxes(a, 0, 2))],
        "swapdims": lambda: [Sample(t(2, 3), args=(1, 0), ref=lambda a: a.T)],
        "diagonal": lambda: [
            Sample(t(3, 4), ref=np.diagonal),
            Sample(t(3, 4), args=(1,), ref=lambda a: np.diagonal(a, 1), desc="offset 1"),
            Sample(t(2, 3, 4), kwargs={"offset": -1, "dim1": 2, "dim2": 0}, ref=lambda a: np.diagonal(a, -1, 2, 0),
                   desc="dims (2, 0), offset -1"),
        ],
        "diag_embed": lambda: [
            Sample(t(2, 3), ref=lambda a: np.stack([np.diag(r) for r in a])),
            Sample(t(2, 3), args=(1, 0, 2), desc="offset 1, dims (0, 2)"),
        ],
        "diag": lambda: [
            Sample(t(3, 4), ref=np.diag), Sample(t(3, 4), args=(-1,), ref=lambda a: np.diag(a, -1), desc="matrix, -1"),
            Sample(t(3), args=(1,), ref=lambda a: np.diag(a, 1), desc="vector, 1"),
        ],
        "trace": lambda: [Sample(t(3, 4), ref=np.trace), Sample(t(4, 2), ref=np.trace, desc="tall")],
        "repeat_interleave": lambda: [
            Sample(t(2, 3), args=(2,), ref=lambda a: np.repeat(a, 2), desc="flattened"),
            Sample(t(2, 3), args=(3, 1), ref=lambda a: np.repeat(a, 3, 1), desc="dim 1"),
            Sample(t(3, 2), call=lambda op, x: op(x, _i(x, [2, 0, 1]), dim=0), ref=lambda a: np.repeat(a, [2, 0, 1], 0),
                   desc="tensor repeats"),
        ],
        "tile": lambda: [
            Sample(t(2, 3), args=((2, 1),), ref=lambda a: np.tile(a, (2, 1))),
            Sample(t(2, 3), args=((2,),), ref=lambda a: np.tile(a, 2), desc="fewer reps"),
            Sample(t(3), args=((2, 1, 2),), ref=lambda a: np.tile(a, (2, 1, 2)), desc="more reps"),
        ],
        "tensor_split": lambda: [
            Sample(t(7, 2), call=lambda op, x: op(x, 3)[0], ref=lambda a: a[:3], desc="3 sections, first"),
            Sample(t(2, 5), call=lambda op, x: op(x, [1, 4], 1)[1], ref=lambda a: a[:, 1:4], desc="indices, dim 1"),
            Sample(t(5), call=lambda op, x: op(x, 2)[1], ref=lambda a: a[3:], desc="1-d, second"),
        ],
        "hsplit": lambda: [Sample(t(2, 4), call=lambda op, x: op(x, 2)[1], ref=lambda a: a[:, 2:])],
        "vsplit": lambda: [Sample(t(4, 2), call=lambda op, x: op(x, [1])[1], ref=lambda a: a[1:])],
        "dsplit": lambda: [Sample(t(1, 2, 4), call=lambda op, x: op(x, 2)[0], ref=lambda a: a[:, :, :2])],
        "broadcast_to": lambda: [
            Sample(t(3, 1), args=((2, 3, 4),), ref=lambda a: np.broadcast_to(a, (2, 3, 4))),
            Sample(t(), args=((3,),), ref=lambda a: np.broadcast_to(a, (3,)), desc="0-d"),
        ],
        "broadcast_tensors": lambda: [
            Sample(t(3, 1), t(4), call=lambda op, a, b: op(a, b)[0], ref=lambda a, b: np.broadcast_to(a, (3, 4))),
            Sample(t(3, 1), t(4), call=lambda op, a, b: op(a, b)[1], ref=lambda a, b: np.broadcast_to(b, (3, 4)),
                   desc="second"),
        ],
        "meshgrid": lambda: [
            Sample(t(3), t(2), call=lambda op, a, b: op(a, b, indexing="ij")[0],
                   ref=lambda a, b: np.meshgrid(a, b, indexing="ij")[0]),
            Sample(t(3), t(2), t(2), call=lambda op, a, b, c: op(a, b, c, indexing="xy")[1],
                   ref=lambda a, b, c: np.meshgrid(a, b, c, indexing="xy")[1], desc="xy, second of three"),
        ],
        "cartesian_prod": lambda: [
            Sample(t(3), t(2), call=lambda op, a, b: op(a, b),
                   ref=lambda a, b: np.stack([np.repeat(a, 2), np.tile(b, 3)], 1)),
            Sample(t(3), call=lambda op, a: op(a), ref=lambda a: a, desc="one tensor"),
        ],
        "block_diag": lambda: [
            Sample(t(2, 2), t(3), t(), call=lambda op, *ts: op(*ts)),
            Sample(t(1, 2), t(2, 1), call=lambda op, a, b: op(a, b),
                   ref=lambda a, b: np.block([[a, np.zeros((1, 1))], [np.zeros((2, 2)), b]]), desc="two"),
        ],
    }
