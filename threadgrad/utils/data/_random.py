"""The draws utils.data makes: from a ``tg.Generator`` when one is given, else from the
global generator (``tg.manual_seed``), as torch's samplers do."""
from __future__ import annotations

from typing import Any

import numpy

from ...engine import creation


def randperm(n: int, generator: Any = None) -> numpy.ndarray:
    """A permutation of ``range(n)`` (int64 numpy array)."""
    if generator is not None:
        return generator._randperm(n).astype(numpy.int64)
    return numpy.argsort(creation.random_array("uniform", (int(n),), "float64"), kind="stable").astype(numpy.int64)


def seed_from(generator: Any = None) -> int:
    """A 63-bit seed drawn from ``generator`` (or the global one): what torch's RandomSampler
    does at each epoch when it has no generator, so that epochs differ but a seeded run repeats."""
    if generator is not None:
        return int(generator._integers(1 << 62, 1)[0])
    return int(creation.random_array("uniform", (), "float64") * (1 << 62))


def integers(high: int, size: int, generator: Any = None) -> numpy.ndarray:
    """``size`` integers uniform in ``[0, high)``."""
    if generator is not None:
        return generator._integers(high, size).astype(numpy.int64)
    u = creation.random_array("uniform", (int(size),), "float64")
    return numpy.minimum(numpy.floor(u * high), high - 1).astype(numpy.int64)
