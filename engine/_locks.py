"""The process-wide locks of the engine and the ops, in one place: ``LOCKS``.

Code reads a lock where it uses it (``with LOCKS.view:``) and never binds one to a name of its
own, so that the locks a forked child makes anew are the ones it uses. See Note [Locks
across fork].
"""
from __future__ import annotations

import itertools
import os
import threading
import weakref
from typing import Any

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
# Locks that belong to one object (an optimizer's, a DistributedDataParallel's, a profile's, a
# checkpoint's) are remade the same way: the object registers itself with ``remade_at_fork``
# and its ``_remake_locks()`` runs in the child, after LOCKS'. A leaf's accumulation (torch
# gives each AccumulateGrad a mutex of its own, which a fork leaves held) takes one of
# LOCKS.leaf's stripes instead, picked once per AccumulateGrad: leaves are made anew each
# forward, and a lock each (made, registered and dropped per leaf per step) would cost more
# than the stripes, which are remade with LOCKS. tests/stress/test_fork_locks.py finds every
# lock the library's source creates and names, for each, what remakes it in a child.
# A lock the forking thread itself held is free in the child too; releasing it there raises
# RuntimeError (none of these locks is held while user code runs). What the lock protected is
# as the other thread left it at the fork (an optimizer's step half done): fork between steps.

LEAF_STRIPES = 64  # (a power of two: AccumulateGrad takes ``number & (LEAF_STRIPES - 1)``)


class ProcessLocks:
    """The engine's and the ops' process-wide locks, one attribute each (made anew in a forked child)."""

    __slots__ = ("acc", "nonleaf_grad", "view", "hooks", "rng", "leaf")

    def __init__(self) -> None:
        self.remake()

    def remake(self) -> None:
        """Replace every lock with a new, free one (in a forked child, before anything else runs)."""
        # Creating a leaf's AccumulateGrad (tensor.grad_accumulator), and attaching a leaf's
        # tensor hooks to it (Tensor.register_hook): one node per leaf, no hook left out.
        self.acc = threading.Lock()
        # Adding into a non-leaf's .grad (retain_grad, backward(inputs=[non_leaf])): the role an
        # AccumulateGrad's stripe of LOCKS.leaf plays for leaves. The in-place add releases the
        # GIL on large arrays, so without it concurrent backward calls lose updates.
        self.nonleaf_grad = threading.Lock()
        # A base's graph generation (engine/versions.py next_generation): each recorded in-place
        # op on a base or its views counts once.
        self.view = threading.Lock()
        # Registering and removing hooks (graph.py, Note [Hook tables]); never taken by backward.
        self.hooks = threading.Lock()
        # The process-wide random generator (creation.py): numpy Generators are not thread-safe.
        self.rng = threading.Lock()
        # Adding into a leaf's .grad (AccumulateGrad.apply): concurrent backward calls that
        # reach one leaf take the same stripe; other leaves mostly take others.
        self.leaf = tuple(threading.Lock() for _ in range(LEAF_STRIPES))


LOCKS = ProcessLocks()

next_leaf_stripe = itertools.count().__next__  # (atomic: See section 10 of docs/architecture.md)

# Objects with locks of their own, remade in a forked child (weakly held: registering keeps
# nothing alive). See Note [Locks across fork].
_owners: weakref.WeakSet = weakref.WeakSet()


def remade_at_fork(owner: Any) -> None:
    """Have ``owner._remake_locks()`` called in a child forked while ``owner`` lives, before any
    of the child's code runs: it replaces each lock of the object with a new, free one."""
    _owners.add(owner)


class OwnLock:
    """A lock for code that has no object to hang one on (a closure's): ``with box.lock:``,
    read at each use, remade in a forked child."""

    __slots__ = ("lock", "__weakref__")

    def __init__(self) -> None:
        self.lock = threading.Lock()
        remade_at_fork(self)

    def _remake_locks(self) -> None:
        self.lock = threading.Lock()


def _after_fork_in_child() -> None:
    LOCKS.remake()
    for owner in list(_owners):
        owner._remake_locks()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)
