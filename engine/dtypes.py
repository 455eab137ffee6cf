"""torch's dtype promotion for two tensor operands (numpy's differs for mixed kinds and 0-d).

>>> import numpy
>>> from threadgrad import engine
>>> result_dtype(engine.tensor([1, 2]), engine.tensor([0.5, 1.5])) == numpy.float32
True
"""
from __future__ import annotations

from typing import Any

import numpy

# Type categories for promotion, in torch's order: bool < integer < floating < complex.
CATEGORY = {"b": 0, "u": 1, "i": 1, "f": 2, "c": 3}


def result_dtype(a: Any, b: Any) -> numpy.dtype:
    """torch's promotion of two tensor operands (anything with ``dtype`` and ``ndim``).

    A higher category wins outright (``int64 + float32 -> float32``, where numpy gives
    float64); within one category a dimensioned tensor wins over a 0-d one (``float32[3] +
    float64[] -> float32``); otherwise the wider type. Python numbers were already made
    tensors of the other operand's dtype by ``ops._core.as_operand``.
    """
    da, db = a.dtype, b.dtype
    if da == db:
        return da
    ca, cb = CATEGORY.get(da.kind, 2), CATEGORY.get(db.kind, 2)
    if ca != cb:
        return da if ca > cb else db
    if (a.ndim == 0) != (b.ndim == 0):
        return db if a.ndim == 0 else da
    return numpy.promote_types(da, db)


def promoted(data: Any, a: Any, b: Any) -> Any:
    """A binary op's result ``data`` (an array or a numpy scalar of ``a``'s device) in
    :func:`result_dtype` of its operands; call it only when their dtypes differ."""
    data = a.device.xp.asarray(data)
    dt = result_dtype(a, b)
    return data if data.dtype == dt else data.astype(dt)
