"""The process-wide locks of the engine and the ops, in one place: ``LOCKS``.

Code reads a lock where it uses it (``with LOCKS.view:``) and never binds one to a name of its
own, so that the locks a forked child makes anew are the ones it uses. See Note [Locks
across fork].
"""
from __future__ import annotations

import os
import threading

# Note [Locks across fork]
# ~~~~~~~~~~~~~~~~~~~~~~~~
# fork() copies the process with one thread, the caller. A lock that another thread held at
# that moment stays held in the child, and nothing there will ever release it: the child's
# first backward that needs it (a retain_grad accumulation, a first view, a leaf's first
# AccumulateGrad) would hang. So every process-wide lock of the engine and the ops is an
# attribute of the one ``LOCKS`` object, and the child replaces all of them with new, free
# locks (``os.register_at_fork``), before any of its code runs. A module that bound a lock
# with ``from ... import`` would keep the parent's object: hence ``LOCKS.name`` at each use.
# The engine's own threads, queues and pool are remade by Engine._after_fork_in_child
# (executor.py), the device registry's lock by devices/__init__.py (Note [Fork] there).
# tests/stress/test_fork_locks.py holds every lock reachable from the modules of engine/ and
# ops/ while forking and checks that the child finds each one free.
#
# Not covered, as in torch: a per-object lock held at the fork (a leaf's AccumulateGrad lock
# during another thread's accumulation): the child hangs if it accumulates into that leaf.
# A lock the forking thread itself held is free in the child too; releasing it there raises
# RuntimeError (none of these locks is held while user code runs).


class ProcessLocks:
    """The engine's and the ops' process-wide locks, one attribute each (made anew in a forked child)."""

    __slots__ = ("acc", "nonleaf_grad", "view", "hooks", "rng")

    def __init__(self) -> None:
        self.remake()

    def remake(self) -> None:
        """Replace every lock with a new, free one (in a forked child, before anything else runs)."""
        # Creating a leaf's AccumulateGrad (tensor.grad_accumulator), and attaching a leaf's
        # tensor hooks to it (Tensor.register_hook): one node per leaf, no hook left out.
        self.acc = threading.Lock()
        # Adding into a non-leaf's .grad (retain_grad, backward(inputs=[non_leaf])): the role
        # AccumulateGrad's lock plays for leaves. The in-place add releases the GIL on large
        # arrays, so without it concurrent backward calls lose updates.
        self.nonleaf_grad = threading.Lock()
        # A base's graph generation (engine/versions.py next_generation): each recorded in-place
        # op on a base or its views counts once.
        self.view = threading.Lock()
        # Registering and removing hooks (graph.py, Note [Hook tables]); never taken by backward.
        self.hooks = threading.Lock()
        # The process-wide random generator (creation.py): numpy Generators are not thread-safe.
        self.rng = threading.Lock()


LOCKS = ProcessLocks()

if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=LOCKS.remake)
