"""einsum: any number of operands, torch's equation forms. See Note [Op definitions] in _core.py.

Note [einsum's one node]
~~~~~~~~~~~~~~~~~~~~~~~~
torch lowers an einsum to permutes, reshapes and bmm calls and records their nodes; here the
parsed equation goes to ``numpy.einsum`` whole (``optimize=True``: numpy picks the contraction
order) and one node, ``EinsumBackward0``, is recorded. The equation is first brought to a
plain form: every label an int, each ``...`` replaced by labels of its own (aligned from the
right, as broadcasting aligns dims), and each dim of size 1 whose label has a larger size
elsewhere squeezed out of its operand (it broadcasts: a reshape, recorded as usual), so the
node sees equal sizes for equal labels and no ellipsis.

The gradient for operand ``i`` is itself an einsum of the output's gradient and the other
operands, giving operand ``i``'s labels. Two cases need more than that, since an einsum
output can neither repeat a label nor hold one no input has:

* a label that only operand ``i`` holds (summed away in the forward, ``'ij->i'``'s ``j``):
  a constant ones operand with those labels broadcasts the gradient along them;
* a label repeated in operand ``i`` (a diagonal, ``'ii->i'``): each repeat gets a fresh
  label and a constant identity matrix joins the two, which puts the gradient on the
  diagonal and zeros elsewhere.

The backward calls the same einsum, so it records an ``EinsumBackward0`` of its own under
``create_graph``: einsum is differentiable twice (any number of times) from one formula.
"""
from __future__ import annotations

from typing import Any

import numpy

from ..engine.tensor import Tensor, _wrap

from ._core import Node, check_tensor, const, device_error, fit, record, register, tls
from .shape import reshape

# Labels: 'A'-'Z' are 0-25 and 'a'-'z' 26-51 (torch's order, which sorts the implicit output);
# the dims of an ellipsis get labels from _ELLIPSIS_BASE up.
_ELLIPSIS_BASE = 52


def _label_of(ch: str) -> int:
    return ord(ch) - ord("A") if ch <= "Z" else ord(ch) - ord("a") + 26


def _parse_term(term: str, offset: int, what: str) -> list:
    """One operand's (or the output's) subscripts: ints, and ``...`` as ``Ellipsis``."""
    labels: list = []
    i = 0
    while i < len(term):
        ch = term[i]
        if ch == ".":
            out = what == "output"  # (torch words the output's two errors a little differently)
            if Ellipsis in labels:
                raise RuntimeError(f"einsum(): found '.' for output but an ellipsis (...) was already found" if out
                                   else f"einsum(): found '.' for {what} for which an ellipsis was already found")
            if term[i:i + 3] != "...":
                raise RuntimeError(f"einsum(): found '.' for {what} that is not part of any ellipsis"
                                   + (" (...)" if out else ""))
            labels.append(Ellipsis)
            i += 3
            continue
        if not ("a" <= ch <= "z" or "A" <= ch <= "Z"):
            raise RuntimeError(f"einsum(): invalid subscript given at index {offset + i} in the equation string, "
                               f"subscripts must be in [a-zA-Z]")
        labels.append(_label_of(ch))
        i += 1
    return labels


def _parse_equation(equation: str, n_operands: int) -> tuple[list, list | None]:
    eq = equation.replace(" ", "")
    lhs, arrow, rhs = eq.partition("->")
    terms, offset, subs = lhs.split(","), 0, []
    if len(terms) > n_operands:
        raise RuntimeError("einsum(): fewer operands were provided than specified in the equation")
    if len(terms) < n_operands:
        raise RuntimeError("einsum(): more operands were provided than specified in the equation")
    for k, term in enumerate(terms):
        subs.append(_parse_term(term, offset, f"operand {k}"))
        offset += len(term) + 1
    out = _parse_term(rhs, len(lhs) + 2, "output") if arrow else None
    return subs, out


def _parse_sublists(args: tuple) -> tuple[list, list, list | None]:
    """torch's sublist form: ``einsum(op0, [0, 1], op1, [1, 2], [0, 2])``."""
    operands, subs = list(args[0::2][:len(args) // 2]), []
    for k, sub in enumerate(args[1::2][:len(args) // 2]):
        subs.append(_check_sublist(sub, f"operand {k}"))
    out = _check_sublist(args[-1], "output") if len(args) % 2 else None
    return operands, subs, out


def _check_sublist(sub: Any, what: str) -> list:
    labels = []
    for s in sub:
        if s is Ellipsis:
            labels.append(Ellipsis)
        elif isinstance(s, (int, numpy.integer)) and 0 <= s < 52:
            labels.append(int(s))
        else:
            raise RuntimeError(f"einsum(): expected subscript to be within the range [0, 52) for {what}, but got {s}")
    return labels


def _char(label: int) -> str:
    return chr(ord("A") + label) if label < 26 else chr(ord("a") + label - 26)


@register
def einsum(*args: Any) -> Tensor:
    """Sum over products of the operands' elements as the equation says, as ``torch.einsum``:
    ``einsum("ij,jk->ik", a, b)``, the implicit form ``"ij,jk"`` (output: the labels seen
    once, sorted, after the ``...`` dims), ``...`` for broadcast dims, dims of size 1
    broadcasting, a list of operands (``einsum(eq, [a, b])``) or torch's sublist form
    (``einsum(a, [0, 1], b, [1, 2], [0, 2])``). The contraction order is numpy's
    (``optimize=True``); one node, ``EinsumBackward0`` (Note [einsum's one node]).

    >>> import threadgrad as tg
    >>> a = tg.tensor([[1.0, 2.0], [3.0, 4.0]], requires_grad=True)
    >>> tg.einsum("ii", a).item(), tg.einsum("ij,jk->ik", a, a).tolist()
    (5.0, [[7.0, 10.0], [15.0, 22.0]])
    """
    if not args:
        raise ValueError("einsum(): must specify the equation string and at least one operand, or at least one "
                         "operand and its subscripts list")
    if isinstance(args[0], str):
        two = len(args) == 2 and isinstance(args[1], (list, tuple))
        operands = list(args[1]) if two else list(args[1:])  # einsum(eq, [a, b]) or einsum(eq, a, b)
        if not operands:
            raise ValueError("einsum(): must specify the equation string and at least one operand, or at least one "
                             "operand and its subscripts list")
        subs, out = _parse_equation(args[0], len(operands))
    else:
        operands, subs, out = _parse_sublists(args)
    operands = [check_tensor(op, "einsum", f"operands[{k}]") for k, op in enumerate(operands)]
    dev = operands[0].device
    for op in operands[1:]:
        if op.device is not dev:
            raise device_error("einsum", operands[0], op)
    return _einsum_plain(operands, subs, out)


def _einsum_plain(operands: list, subs: list, out: list | None) -> Tensor:
    """Bring the parsed equation to plain form (Note [einsum's one node]) and run it."""
    ell_ndim = 0
    for k, (op, sub) in enumerate(zip(operands, subs)):
        n_named = len(sub) - (Ellipsis in sub)
        if Ellipsis in sub:
            if n_named > op.ndim:
                raise RuntimeError(f"einsum(): the number of subscripts in the equation ({n_named}) is more than the "
                                   f"number of dimensions ({op.ndim}) for operand {k}")
            ell_ndim = max(ell_ndim, op.ndim - n_named)
        elif n_named != op.ndim:
            raise RuntimeError(f"einsum(): the number of subscripts in the equation ({n_named}) does not match the "
                               f"number of dimensions ({op.ndim}) for operand {k} and no ellipsis was given")
    ell_labels = list(range(_ELLIPSIS_BASE, _ELLIPSIS_BASE + ell_ndim))
    plain_subs = []
    for op, sub in zip(operands, subs):
        if Ellipsis in sub:
            at = sub.index(Ellipsis)
            k = op.ndim - (len(sub) - 1)
            sub = sub[:at] + ell_labels[ell_ndim - k:] + sub[at + 1:]
        plain_subs.append(list(sub))
    seen = [l for sub in plain_subs for l in sub]
    if out is None:  # implicit: the ellipsis dims, then the labels seen once, sorted
        out_labels = ell_labels + sorted(l for l in set(seen) if l < _ELLIPSIS_BASE and seen.count(l) == 1)
    else:
        out_labels = []
        for l in out:
            if l is Ellipsis:
                out_labels += ell_labels
                continue
            if l not in seen:
                raise RuntimeError(f"einsum(): output subscript {_char(l)} does not appear in the equation for any "
                                   f"input operand")
            if l in out_labels:
                raise RuntimeError(f"einsum(): output subscript {_char(l)} appears more than once in the output")
            out_labels.append(l)
    sizes: dict = {}
    for k, (op, sub) in enumerate(zip(operands, plain_subs)):
        mine: dict = {}
        where: dict = {}
        for d, (l, n) in enumerate(zip(sub, op.shape)):
            if l in mine and mine[l] != n:
                raise RuntimeError(f"einsum(): subscript {_char(l)} is repeated for operand {k} but the sizes don't "
                                   f"match, {n} != {mine[l]}")
            mine[l], where[l] = n, d
        for l, n in mine.items():
            known = sizes.get(l, 1)
            if n != 1 and known != 1 and n != known:
                if l >= _ELLIPSIS_BASE:  # torch's words, its missing space included
                    raise RuntimeError(f"einsum(): dimension {where[l]} covered by ellipsis in operand {k}has size {n} "
                                       f"which does not broadcast with previously seen ellipsis with size {known} "
                                       f"for the respective dimension")
                raise RuntimeError(f"einsum(): subscript {_char(l)} has size {n} for operand {k} which does not "
                                   f"broadcast with previously seen size {known}")
            sizes[l] = max(known, n)
    for k, (op, sub) in enumerate(zip(operands, plain_subs)):  # size-1 dims that broadcast: squeezed out
        keep = [d for d, l in enumerate(sub) if not (op.shape[d] == 1 and sizes[l] != 1)]
        if len(keep) != len(sub):
            operands[k] = reshape(op, tuple(op.shape[d] for d in keep))
            plain_subs[k] = [sub[d] for d in keep]
    return _einsum(operands, plain_subs, out_labels, sizes)


class EinsumBackward0(Node):
    """One einsum of any number of operands; each gradient is an einsum too (Note [einsum's
    one node])."""

    __slots__ = ("subs", "out", "sizes", "shapes", "dtypes")

    def backward(self, g: Tensor) -> tuple:
        operands = self.saved_tensors()
        grads: list = []
        used = set(self.out).union(*map(set, self.subs))
        for i, edge in enumerate(self.next_edges):
            if edge[0] is None:
                grads.append(None)
                continue
            others = [l for k, sub in enumerate(self.subs) if k != i for l in sub]
            available = set(self.out).union(others)
            ops_, subs_ = [g], [list(self.out)]
            ops_ += [op for k, op in enumerate(operands) if k != i]
            subs_ += [sub for k, sub in enumerate(self.subs) if k != i]
            target, fresh = [], iter(l for l in range(200) if l not in used)
            dtype = g.dtype  # (the constants: fit casts the result to the operand's dtype)
            for l in self.subs[i]:
                if l not in target:
                    target.append(l)
                    continue
                twin = next(fresh)  # a repeat: a fresh label joined to l by an identity matrix
                target.append(twin)
                ops_.append(const(g.device.xp.eye(self.sizes[l], dtype=dtype), g))
                subs_.append([l, twin])
            missing = [l for l in dict.fromkeys(self.subs[i]) if l not in available]
            if missing:  # labels only this operand has: broadcast along them
                ops_.append(const(g.device.xp.ones(tuple(self.sizes[l] for l in missing), dtype=dtype), g))
                subs_.append(missing)
            grads.append(fit(_einsum(ops_, subs_, target, self.sizes), self.shapes[i], self.dtypes[i]))
        return tuple(grads)


def _einsum(operands: list, subs: list, out: list, sizes: dict) -> Tensor:
    """numpy's einsum over plain subscripts (ints, no ellipsis, equal sizes for equal labels),
    recording EinsumBackward0."""
    # numpy's sublists take labels in [0, 52): number the labels in use from 0
    number = {l: k for k, l in enumerate(sorted(set(out).union(*map(set, subs))))}
    if len(number) > 52:
        raise RuntimeError(f"einsum(): at most 52 distinct labels are supported, got {len(number)}")
    xp = operands[0].device.xp
    arrays = [op._data for op in operands]
    call: list = []
    for a, sub in zip(arrays, subs):
        call += [a, [number[l] for l in sub]]
    data = xp.asarray(xp.einsum(*call, [number[l] for l in out], optimize=True))
    if any(xp.may_share_memory(data, a) for a in arrays):  # a view (one operand: a transpose, a diagonal)
        data = data.copy()
    result = _wrap(data, operands[0].device)
    if tls.grad_enabled and any(op._rg for op in operands):
        node = EinsumBackward0()
        node.subs, node.out, node.sizes = [list(s) for s in subs], list(out), dict(sizes)
        node.shapes, node.dtypes = [op.shape for op in operands], [op.dtype for op in operands]
        record(node, tuple(operands), result, tuple(operands))
    return result
