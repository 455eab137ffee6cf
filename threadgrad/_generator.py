"""``tg.Generator``: a random number generator object, as ``torch.Generator``, for the
``generator=`` arguments of ``nn.init``, ``utils.data`` (``random_split``, ``DataLoader``,
samplers) and ``tg.randperm``-like draws there.

It wraps a numpy PCG64 generator with its own lock (numpy generators are not thread-safe), so
one Generator may be shared by threads; the numbers differ from torch's for the same seed.

>>> import threadgrad as tg
>>> g = tg.Generator().manual_seed(42)
>>> a = g._draw("uniform", (3,)); _ = g.manual_seed(42)
>>> bool((a == g._draw("uniform", (3,))).all())
True
"""
from __future__ import annotations

import threading
from typing import Any

import numpy

from . import devices
from .engine._locks import remade_at_fork

__all__ = ["Generator"]


class Generator:
    """``Generator(device='cpu')``: ``manual_seed(seed)`` (returns the generator),
    ``seed()``, ``initial_seed()``, ``get_state()`` / ``set_state(state)``."""

    def __init__(self, device: Any = "cpu") -> None:
        self.device = devices.get(device)
        self._lock = threading.Lock()  # numpy Generators are not thread-safe
        remade_at_fork(self)  # a child forked mid-draw finds it free: Note [Locks across fork]
        self._initial_seed = 67280421310721  # torch's default seed for a new Generator
        self._gen = numpy.random.Generator(numpy.random.PCG64(self._initial_seed))

    def _remake_locks(self) -> None:
        self._lock = threading.Lock()

    def manual_seed(self, seed: int) -> "Generator":
        with self._lock:
            self._initial_seed = int(seed)
            self._gen = numpy.random.Generator(numpy.random.PCG64(self._initial_seed))
        return self

    def seed(self) -> int:
        """Seed from fresh entropy; returns the seed."""
        seed = int(numpy.random.SeedSequence().entropy % (1 << 63))
        self.manual_seed(seed)
        return seed

    def initial_seed(self) -> int:
        return self._initial_seed

    def get_state(self) -> dict:
        with self._lock:
            return self._gen.bit_generator.state

    def set_state(self, state: dict) -> "Generator":
        with self._lock:
            self._gen.bit_generator.state = state
        return self

    def _draw(self, kind: str, shape: tuple) -> numpy.ndarray:
        """float64 host samples (``uniform`` in [0, 1) or standard ``normal``)."""
        with self._lock:
            if kind == "uniform":
                return self._gen.random(shape)
            return self._gen.standard_normal(shape)

    def _randperm(self, n: int) -> numpy.ndarray:
        with self._lock:
            return self._gen.permutation(n)

    def _integers(self, high: int, size: int) -> numpy.ndarray:
        with self._lock:
            return self._gen.integers(0, high, size)

    def __getstate__(self) -> dict:
        return {"device": str(self.device), "seed": self._initial_seed, "state": self.get_state()}

    def __setstate__(self, state: dict) -> None:
        self.__init__(state["device"])
        self._initial_seed = state["seed"]
        self.set_state(state["state"])
