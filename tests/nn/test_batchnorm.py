"""nn.BatchNorm1d / BatchNorm2d and F.batch_norm against torch 2.13's from the same weights
(float64): outputs, input and parameter gradients, and the running statistics after each of
three steps, in training and eval, with momentum=None (a cumulative average), without affine
parameters or bias, without running statistics; torch's reprs, state_dict keys and errors.
Skipped without torch."""
from __future__ import annotations

import numpy as np
import pytest

import threadgrad as tg

torch = pytest.importorskip("torch")

CASES = {
    "2d": (lambda lib: lib.nn.BatchNorm2d(3), (4, 3, 5, 5), True),
    "2d eval": (lambda lib: lib.nn.BatchNorm2d(3), (4, 3, 5, 5), False),
    "1d cumulative": (lambda lib: lib.nn.BatchNorm1d(3, momentum=None), (6, 3), True),
    "1d (N, C, L), no affine": (lambda lib: lib.nn.BatchNorm1d(3, affine=False), (6, 3, 4), True),
    "1d no running stats": (lambda lib: lib.nn.BatchNorm1d(3, track_running_stats=False), (6, 3, 4), True),
    "1d no running stats, eval": (lambda lib: lib.nn.BatchNorm1d(3, track_running_stats=False), (6, 3, 4), False),
    "1d no bias": (lambda lib: lib.nn.BatchNorm1d(3, bias=False), (6, 3), True),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_batchnorm_matches_torch_over_three_steps(name):
    make, shape, train = CASES[name]
    torch.manual_seed(0)
    theirs, ours = make(torch).double(), make(tg).double()
    assert repr(ours) == repr(theirs) and list(ours.state_dict()) == list(theirs.state_dict())
    ours.load_state_dict({k: tg.tensor(v.numpy()) for k, v in theirs.state_dict().items()})
    ours.train(train)
    theirs.train(train)
    rng = np.random.default_rng(0)
    for _ in range(3):
        x0 = rng.standard_normal(shape) * 2 + 1
        got = []
        for lib, m in ((torch, theirs), (tg, ours)):
            x = lib.tensor(x0, requires_grad=True)
            y = m(x)
            (y * lib.tensor(np.arange(y.numel()).reshape(tuple(y.shape)) / 5.0)).sum().backward()
            got.append([y.detach().numpy(), x.grad.numpy()] + [p.grad.numpy() for p in m.parameters()]
                       + [b.numpy() for b in m.buffers()])
            for p in m.parameters():
                p.grad = None
        for want, mine in zip(*got):
            np.testing.assert_allclose(mine, want, rtol=1e-10, atol=1e-12)


def test_batchnorm_errors_in_torchs_words():
    with pytest.raises(ValueError, match=r"expected 4D input \(got 3D input\)"):
        tg.nn.BatchNorm2d(3)(tg.randn(2, 3, 4))
    with pytest.raises(ValueError, match=r"expected 2D or 3D input \(got 4D input\)"):
        tg.nn.BatchNorm1d(3)(tg.randn(2, 3, 4, 4))
    with pytest.raises(ValueError, match=r"Expected more than 1 value per channel when training, got input size "
                                         r"torch.Size\(\[1, 3\]\)"):
        tg.nn.BatchNorm1d(3)(tg.randn(1, 3))
