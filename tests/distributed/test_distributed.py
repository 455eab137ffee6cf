"""threadgrad.distributed under real MPI: each test launches ``mpiexec -n 2`` (one ``-n 4``)
on tests/distributed/mp_cases.py, over loopback, with a timeout on the test, on the
subprocess and on the job (MPIEXEC_TIMEOUT). Skipped without the extra
``threadgrad[distributed]`` (mpi4py and an mpiexec); .ci/run installs it."""
from __future__ import annotations

import os
import pathlib
import re
import subprocess
import sys
import time

import pytest

pytest.importorskip("mpi4py")
from threadgrad import distributed as dist  # noqa: E402
from threadgrad.distributed import run as launcher  # noqa: E402

try:
    MPIEXEC = launcher.find_mpiexec()
except RuntimeError:
    pytest.skip("no mpiexec", allow_module_level=True)

CASES = pathlib.Path(__file__).resolve().parent / "mp_cases.py"


def _env(timeout: float, job_timeout: int) -> dict:
    return dict(os.environ, TG_DIST_TIMEOUT=str(timeout), MPIEXEC_TIMEOUT=str(job_timeout))


def _launch(case: str, n: int = 2, timeout: float = 60, job_timeout: int = 100) -> subprocess.CompletedProcess:
    # loopback only: every rank on this host (-hosts localhost)
    return subprocess.run([MPIEXEC, "-n", str(n), "-hosts", "localhost", sys.executable, str(CASES), case],
                          capture_output=True, text=True, env=_env(timeout, job_timeout), timeout=job_timeout + 20)


def _ok(case: str, n: int = 2, **kw) -> None:
    out = _launch(case, n, **kw)
    assert out.returncode == 0, out.stdout + out.stderr
    # (the ranks' lines may interleave in mpiexec's output)
    assert sorted(re.findall(r"ok \S+ \d+", out.stdout)) == [f"ok {case} {r}" for r in range(n)], out.stdout


@pytest.mark.timeout(150)
def test_collectives():
    _ok("collectives")


@pytest.mark.timeout(150)
def test_ddp_gradients_equal_the_full_batch_gradients():
    _ok("ddp_matches_full_batch")


@pytest.mark.timeout(300)
def test_ddp_on_four_processes():
    # 4 ranks on a 2-core machine: MPICH busy-polls while it waits, so allow for oversubscription
    _ok("ddp_matches_full_batch", n=4, timeout=200, job_timeout=250)


@pytest.mark.timeout(150)
def test_hooks_in_shuffled_orders_from_several_threads_launch_buckets_in_one_order():
    _ok("ddp_threads_shuffled")


@pytest.mark.timeout(150)
def test_ddp_parameters_on_several_devices_over_steps():
    _ok("ddp_mixed_devices_steps")


@pytest.mark.timeout(150)
def test_unused_parameters():
    _ok("ddp_unused")


@pytest.mark.timeout(150)
def test_no_sync_accumulates_locally_then_synchronizes():
    _ok("ddp_no_sync")


@pytest.mark.timeout(150)
def test_unused_parameters_count_the_no_sync_micro_batches():
    _ok("ddp_unused_no_sync")


@pytest.mark.timeout(150)
def test_an_exception_escaping_a_thread_ends_every_rank():
    start = time.monotonic()
    out = _launch("ddp_raise_in_thread", timeout=60)
    assert out.returncode != 0
    assert time.monotonic() - start < 60  # at once, not at the timeout
    assert "rank 1 fails in a thread's backward [raised in BoomBackward during backward]" in out.stderr, out.stderr
    assert "rank 1 of 2: uncaught ValueError in thread trainer; aborting the job" in out.stderr, out.stderr
    assert "ok " not in out.stdout


@pytest.mark.timeout(300)
def test_dropped_or_closed_ddps_release_their_communicators_and_threads():
    _ok("ddp_release", timeout=200, job_timeout=250)


@pytest.mark.timeout(300)
def test_ddp_memory_stays_flat_over_many_steps():
    _ok("ddp_memory_flat", timeout=200, job_timeout=250)


@pytest.mark.timeout(150)
def test_a_child_forked_while_ddp_locks_are_held_finds_them_free():
    _ok("ddp_fork")


@pytest.mark.timeout(150)
def test_a_concurrent_second_backward_raises():
    _ok("ddp_concurrent_backward")


@pytest.mark.timeout(150)
def test_ddp_with_activation_checkpointing():
    _ok("ddp_checkpoint")


@pytest.mark.timeout(150)
def test_ddp_refuses_parameters_that_differ_between_ranks():
    _ok("ddp_refuses_different_parameters")


@pytest.mark.timeout(150)
def test_cuda_tensors_go_through_host_copies_on_the_standin():
    _ok("cuda_standin")


@pytest.mark.timeout(150)
def test_a_rank_that_raises_mid_backward_ends_every_rank():
    start = time.monotonic()
    out = _launch("raise_mid_backward", timeout=60)
    assert out.returncode != 0
    assert time.monotonic() - start < 60  # the uncaught error aborts at once, not at the timeout
    assert "rank 1 fails in backward [raised in BoomBackward during backward]" in out.stderr
    assert "rank 1 of 2: uncaught ValueError; aborting the job" in out.stderr
    assert "ok " not in out.stdout


@pytest.mark.timeout(150)
def test_a_stalled_rank_makes_the_watchdog_abort_naming_rank_and_bucket():
    start = time.monotonic()
    out = _launch("stall", timeout=3)
    assert out.returncode != 0
    assert time.monotonic() - start < 60
    assert ("threadgrad.distributed: rank 0 of 2: DDP bucket 0 of 3 (float64, cpu, 0.000408 MB, params [3, 2]) "
            "did not complete within the timeout of 3 s") in out.stderr, out.stderr


@pytest.mark.timeout(150)
def test_a_rank_that_dies_ends_the_job():
    start = time.monotonic()
    out = _launch("die", timeout=60)
    assert out.returncode != 0
    assert time.monotonic() - start < 60


@pytest.mark.timeout(150)
def test_the_launcher_runs_a_script_on_n_processes():
    out = subprocess.run([sys.executable, "-m", "threadgrad.distributed.run", "-n", "2", str(CASES), "collectives"],
                         capture_output=True, text=True, env=_env(60, 100), timeout=120)
    assert out.returncode == 0, out.stderr
    assert sorted(re.findall(r"ok \S+ \d+", out.stdout)) == ["ok collectives 0", "ok collectives 1"], out.stdout


def test_errors_before_init_process_group():
    with pytest.raises(ValueError, match="Default process group has not been initialized"):
        dist.get_rank()
    with pytest.raises(ValueError, match="unknown backend 'gloo'"):
        dist.init_process_group("gloo")
    with pytest.raises(RuntimeError, match="the 'nccl' backend is not available"):
        dist.init_process_group("nccl")
    assert not dist.is_initialized()


@pytest.mark.timeout(200)
def test_ddp_digits_example_on_two_processes_matches_one_process():
    pytest.importorskip("sklearn")
    example = pathlib.Path(__file__).resolve().parent.parent.parent / "examples" / "ddp_digits.py"

    def final_accuracy(cmd: list[str]) -> float:
        out = subprocess.run(cmd + [str(example), "--epochs", "3"], capture_output=True, text=True,
                             env=_env(60, 150), timeout=170)
        assert out.returncode == 0, out.stderr
        (line,) = re.findall(r"final test accuracy ([0-9.]+)", out.stdout)
        return float(line)

    one = final_accuracy([sys.executable])
    two = final_accuracy([MPIEXEC, "-n", "2", "-hosts", "localhost", sys.executable])
    assert one >= 0.9
    # the same steps up to float rounding: at most one of the 359 test images may flip
    assert abs(two - one) <= 1 / 359 + 1e-9, (one, two)
