"""Anomaly mode: ``detect_anomaly`` / ``set_detect_anomaly`` (thread-local, like grad mode).

While it is on, every node records the forward stack that created it; a NaN produced by a
node in backward raises RuntimeError naming the node (with ``check_nan``), and any error in
backward carries that forward traceback (as an exception note). Off, it costs the per-op
path one thread-local read and the per-node path one attribute read.

>>> from threadgrad import engine
>>> x = engine.tensor([0.0], requires_grad=True)
>>> with engine.detect_anomaly():
...     y = (x.log() * 0).sum()
...     try:
...         y.backward()
...     except RuntimeError as e:
...         print(str(e).split(" [")[0])
Function 'LogBackward0' returned nan values in its 0th output.
"""
from __future__ import annotations

import warnings
from typing import Any

from ._state import tls, used


def is_anomaly_enabled() -> bool:
    return tls.anomaly


def is_anomaly_check_nan_enabled() -> bool:
    return tls.anomaly_check_nan


class detect_anomaly:
    """Context manager turning anomaly mode on (on this thread) for its block."""

    def __init__(self, check_nan: bool = True) -> None:
        self.check_nan = bool(check_nan)
        warnings.warn("Anomaly Detection has been enabled. This mode will increase the runtime and should only be "
                      "enabled for debugging.", UserWarning, stacklevel=2)

    def __enter__(self) -> None:
        self._prev = (tls.anomaly, tls.anomaly_check_nan)
        used.anomaly = True  # before the thread-local: see Note [Used flags] in _state.py
        tls.anomaly, tls.anomaly_check_nan = True, self.check_nan

    def __exit__(self, *exc: Any) -> None:
        tls.anomaly, tls.anomaly_check_nan = self._prev


class set_detect_anomaly:
    """Turn anomaly mode on or off on this thread; as a context manager, restore on exit."""

    def __init__(self, mode: bool, check_nan: bool = True) -> None:
        self._prev = (tls.anomaly, tls.anomaly_check_nan)
        if mode or not check_nan:  # (either value off its default: the executor then copies both)
            used.anomaly = True  # before the thread-local: see Note [Used flags] in _state.py
        tls.anomaly, tls.anomaly_check_nan = bool(mode), bool(check_nan)

    def __enter__(self) -> None:
        pass

    def __exit__(self, *exc: Any) -> None:
        tls.anomaly, tls.anomaly_check_nan = self._prev
