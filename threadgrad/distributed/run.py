"""``python -m threadgrad.distributed.run -n N train.py [args...]``: start N processes of
``train.py`` on this machine with the ``mpiexec`` of the installed MPI (the one the extra
``threadgrad[distributed]`` brings, next to this Python, else the first on PATH).

A thin wrapper: the same as ``mpiexec -n N python train.py args...``. Options of mpiexec
itself (a host file for several machines: ``-f hosts``) go after ``--mpiexec-args``, as one
string. Multi-node jobs under Slurm use ``srun`` directly (docs/distributed.md).
"""
from __future__ import annotations

import argparse
import os
import shlex
import shutil
import subprocess
import sys


def find_mpiexec() -> str:
    """The mpiexec next to this interpreter (a virtual environment's, from the mpich wheel),
    else the first on PATH; RuntimeError when there is none."""
    here = os.path.join(os.path.dirname(sys.executable), "mpiexec")
    if os.path.isfile(here) and os.access(here, os.X_OK):
        return here
    found = shutil.which("mpiexec")
    if found is None:
        raise RuntimeError("no mpiexec found: pip install 'threadgrad[distributed]' (it brings MPICH's mpiexec), "
                           "or put your MPI's mpiexec on PATH")
    return found


def command(n: int, script: str, args: list[str], mpiexec_args: str = "") -> list[str]:
    """The command line that runs ``script`` on ``n`` processes."""
    return [find_mpiexec(), "-n", str(n), *shlex.split(mpiexec_args), sys.executable, script, *args]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m threadgrad.distributed.run",
                                     description="Run a training script on N processes with mpiexec.")
    parser.add_argument("-n", "--nproc", type=int, required=True, help="number of processes")
    parser.add_argument("--mpiexec-args", default="", help="more options for mpiexec, as one string")
    parser.add_argument("script")
    parser.add_argument("args", nargs=argparse.REMAINDER)
    ns = parser.parse_args(argv)
    if ns.nproc < 1:
        parser.error(f"-n must be at least 1, got {ns.nproc}")
    return subprocess.call(command(ns.nproc, ns.script, ns.args, ns.mpiexec_args))


if __name__ == "__main__":
    sys.exit(main())
