"""torch's cpu selection algorithms, replayed on one slice: where equal values tie, the index an
op reports is wherever torch's algorithm happened to leave each element, and it says which
element gets the gradient. See Note [Index choice among ties] in order.py.

* :func:`quickselect_index`: kthvalue's quickselect (median-of-three pivot, Hoare partition).
* :func:`topk_order`: topk's ``std::partial_sort`` (``k * 64 <= n``) or ``std::nth_element``
  then ``std::sort`` of the first ``k - 1``, as GCC's libstdc++ implements them (heap select,
  introselect, introsort with insertion sort below 16 elements).

Both take the slice as a Python list and are plain loops: order.py calls them only for the
slices whose result a tie makes ambiguous; every other slice is a whole-array sort.
"""
from __future__ import annotations

from typing import Callable


def _greater_or_nan(a: float, b: float) -> bool:
    """The descending order of torch's selections: NaN above every number."""
    return (a != a and b == b) or a > b


def _less_or_nan(a: float, b: float) -> bool:
    """The ascending order: NaN after every number."""
    return (a == a and b != b) or a < b


def quickselect_index(values: list, k: int) -> int:
    """The original position torch's cpu kthvalue reports for the ``k``-th (0-based) smallest
    of ``values``: the same quickselect, swap for swap."""
    vals = list(values)
    pos = list(range(len(vals)))
    above = _greater_or_nan

    def swap(i: int, j: int) -> None:
        vals[i], vals[j] = vals[j], vals[i]
        pos[i], pos[j] = pos[j], pos[i]

    lo, hi = 0, len(vals) - 1
    while hi > lo:
        if hi == lo + 1:
            if above(vals[lo], vals[hi]):
                swap(lo, hi)
            break
        swap(lo + (hi - lo) // 2, lo + 1)  # the median of three becomes the pivot, at lo
        if above(vals[lo + 1], vals[hi]):
            swap(lo + 1, hi)
        if above(vals[lo], vals[hi]):
            swap(lo, hi)
        if above(vals[lo + 1], vals[lo]):
            swap(lo + 1, lo)
        i, j, pivot = lo + 1, hi, vals[lo]
        while True:
            i += 1
            while above(pivot, vals[i]):
                i += 1
            j -= 1
            while above(vals[j], pivot):
                j -= 1
            if j < i:
                break
            swap(i, j)
        swap(lo, j)
        if j <= k:
            lo = i
        if j >= k:
            hi = j - 1
    return pos[k]


class _Pairs:
    """A slice as libstdc++ sees torch's ``std::vector<std::pair<value, index>>``: the values
    and their original positions moved together, ordered by ``before`` on the values alone."""

    def __init__(self, values: list, before: Callable[[float, float], bool]) -> None:
        self.v = list(values)
        self.p = list(range(len(values)))
        self.before = before

    def swap(self, i: int, j: int) -> None:
        v, p = self.v, self.p
        v[i], v[j] = v[j], v[i]
        p[i], p[j] = p[j], p[i]

    def put(self, i: int, item: tuple) -> None:
        self.v[i], self.p[i] = item

    def take(self, i: int) -> tuple:
        return self.v[i], self.p[i]

    # --- heaps (bits/stl_heap.h): a max-heap under ``before`` -----------------------------

    def _push_heap(self, first: int, hole: int, top: int, item: tuple) -> None:
        parent = (hole - 1) // 2
        while hole > top and self.before(self.v[first + parent], item[0]):
            self.put(first + hole, self.take(first + parent))
            hole = parent
            parent = (hole - 1) // 2
        self.put(first + hole, item)

    def _adjust_heap(self, first: int, hole: int, length: int, item: tuple) -> None:
        top = child = hole
        while child < (length - 1) // 2:
            child = 2 * (child + 1)
            if self.before(self.v[first + child], self.v[first + child - 1]):
                child -= 1
            self.put(first + hole, self.take(first + child))
            hole = child
        if length % 2 == 0 and child == (length - 2) // 2:
            child = 2 * (child + 1)
            self.put(first + hole, self.take(first + child - 1))
            hole = child - 1
        self._push_heap(first, hole, top, item)

    def _make_heap(self, first: int, last: int) -> None:
        length = last - first
        if length < 2:
            return
        for parent in range((length - 2) // 2, -1, -1):
            self._adjust_heap(first, parent, length, self.take(first + parent))

    def _pop_heap(self, first: int, last: int, result: int) -> None:
        item = self.take(result)
        self.put(result, self.take(first))
        self._adjust_heap(first, 0, last - first, item)

    def heap_select(self, first: int, middle: int, last: int) -> None:
        self._make_heap(first, middle)
        for i in range(middle, last):
            if self.before(self.v[i], self.v[first]):
                self._pop_heap(first, middle, i)

    def sort_heap(self, first: int, last: int) -> None:
        while last - first > 1:
            last -= 1
            self._pop_heap(first, last, last)

    # --- partitions and insertion sorts (bits/stl_algo.h) -----------------------------------

    def _median_to_first(self, result: int, a: int, b: int, c: int) -> None:
        v, before = self.v, self.before
        if before(v[a], v[b]):
            pick = b if before(v[b], v[c]) else (c if before(v[a], v[c]) else a)
        elif before(v[a], v[c]):
            pick = a
        else:
            pick = c if before(v[b], v[c]) else b
        self.swap(result, pick)

    def _partition(self, first: int, last: int) -> int:
        """The pivot (median of three) moved to ``first``, then an unguarded partition."""
        self._median_to_first(first, first + 1, first + (last - first) // 2, last - 1)
        v, before, pivot = self.v, self.before, first
        lo, hi = first + 1, last
        while True:
            while before(v[lo], v[pivot]):
                lo += 1
            hi -= 1
            while before(v[pivot], v[hi]):
                hi -= 1
            if not lo < hi:
                return lo
            self.swap(lo, hi)
            lo += 1

    def _linear_insert(self, last: int) -> None:
        item = self.take(last)
        while self.before(item[0], self.v[last - 1]):
            self.put(last, self.take(last - 1))
            last -= 1
        self.put(last, item)

    def _insertion_sort(self, first: int, last: int) -> None:
        for i in range(first + 1, last):
            if self.before(self.v[i], self.v[first]):
                item = self.take(i)
                self.v[first + 1:i + 1], self.p[first + 1:i + 1] = self.v[first:i], self.p[first:i]
                self.put(first, item)
            else:
                self._linear_insert(i)

    def nth_element(self, nth: int) -> None:
        first, last = 0, len(self.v)
        if nth == last:
            return
        depth = 2 * ((last - first).bit_length() - 1)
        while last - first > 3:
            if depth == 0:
                self.heap_select(first, nth + 1, last)
                self.swap(first, nth)
                return
            depth -= 1
            cut = self._partition(first, last)
            if cut <= nth:
                first = cut
            else:
                last = cut
        self._insertion_sort(first, last)

    def sort(self, first: int, last: int) -> None:
        if last - first < 1:
            return
        self._introsort(first, last, 2 * ((last - first).bit_length() - 1))
        if last - first > 16:
            self._insertion_sort(first, first + 16)
            for i in range(first + 16, last):
                self._linear_insert(i)
        else:
            self._insertion_sort(first, last)

    def _introsort(self, first: int, last: int, depth: int) -> None:
        while last - first > 16:
            if depth == 0:
                self.heap_select(first, last, last)
                self.sort_heap(first, last)
                return
            depth -= 1
            cut = self._partition(first, last)
            self._introsort(cut, last, depth)  # (depth at most 2 log2 n: no deep recursion)
            last = cut


def topk_order(values: list, k: int, largest: bool) -> list:
    """The original positions torch's cpu topk (``sorted=True``) reports for the ``k`` largest
    (or smallest) of ``values``, NaN the largest, in its order."""
    pairs = _Pairs(values, _greater_or_nan if largest else _less_or_nan)
    n = len(values)
    if k == 0:
        return []
    if k * 64 <= n:  # torch's std::partial_sort
        pairs.heap_select(0, k, n)
        pairs.sort_heap(0, k)
    else:  # std::nth_element, then std::sort of all but the k-th
        pairs.nth_element(k - 1)
        pairs.sort(0, k - 1)
    return pairs.p[:k]


def _less(a: float, b: float) -> bool:
    return a < b  # (NaN compares false both ways, as in C++: torch's mode does not order it)


def mode_position(values: list) -> int:
    """The original position torch's cpu mode reports for ``values``: it sorts pairs (value,
    index) by value with ``std::sort`` and ``<`` (NaN unordered), then takes the first longest
    run of equal values (``!=`` ends a run, so each NaN is a run of its own) and the index at
    the run's end."""
    pairs = _Pairs(values, _less)
    n = len(values)
    pairs.sort(0, n)
    v, best, best_len, run = pairs.v, 0, 0, 0
    for i in range(n):
        run += 1
        if i == n - 1 or v[i] != v[i + 1]:
            if run > best_len:
                best, best_len = i, run
            run = 0
    return pairs.p[best]
