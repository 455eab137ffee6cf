"""Run the docstring examples of every module of the package (public docstrings carry runnable ones)."""
from __future__ import annotations

import doctest
import importlib
import pkgutil

import pytest

import threadgrad
from threadgrad import devices, engine, ops

# devices.cuda's examples need the fake cupy of tests/devices (test_streams.py runs them).
SKIP = {"threadgrad.devices.cuda"}
# Modules whose examples need an optional extra's package.
NEEDS = {"threadgrad.viz": "graphviz"}
# Each part is walked through its own __path__: an editable install maps the parts to the
# repository's folders, which threadgrad.__path__ does not list.
MODULES = ["threadgrad"] + sorted(
    name for part in (devices, engine, ops)
    for name in [part.__name__] + [m.name for m in pkgutil.walk_packages(part.__path__, part.__name__ + ".")]
    if name not in SKIP
) + sorted(  # the front door's own modules (threadgrad.optim, threadgrad.nn.functional, ...)
    m.name for m in pkgutil.walk_packages(threadgrad.__path__, "threadgrad.")
    if m.name.split(".")[1] not in ("devices", "engine", "ops")
)


def test_every_part_is_walked() -> None:
    assert {"threadgrad.engine", "threadgrad.ops", "threadgrad.devices", "threadgrad.engine.executor",
            "threadgrad.ops.elementwise", "threadgrad.optim.adam", "threadgrad.nn.functional",
            "threadgrad.utils.checkpoint", "threadgrad.autograd.graph", "threadgrad.serialization"} <= set(MODULES)


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name: str) -> None:
    if name in NEEDS:
        pytest.importorskip(NEEDS[name])  # an optional extra that is not installed
    module = importlib.import_module(name)
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    assert result.failed == 0
