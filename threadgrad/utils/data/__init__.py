"""``tg.utils.data``: datasets, samplers and the DataLoader, as ``torch.utils.data``
(docs/nn.md has the guide; Note [DataLoader workers are threads] what ``num_workers`` does).

>>> import threadgrad as tg
>>> from threadgrad.utils.data import DataLoader, TensorDataset
>>> loader = DataLoader(TensorDataset(tg.ones(6, 2), tg.zeros(6)), batch_size=4, drop_last=True)
>>> len(loader), [x.shape for x, y in loader]
(1, [(4, 2)])
"""
from __future__ import annotations

from ._collate import default_collate, default_convert
from .dataloader import DataLoader, WorkerInfo, get_worker_info
from .dataset import ChainDataset, ConcatDataset, Dataset, IterableDataset, Subset, TensorDataset, random_split
from .sampler import BatchSampler, RandomSampler, Sampler, SequentialSampler, SubsetRandomSampler

__all__ = ["Dataset", "IterableDataset", "TensorDataset", "ConcatDataset", "ChainDataset", "Subset", "random_split",
           "DataLoader", "get_worker_info", "WorkerInfo", "default_collate", "default_convert", "Sampler",
           "SequentialSampler", "RandomSampler", "SubsetRandomSampler", "BatchSampler"]
