"""tg.utils.data against torch.utils.data: datasets, splits, samplers, collation, DataLoader
batching and errors; shuffles repeat under tg.manual_seed and generator=; worker threads
prefetch and give the batches of a loader without workers."""
from __future__ import annotations

import threading
import time
from collections import namedtuple

import numpy as np
import pytest

import threadgrad as tg
from threadgrad.utils.data import (BatchSampler, ConcatDataset, DataLoader, Dataset, IterableDataset, RandomSampler,
                                   SequentialSampler, Subset, TensorDataset, default_collate, get_worker_info,
                                   random_split)


def _torch():
    return pytest.importorskip("torch")


def _plain(x):
    """A batch as plain Python (tensors of either library as lists and dtype names)."""
    if hasattr(x, "tolist") and hasattr(x, "shape"):
        return ("T", str(x.dtype).replace("torch.", ""), x.tolist())
    if isinstance(x, dict):
        return {k: _plain(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return type(x).__name__, [_plain(v) for v in x]
    return x


Point = namedtuple("Point", "x y")


def _samples():
    return [
        [(1.0, 2), (3.0, 4)],
        [{"a": np.float32(1.5), "b": np.arange(3)}, {"a": np.float32(2.5), "b": np.arange(3) + 1}],
        [["s", 1], ["t", 2]],
        [np.ones((2, 2)), np.zeros((2, 2))],
        [Point(1, 2.0), Point(3, 4.0)],
        [True, False],
    ]


@pytest.mark.parametrize("case", range(6))
def test_default_collate_matches_torch(case):
    torch = _torch()
    from torch.utils.data import default_collate as torch_collate

    batch = _samples()[case]
    ours, theirs = default_collate(batch), torch_collate(batch)
    assert _plain(ours) == _plain(theirs)


def test_collate_of_tensors_and_errors():
    torch = _torch()
    from torch.utils.data import default_collate as torch_collate

    assert default_collate([tg.ones(2), tg.zeros(2)]).tolist() == [[1.0, 1.0], [0.0, 0.0]]
    for collate in (default_collate, torch_collate):
        with pytest.raises(RuntimeError, match="each element in list of batch should be of equal size"):
            collate([[1, 2], [1]])
        with pytest.raises(TypeError, match="default_collate: batch must contain tensors, numpy arrays, numbers, "
                                            "dicts or lists; found <class 'object'>"):
            collate([object()])


def test_datasets_subset_concat_split():
    torch = _torch()
    ds = TensorDataset(tg.arange(10), tg.arange(10) * 10)
    assert len(ds) == 10 and [t.item() for t in ds[4]] == [4, 40]
    with pytest.raises(AssertionError, match="Size mismatch between tensors"):
        TensorDataset(tg.ones(3), tg.ones(4))
    sub = Subset(ds, [7, 2])
    assert len(sub) == 2 and sub[0][1].item() == 70
    cat = ds + sub
    assert isinstance(cat, ConcatDataset) and len(cat) == 12 and cat[11][0].item() == 2 and cat[-1][0].item() == 2
    parts = random_split(ds, [0.5, 0.3, 0.2], generator=tg.Generator().manual_seed(1))
    t_parts = torch.utils.data.random_split(range(10), [0.5, 0.3, 0.2], generator=torch.Generator().manual_seed(1))
    assert [len(p) for p in parts] == [len(p) for p in t_parts] == [5, 3, 2]
    assert sorted(i for p in parts for i in p.indices) == list(range(10))
    assert [len(p) for p in random_split(range(7), [0.4, 0.6])] == \
        [len(p) for p in torch.utils.data.random_split(range(7), [0.4, 0.6])]
    again = random_split(ds, [0.5, 0.3, 0.2], generator=tg.Generator().manual_seed(1))
    assert [p.indices for p in again] == [p.indices for p in parts]
    for split in (random_split, torch.utils.data.random_split):
        with pytest.raises(ValueError, match="Sum of input lengths does not equal the length of the input dataset"):
            split(range(5), [2, 2])


def test_batch_sampler_and_samplers_match_torch():
    torch = _torch()
    for drop_last in (False, True):
        ours = BatchSampler(SequentialSampler(range(10)), 3, drop_last)
        theirs = torch.utils.data.BatchSampler(torch.utils.data.SequentialSampler(range(10)), 3, drop_last)
        assert list(ours) == list(theirs) and len(ours) == len(theirs)
    for lib_bs in (BatchSampler, torch.utils.data.BatchSampler):
        with pytest.raises(ValueError, match="batch_size should be a positive integer value, but got batch_size=0"):
            lib_bs(range(3), 0, False)
    tg.manual_seed(4)
    one = list(RandomSampler(range(20)))
    tg.manual_seed(4)
    assert list(RandomSampler(range(20))) == one and sorted(one) == list(range(20))
    with_replacement = list(RandomSampler(range(5), replacement=True, num_samples=50))
    assert len(with_replacement) == 50 and set(with_replacement) <= set(range(5))
    assert len(list(RandomSampler(range(5), num_samples=12))) == 12


@pytest.mark.parametrize("kw", [dict(batch_size=4), dict(batch_size=4, drop_last=True), dict(batch_size=None),
                                dict(batch_size=3, collate_fn=lambda b: len(b))])
def test_dataloader_batches_match_torch(kw):
    torch = _torch()
    x = np.arange(22, dtype=np.float32).reshape(11, 2)
    y = np.arange(11)
    ours = DataLoader(TensorDataset(tg.tensor(x), tg.tensor(y)), **kw)
    theirs = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(torch.tensor(x), torch.tensor(y)), **kw)
    assert len(ours) == len(theirs)
    assert [_plain(b) for b in ours] == [_plain(b) for b in theirs]


def test_shuffle_repeats_under_seed_and_generator_and_differs_per_epoch():
    ds = TensorDataset(tg.arange(30))
    tg.manual_seed(0)
    loader = DataLoader(ds, batch_size=7, shuffle=True)
    epoch1 = [b[0].tolist() for b in loader]
    epoch2 = [b[0].tolist() for b in loader]
    tg.manual_seed(0)
    assert [b[0].tolist() for b in loader] == epoch1
    assert epoch1 != epoch2 and sorted(sum(epoch1, [])) == list(range(30))
    g = [b[0].tolist() for b in DataLoader(ds, batch_size=7, shuffle=True, generator=tg.Generator().manual_seed(3))]
    h = [b[0].tolist() for b in DataLoader(ds, batch_size=7, shuffle=True, generator=tg.Generator().manual_seed(3))]
    assert g == h


def test_dataloader_argument_errors_match_torch():
    torch = _torch()

    class Stream(IterableDataset):
        def __iter__(self):
            return iter(range(5))

    class TStream(torch.utils.data.IterableDataset):
        def __iter__(self):
            return iter(range(5))

    cases = [(dict(num_workers=-1), None), (dict(timeout=-1), None), (dict(prefetch_factor=2), None),
             (dict(persistent_workers=True), None), (dict(sampler=[0, 1], shuffle=True), None),
             (dict(batch_sampler=[[0]], batch_size=2), None), (dict(batch_size=None, drop_last=True), None),
             (dict(shuffle=True), "stream")]
    for kw, kind in cases:
        msgs = []
        for lib_loader, data in ((DataLoader, Stream() if kind else range(4)),
                                 (torch.utils.data.DataLoader, TStream() if kind else range(4))):
            with pytest.raises(ValueError) as err:
                lib_loader(data, **kw)
            msgs.append(str(err.value).split(", but got")[0])
        assert msgs[0] == msgs[1], kw


@pytest.mark.timeout(60)
def test_iterable_dataset_and_sampler_argument():
    class Stream(IterableDataset):
        def __iter__(self):
            return iter([{"v": i} for i in range(7)])

    assert [b["v"].tolist() for b in DataLoader(Stream(), batch_size=3)] == [[0, 1, 2], [3, 4, 5], [6]]
    assert [b["v"].tolist() for b in DataLoader(Stream(), batch_size=3, drop_last=True, num_workers=2)] == \
        [[0, 1, 2], [3, 4, 5]]
    assert [b.tolist() for b in DataLoader(range(6), batch_size=2, sampler=[5, 4, 3, 2, 1, 0])] == \
        [[5, 4], [3, 2], [1, 0]]


class SlowSquares(Dataset):
    """Each item takes a while and records which thread fetched it."""

    def __init__(self, n):
        self.n = n
        self.threads = set()
        self.lock = threading.Lock()

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        time.sleep(0.002)
        with self.lock:
            self.threads.add(threading.get_ident())
        info = get_worker_info()
        return np.float64(i * i), (info.id if info is not None else -1)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("in_order", [True, False])
def test_worker_threads_give_the_same_batches(in_order):
    ds = SlowSquares(40)
    inits = []
    tg.manual_seed(7)
    plain = [b[0].tolist() for b in DataLoader(ds, batch_size=4, shuffle=True)]
    ds = SlowSquares(40)  # a fresh one: only the worker run's fetching threads
    tg.manual_seed(7)
    loader = DataLoader(ds, batch_size=4, shuffle=True, num_workers=3, in_order=in_order,
                        worker_init_fn=inits.append, prefetch_factor=2)
    batches = list(loader)
    got = [b[0].tolist() for b in batches]
    if in_order:
        assert got == plain
    else:
        assert sorted(map(tuple, got)) == sorted(map(tuple, plain))
    assert {w for b in batches for w in b[1].tolist()} <= {0, 1, 2} and sorted(inits) == list(range(len(inits)))
    assert threading.get_ident() not in ds.threads  # fetched on worker threads
    assert get_worker_info() is None


@pytest.mark.timeout(60)
def test_worker_errors_surface_and_early_break_stops_workers():
    class Bad(Dataset):
        def __len__(self):
            return 10

        def __getitem__(self, i):
            if i == 5:
                raise KeyError("bad sample")
            return i

    with pytest.raises(KeyError, match="Caught KeyError in DataLoader worker thread [01].\nOriginal Traceback"
                                       "(.|\n)*KeyError: 'bad sample'"):
        list(DataLoader(Bad(), batch_size=2, num_workers=2))

    class BadStream(IterableDataset):
        def __iter__(self):
            yield 1
            raise ValueError("stream broke")

    with pytest.raises(ValueError, match="Caught ValueError in DataLoader worker thread 0"):
        list(DataLoader(BadStream(), batch_size=1, num_workers=1))
    before = threading.active_count()
    for _ in DataLoader(SlowSquares(100), batch_size=2, num_workers=4):
        break
    deadline = time.time() + 10
    while threading.active_count() > before and time.time() < deadline:
        time.sleep(0.01)
    assert threading.active_count() <= before
