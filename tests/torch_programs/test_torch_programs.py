"""The ports in examples/torch_programs (issue 32, item 7), each a public torch program with
its import line changed, run twice: with threadgrad standing in for torch (a module alias
that adds no names), and, where torch is installed, torch on the same program, threadgrad
replaying torch's random draws and initial weights (program_standin.py); the loss of every
step must agree to float32 rounding. Loops are shortened by rewriting one literal (the
``replace`` column) so that each run takes about a second."""
from __future__ import annotations

import math

import numpy as np
import pytest
from program_standin import Tape, run_program

import threadgrad as tg

# name, literal rewrites that shorten the run, argv, steps expected (0: it has no backward),
# rtol of the whole trajectory against torch (the first 20 steps: 1e-6 where rtol <= 1e-5)
PROGRAMS = [
    ("regression", (("if loss < 1e-3:", "if loss < 1e-3 or batch_idx == 150:"),), (), 150, 2e-5),
    ("vae", (), ("--epochs", "1", "--log-interval", "100", "--batch-size", "256"), 6, 1e-5),
    ("lpwe_tensor", (("range(2000)", "range(300)"),), (), 0, 1e-5),
    ("lpwe_autograd", (("range(2000)", "range(300)"),), (), 300, 1e-5),
    ("lpwe_custom_function", (("range(2000)", "range(300)"),), (), 300, 1e-5),
    ("lpwe_nn", (("range(2000)", "range(300)"),), (), 300, 1e-5),
    ("lpwe_optim", (("range(2000)", "range(300)"),), (), 300, 1e-5),
    ("lpwe_module", (("range(2000)", "range(300)"),), (), 300, 1e-5),
    # float32 sums of 2000 terms up to x^5 (losses up to 3e7) under momentum: the two libraries'
    # summation orders differ by 3e-7 at the first step, 5e-6 by the tenth, 3e-5 by the 300th
    ("lpwe_dynamic_net", (("range(30000)", "range(300)"),), (), 300, 5e-5),
]
# the char GPT's hyperparameters, made CPU-test-sized (its model code is untouched); dropout
# draws masks from each library's own generator, so it is off where runs are compared
GPT_SMALL = (("batch_size = 64", "batch_size = 4"), ("block_size = 256", "block_size = 16"),
             ("max_iters = 5000", "max_iters = 30"), ("eval_interval = 500", "eval_interval = 10"),
             ("eval_iters = 200", "eval_iters = 2"), ("n_embd = 384", "n_embd = 32"), ("n_head = 6", "n_head = 4"),
             ("n_layer = 6", "n_layer = 2"), ("learning_rate = 3e-4", "learning_rate = 1e-2"),
             ("dropout = 0.2", "dropout = 0.0"), ("max_new_tokens=500", "max_new_tokens=20"))
PROGRAMS.append(("char_gpt", GPT_SMALL, (), 30, 1e-5))
# two layers, each trained for --epochs steps with its own Adam
PROGRAMS.append(("mnist_forward_forward", (), ("--epochs", "10", "--train_size", "100", "--test_size", "50",
                                               "--log-interval", "5"), 20, 1e-5))
NANOGPT_SMALL = (("batch_size = 64", "batch_size = 4"), ("block_size = 256", "block_size = 16"),
                 ("max_iters = 5000", "max_iters = 19"), ("lr_decay_iters = 5000", "lr_decay_iters = 20"),
                 ("warmup_iters = 100", "warmup_iters = 5"), ("eval_interval = 250", "eval_interval = 10"),
                 ("eval_iters = 200", "eval_iters = 2"), ("n_embd = 384", "n_embd = 32"), ("n_head = 6", "n_head = 4"),
                 ("n_layer = 6", "n_layer = 2"), ("dropout = 0.2", "dropout = 0.0"),
                 ("max_new_tokens = 500", "max_new_tokens = 20"), ("learning_rate = 1e-3 #", "learning_rate = 1e-2 #"))
PROGRAMS.append(("nanogpt_train_char", NANOGPT_SMALL, (), 20, 1e-5))
# pytorch/examples' MNIST CNN on 96 training images in batches of 16 (6 steps); its dropout draws
# masks from each library's own generator, so it is off where runs are compared
PROGRAMS.append(("mnist_cnn", (("slice(0, 1500)", "slice(0, 96)"), ("nn.Dropout(0.25)", "nn.Dropout(0.0)"),
                               ("nn.Dropout(0.5)", "nn.Dropout(0.0)")),
                 ("--epochs", "1", "--batch-size", "16", "--log-interval", "2"), 6, 1e-5))
# pytorch/examples' time sequence prediction: 12 sine waves of 40 points, one LBFGS step (its
# closure runs up to 20 times), 10 values predicted past the end
PROGRAMS.append(("time_sequence_prediction", (("L = 1000", "L = 40"), ("N = 100", "N = 12"),
                                              ("future = 1000", "future = 10")), ("--steps", "1"), 20, 1e-6))
# pytorch/examples' DCGAN, made CPU-test-sized by its own flags: 6 batches of 8 digits at 64x64,
# latent size and feature maps 8; three backward calls a batch (D on real, D on fake, G)
PROGRAMS.append(("dcgan", (), ("--batchSize", "8", "--nz", "8", "--ngf", "8", "--ndf", "8", "--images", "48",
                               "--niter", "1", "--manualSeed", "1"), 18, 1e-5))
IDS = [p[0] for p in PROGRAMS]
# A GAN's two losses pull against each other: what must fall is the discriminator's loss on real
# images, every third backward call
LEARNING_SERIES = {"dcgan": slice(0, None, 3)}
SIBLINGS = {"nanogpt_train_char": ("nanogpt_model",)}  # modules a program imports from its folder
NEEDS_SKLEARN = {"vae", "mnist_forward_forward", "mnist_cnn", "dcgan"}
NEEDS_MATPLOTLIB = {"time_sequence_prediction"}  # it plots each step (the examples extra)  # their data is scikit-learn's digits (the examples extra)


def _printed_losses(stdout: str) -> list:
    """The ``print(t, loss)`` lines of the tutorials' loops."""
    rows = [line.split() for line in stdout.splitlines()]
    return [float(r[1]) for r in rows if len(r) == 2 and r[0].isdigit()]


@pytest.fixture(autouse=True)
def _in_tmp(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # the VAE writes results/*.png


@pytest.mark.parametrize("name,replace,argv,steps,rtol", PROGRAMS, ids=IDS)
def test_runs_on_threadgrad_and_learns(name, replace, argv, steps, rtol):
    """Plain threadgrad, its own random numbers: the program runs to its end, takes the
    expected number of steps, and the loss falls."""
    if name in NEEDS_SKLEARN:
        pytest.importorskip("sklearn")
    if name in NEEDS_MATPLOTLIB:
        pytest.importorskip("matplotlib")
    run = run_program(name, tg, None, None, replace, argv, SIBLINGS.get(name, ()))
    losses = run.losses or _printed_losses(run.stdout)
    if steps:
        assert len(run.losses) == steps
    assert all(math.isfinite(v) for v in losses)
    losses = losses[LEARNING_SERIES.get(name, slice(None))]
    k = max(1, len(losses) // 10)
    assert np.mean(losses[-k:]) < 0.9 * np.mean(losses[:k])


@pytest.mark.parametrize("name,replace,argv,steps,rtol", PROGRAMS, ids=IDS)
def test_computes_what_torch_computes(name, replace, argv, steps, rtol):
    """torch runs the program and records its draws; threadgrad replays them: every step's
    loss (or, for the hand-written-gradient tutorial, every printed loss) and every printed
    number agree to float32 rounding, and threadgrad draws exactly what torch drew."""
    torch = pytest.importorskip("torch")
    if name in NEEDS_SKLEARN:
        pytest.importorskip("sklearn")
    if name in NEEDS_MATPLOTLIB:
        pytest.importorskip("matplotlib")
    torch.manual_seed(0)
    tape = Tape()
    expected = run_program(name, torch, "record", tape, replace, argv, SIBLINGS.get(name, ()))
    got = run_program(name, tg, "replay", tape, replace, argv, SIBLINGS.get(name, ()))
    assert tape.position == len(tape.items), "threadgrad drew fewer random numbers than torch"
    if steps:
        assert len(got.losses) == len(expected.losses) == steps
        np.testing.assert_allclose(got.losses[:20], expected.losses[:20], rtol=min(rtol, 1e-6) if rtol <= 1e-5 else rtol)
        np.testing.assert_allclose(got.losses, expected.losses, rtol=rtol)
    printed_expected, printed_got = _printed_losses(expected.stdout), _printed_losses(got.stdout)
    assert len(printed_got) == len(printed_expected)
    np.testing.assert_allclose(printed_got, printed_expected, rtol=rtol)
    if not steps:
        assert printed_got, "the run printed no losses"
