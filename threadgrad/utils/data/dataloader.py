"""``DataLoader``: batches of a dataset, torch's arguments and errors.

Note [DataLoader workers are threads]
~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
torch's ``num_workers > 0`` starts worker *processes*, each with a copy of the dataset, and
sends batches back through shared memory. threadgrad's workers are *threads* of this
process, each fetching whole batches (``dataset[i]`` for each index, then ``collate_fn``)
while the training loop runs: a ``ThreadPoolExecutor`` of ``num_workers`` threads with
``num_workers * prefetch_factor`` batches in flight, yielded in sampler order. This fits the
project: numpy releases the GIL in its heavy calls (and a free-threaded build needs no GIL at
all), nothing is pickled or copied between processes, and the dataset object is shared, so a
dataset whose ``__getitem__`` mutates shared state must lock it. What differs from torch:
``worker_init_fn(worker_id)`` runs once in each worker thread; ``get_worker_info()`` works
inside a worker thread (its ``dataset`` is the shared dataset, not a copy; ``seed`` is drawn
per worker); an ``IterableDataset`` is read by one prefetching thread, not replicated into
each worker (so it needs no sharding); ``pin_memory``, ``multiprocessing_context`` and
``persistent_workers`` are accepted and change nothing; ``timeout`` bounds the wait for a
batch (``RuntimeError`` after it, as torch's message says). An exception in a worker comes
back as torch's does: the same type, its message ``Caught KeyError in DataLoader worker
thread 0.`` followed by the worker's traceback as text.

>>> import threadgrad as tg
>>> from threadgrad.utils.data import DataLoader, TensorDataset
>>> ds = TensorDataset(tg.arange(10.0), tg.arange(10))
>>> [tuple(x.shape) for x, _ in DataLoader(ds, batch_size=4)]
[(4,), (4,), (2,)]
>>> tg.manual_seed(0); a = [y.tolist() for _, y in DataLoader(ds, batch_size=5, shuffle=True)]
>>> tg.manual_seed(0); b = [y.tolist() for _, y in DataLoader(ds, batch_size=5, shuffle=True)]
>>> a == b, sorted(a[0] + a[1]) == list(range(10))
(True, True)
"""
from __future__ import annotations

import collections
import concurrent.futures
import itertools
import queue
import sys
import threading
import traceback
from dataclasses import dataclass
from typing import Any, Callable, Iterator

from ._collate import default_collate, default_convert
from ._random import seed_from
from .dataset import IterableDataset
from .sampler import BatchSampler, RandomSampler, SequentialSampler

__all__ = ["DataLoader", "get_worker_info", "WorkerInfo"]


@dataclass(frozen=True)
class WorkerInfo:
    """What ``get_worker_info()`` gives inside a worker thread."""

    id: int
    num_workers: int
    seed: int
    dataset: Any


_worker = threading.local()  # per thread: the WorkerInfo of a DataLoader worker thread (set by its initializer)


def get_worker_info() -> WorkerInfo | None:
    """The calling worker thread's WorkerInfo, or None outside a DataLoader worker."""
    return getattr(_worker, "info", None)


class _KeyErrorMessage(str):
    """A KeyError's message that prints as it is (torch's KeyErrorMessage)."""

    def __repr__(self) -> str:
        return self


class _ExceptionWrapper:
    """An exception raised in a worker, carried to the loop as text, as torch's ExceptionWrapper.

    The worker's exception object is not passed on: its traceback holds the worker thread's
    frames (and through them the Thread), which would then live until a garbage collection
    found them, and run their Python weakref callbacks at an arbitrary moment on the main
    thread (where a pending KeyboardInterrupt fires and is lost)."""

    def __init__(self, where: str) -> None:
        exc_type, exc, tb = sys.exc_info()
        self.exc_type = exc_type
        self.exc_msg = "".join(traceback.format_exception(exc_type, exc, tb))
        self.where = where

    def reraise(self) -> None:
        msg = f"Caught {self.exc_type.__name__} {self.where}.\nOriginal {self.exc_msg}"
        if self.exc_type is KeyError:
            msg = _KeyErrorMessage(msg)
        try:
            exception = self.exc_type(msg)
        except Exception:  # noqa: BLE001 - an exception type that takes other arguments
            raise RuntimeError(msg) from None
        raise exception


class DataLoader:
    """``DataLoader(dataset, batch_size=1, shuffle=None, sampler=None, batch_sampler=None,
    num_workers=0, collate_fn=None, pin_memory=False, drop_last=False, timeout=0,
    worker_init_fn=None, multiprocessing_context=None, generator=None, *, prefetch_factor=None,
    persistent_workers=False, pin_memory_device='', in_order=True)``.

    Iterating it gives batches (``collate_fn`` of ``batch_size`` samples; default
    :func:`default_collate`). ``shuffle=True`` draws a new order each epoch from ``generator``
    or, without one, from the global generator (``tg.manual_seed`` makes it repeat).
    ``num_workers > 0`` prefetches batches on threads: See Note [DataLoader workers are threads]."""

    def __init__(self, dataset: Any, batch_size: int | None = 1, shuffle: bool | None = None,
                 sampler: Any = None, batch_sampler: Any = None, num_workers: int = 0,
                 collate_fn: Callable | None = None, pin_memory: bool = False, drop_last: bool = False,
                 timeout: float = 0, worker_init_fn: Callable | None = None, multiprocessing_context: Any = None,
                 generator: Any = None, *, prefetch_factor: int | None = None, persistent_workers: bool = False,
                 pin_memory_device: str = "", in_order: bool = True) -> None:
        if num_workers < 0:
            raise ValueError("num_workers option should be non-negative; use num_workers=0 to disable "
                             "multiprocessing.")
        if timeout < 0:
            raise ValueError("timeout option should be non-negative")
        if num_workers == 0 and prefetch_factor is not None:
            raise ValueError("prefetch_factor option could only be specified in multiprocessing.let num_workers > 0 "
                             "to enable multiprocessing, otherwise set prefetch_factor to None.")
        if num_workers > 0 and prefetch_factor is None:
            prefetch_factor = 2
        elif prefetch_factor is not None and prefetch_factor < 0:
            raise ValueError("prefetch_factor option should be non-negative")
        if persistent_workers and num_workers == 0:
            raise ValueError("persistent_workers option needs num_workers > 0")
        self.dataset = dataset
        self.num_workers = num_workers
        self.prefetch_factor = prefetch_factor
        self.pin_memory = pin_memory
        self.pin_memory_device = pin_memory_device
        self.timeout = timeout
        self.worker_init_fn = worker_init_fn
        self.multiprocessing_context = multiprocessing_context
        self.persistent_workers = persistent_workers
        self.in_order = in_order
        self.generator = generator
        self._iterable = isinstance(dataset, IterableDataset)
        if self._iterable:
            if shuffle not in (None, False):
                raise ValueError("DataLoader with IterableDataset: expected unspecified shuffle option, but got "
                                 f"shuffle={shuffle}")
            if sampler is not None:
                raise ValueError("DataLoader with IterableDataset: expected unspecified sampler option, but got "
                                 f"sampler={sampler}")
            if batch_sampler is not None:
                raise ValueError("DataLoader with IterableDataset: expected unspecified batch_sampler option, but "
                                 f"got batch_sampler={batch_sampler}")
        else:
            shuffle = bool(shuffle)
        if sampler is not None and shuffle:
            raise ValueError("sampler option is mutually exclusive with shuffle")
        if batch_sampler is not None:
            if batch_size != 1 or shuffle or sampler is not None or drop_last:
                raise ValueError("batch_sampler option is mutually exclusive with batch_size, shuffle, sampler, and "
                                 "drop_last")
            batch_size = None
            drop_last = False
        elif batch_size is None and drop_last:
            raise ValueError("batch_size=None option disables auto-batching and is mutually exclusive with drop_last")
        if sampler is None and not self._iterable:
            sampler = RandomSampler(dataset, generator=generator) if shuffle else SequentialSampler(dataset)
        if batch_size is not None and batch_sampler is None and not self._iterable:
            batch_sampler = BatchSampler(sampler, batch_size, drop_last)
        self.batch_size = batch_size
        self.drop_last = drop_last
        self.sampler = sampler
        self.batch_sampler = batch_sampler
        if collate_fn is None:
            collate_fn = default_collate if batch_size is not None or batch_sampler is not None else default_convert
        self.collate_fn = collate_fn

    @property
    def _auto_collation(self) -> bool:
        return self.batch_sampler is not None

    @property
    def _index_sampler(self) -> Any:
        return self.batch_sampler if self._auto_collation else self.sampler

    def __len__(self) -> int:
        if self._iterable:
            n = len(self.dataset)
            if self.batch_size is not None:
                n = n // self.batch_size if self.drop_last else -(-n // self.batch_size)
            return n
        return len(self._index_sampler)

    def __iter__(self) -> Iterator[Any]:
        # Every epoch draws the workers' base seed first, with or without workers (torch's
        # _BaseDataLoaderIter does too), so a seeded shuffle gives the same order either way.
        base_seed = seed_from(self.generator)
        batches = self._iterable_batches() if self._iterable else self._map_batches()
        if self.num_workers == 0:
            return batches
        if self._iterable:
            return self._prefetch_stream(batches, base_seed)
        return self._prefetch_map(base_seed)

    # -- without workers ----------------------------------------------------------------------
    def _fetch(self, index: Any) -> Any:
        if self._auto_collation:
            getitems = getattr(self.dataset, "__getitems__", None)
            data = getitems(index) if callable(getitems) else [self.dataset[i] for i in index]
            return self.collate_fn(data)
        return self.collate_fn(self.dataset[index])

    def _map_batches(self) -> Iterator[Any]:
        for index in self._index_sampler:
            yield self._fetch(index)

    def _iterable_batches(self) -> Iterator[Any]:
        it = iter(self.dataset)
        if self.batch_size is None:
            for sample in it:
                yield self.collate_fn(sample)
            return
        while True:
            batch = list(itertools.islice(it, self.batch_size))
            if not batch or (self.drop_last and len(batch) < self.batch_size):
                return
            yield self.collate_fn(batch)

    # -- with worker threads: See Note [DataLoader workers are threads] -----------------------
    def _pool(self, workers: int, base_seed: int) -> concurrent.futures.ThreadPoolExecutor:
        ids = itertools.count()
        init_fn = self.worker_init_fn

        def initializer() -> None:
            wid = next(ids)
            _worker.info = WorkerInfo(wid, self.num_workers, base_seed + wid, self.dataset)
            if init_fn is not None:
                init_fn(wid)

        return concurrent.futures.ThreadPoolExecutor(workers, thread_name_prefix="threadgrad-dataloader",
                                                     initializer=initializer)

    def _wait(self, future: concurrent.futures.Future) -> Any:
        try:
            return future.result(timeout=self.timeout or None)
        except concurrent.futures.TimeoutError:
            raise RuntimeError(f"DataLoader timed out after {self.timeout} seconds") from None

    def _fetch_in_worker(self, index: Any) -> Any:
        try:
            return self._fetch(index)
        except Exception:  # noqa: BLE001 - re-raised in the loop: See _ExceptionWrapper
            info = get_worker_info()
            return _ExceptionWrapper(f"in DataLoader worker thread {info.id if info else 0}")

    def _prefetch_map(self, base_seed: int) -> Iterator[Any]:
        pool = self._pool(self.num_workers, base_seed)
        window = max(1, self.num_workers * self.prefetch_factor)
        pending: collections.deque = collections.deque()
        indices = iter(self._index_sampler)
        try:
            for index in itertools.islice(indices, window):
                pending.append(pool.submit(self._fetch_in_worker, index))
            while pending:
                if not self.in_order:  # the first finished batch first, as torch's in_order=False
                    done, _ = concurrent.futures.wait(pending, timeout=self.timeout or None,
                                                      return_when=concurrent.futures.FIRST_COMPLETED)
                    if not done:
                        raise RuntimeError(f"DataLoader timed out after {self.timeout} seconds")
                    future = next(f for f in pending if f in done)
                    pending.remove(future)
                else:
                    future = pending.popleft()
                batch = self._wait(future)
                if isinstance(batch, _ExceptionWrapper):
                    batch.reraise()
                for index in itertools.islice(indices, 1):
                    pending.append(pool.submit(self._fetch_in_worker, index))
                yield batch
        finally:
            for f in pending:
                f.cancel()
            pool.shutdown(wait=True)
            # Drop the executor here, not at some later garbage collection: a traceback that
            # keeps this frame alive would otherwise free it (and run its and its threads' Python
            # weakref callbacks) at an arbitrary moment on the main thread, where a pending
            # KeyboardInterrupt would fire inside the callback and be swallowed.
            del pool

    def _prefetch_stream(self, batches: Iterator[Any], base_seed: int) -> Iterator[Any]:
        """One thread runs ``batches`` ahead of the consumer, into a bounded queue."""
        q: queue.Queue = queue.Queue(maxsize=max(1, self.num_workers * self.prefetch_factor))
        stop = threading.Event()
        end = object()
        pool = self._pool(1, base_seed)

        def produce() -> None:
            try:
                for batch in batches:
                    while not stop.is_set():
                        try:
                            q.put((batch, None), timeout=0.1)
                            break
                        except queue.Full:
                            continue
                    if stop.is_set():
                        return
                q.put((end, None))
            except BaseException:  # noqa: BLE001 - re-raised on the consumer's thread: See _ExceptionWrapper
                q.put((end, _ExceptionWrapper("in DataLoader worker thread 0")))

        pool.submit(produce)
        try:
            while True:
                try:
                    item, err = q.get(timeout=self.timeout or None)
                except queue.Empty:
                    raise RuntimeError(f"DataLoader timed out after {self.timeout} seconds") from None
                if item is end:
                    if err is not None:
                        err.reraise()
                    return
                yield item
        finally:
            stop.set()
            pool.shutdown(wait=True)
            del pool  # as in _prefetch_map: freed now, not at a later collection
