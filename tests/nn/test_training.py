"""A whole training loop written once and run on both libraries (the module alias adds no
names): Embedding, Linear, GELU, LayerNorm, CrossEntropyLoss, AdamW with two param groups,
clip_grad_norm_, a OneCycleLR schedule and a DataLoader; torch's initial weights copied
in, float64, so every loss and the final state_dict must agree."""
from __future__ import annotations

import numpy as np
import pytest

import threadgrad


def _model(torch):
    nn = torch.nn
    from collections import OrderedDict

    class CharModel(nn.Module):
        def __init__(self, vocab=11, dim=8, hidden=16):
            super().__init__()
            self.emb = nn.Embedding(vocab, dim, padding_idx=0)
            self.mlp = nn.Sequential(OrderedDict(fc=nn.Linear(2 * dim, hidden), act=nn.GELU(),
                                                 norm=nn.LayerNorm(hidden), drop=nn.Dropout(0.0)))
            self.head = nn.Linear(hidden, vocab)

        def forward(self, idx):
            x = self.emb(idx).reshape(idx.shape[0], -1)
            return self.head(self.mlp(x))

    return CharModel().double()


def _train(torch, model, steps=20):
    nn = torch.nn
    rng = np.random.default_rng(0)
    tokens = rng.integers(1, 11, size=(96, 3))
    tokens[:, 2] = (tokens[:, 0] + tokens[:, 1]) % 11  # a rule to learn, so the loss falls
    data = torch.utils.data.TensorDataset(torch.tensor(tokens[:, :2]), torch.tensor(tokens[:, 2]))
    loader = torch.utils.data.DataLoader(data, batch_size=16, drop_last=True)
    decay = [p for n, p in model.named_parameters() if n.endswith("weight") and "norm" not in n and "emb" not in n]
    no_decay = [p for n, p in model.named_parameters() if not (n.endswith("weight") and "norm" not in n
                                                                and "emb" not in n)]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}],
                            lr=3e-3, betas=(0.9, 0.95))
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=1e-2, total_steps=steps)
    loss_fn = nn.CrossEntropyLoss()
    losses, norms = [], []
    step = 0
    while step < steps:
        for xb, yb in loader:
            if step == steps:
                break
            opt.zero_grad(set_to_none=True)
            loss = loss_fn(model(xb), yb)
            loss.backward()
            norms.append(float(nn.utils.clip_grad_norm_(model.parameters(), 0.5)))
            opt.step()
            sched.step()
            losses.append(loss.item())
            step += 1
    return model, losses, norms


def test_training_loop_matches_torch():
    torch = pytest.importorskip("torch")
    torch.manual_seed(0)  # torch's initial weights, which both runs start from
    t_model = _model(torch)
    ours = _model(threadgrad)
    ours.load_state_dict({k: threadgrad.tensor(v.numpy()) for k, v in t_model.state_dict().items()})
    t_model, t_losses, t_norms = _train(torch, t_model)
    ours, o_losses, o_norms = _train(threadgrad, ours)
    np.testing.assert_allclose(o_losses, t_losses, rtol=1e-10)
    np.testing.assert_allclose(o_norms, t_norms, rtol=1e-10)
    t_sd = t_model.state_dict()
    o_sd = ours.state_dict()
    assert list(o_sd) == list(t_sd)
    for k in t_sd:
        np.testing.assert_allclose(o_sd[k].numpy(), t_sd[k].numpy(), rtol=1e-9, atol=1e-12, err_msg=k)
    assert o_losses[-1] < o_losses[0]
