"""The parallel task's queue and the cpu helpers' list of queues (Note [Parallel cpu workers]
in engine/executor.py), checked at the level of the two objects: the behaviour of the mode
is tested in test_cpu_workers.py."""
from __future__ import annotations

import threading

import pytest

from threadgrad.engine import executor


class _RecordingHelpers:
    """Stands in for _CpuHelpers: records each listing, and whether the queue's lock was held."""

    def __init__(self) -> None:
        self.offers: list[bool] = []
        self.idle = 0
        self.woken = 0
        self.queue = None

    def offer(self, q) -> None:
        self.offers.append(q._lock.locked())

    def wake_one(self) -> None:
        self.woken += 1


def test_a_queue_is_listed_under_its_own_lock_once_per_unlisting():
    """A steal that finds the queue empty unlists it (under the queue's lock) and its helper
    then removes it from the list; the listing must happen under that lock too, or the removal
    can come before the append it undoes, leaving an unlisted queue listed for the helpers to
    spin on."""
    helpers = _RecordingHelpers()
    q = executor._SharedQueue(helpers)
    q.push(-1, object(), "a", [])
    q.push(-2, object(), "b", [])
    assert helpers.offers == [True]          # listed once, with the queue's lock held
    assert q.steal()[3] == "b" and q.steal()[3] == "a"  # (the smaller key first)
    assert q.steal() is False                # this steal unlisted it: its helper removes it
    assert q.steal() is True                 # already unlisted: nothing to remove
    q.push(-3, object(), "c", [])
    assert helpers.offers == [True, True]    # listed again, again under the lock


def test_each_push_to_a_listed_queue_wakes_one_sleeping_helper():
    helpers = _RecordingHelpers()
    q = executor._SharedQueue(helpers)
    q.push(-1, object(), "a", [])            # lists it (the listing wakes one)
    q.push(-2, object(), "b", [])
    assert helpers.woken == 0                # nobody sleeps
    helpers.idle = 2
    q.push(-3, object(), "c", [])
    q.push(-4, object(), "d", [])
    assert helpers.woken == 2


@pytest.mark.timeout(30)
def test_pop_until_a_task_returns_once_it_is_done_and_holds_no_wake_up_entry():
    """The driver of a parallel task waits in pop(until=its task); a wake-up push wakes it without
    queueing an entry a helper could take."""
    q = executor._SharedQueue(_RecordingHelpers())

    class Task:
        done = False

    task = Task()
    got = []
    t = threading.Thread(target=lambda: got.append(q.pop(task)))
    t.start()
    while not q._waiters:                    # the driver is asleep in pop
        threading.Event().wait(0.001)
    task.done = True
    q.push(executor._WAKE_PRIO, None, None, None)
    t.join(10)
    assert got == [executor._NOTHING] and len(q) == 0
