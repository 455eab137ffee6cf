"""Replay seeds: ``cd tests && python -m programs --seed 17 [--torch] [--sequential] [--print]``,
or ``--seeds 0:200`` to scan a range (prints each failing seed's differences)."""
from __future__ import annotations

import argparse
import sys

from . import check, dumps, generate


def main() -> int:
    ap = argparse.ArgumentParser(prog="python -m programs")
    ap.add_argument("--seed", type=int)
    ap.add_argument("--seeds", help="a range, START:STOP")
    ap.add_argument("--torch", action="store_true", help="also run torch and compare")
    ap.add_argument("--sequential", action="store_true", help="run the program's threads one after another")
    ap.add_argument("--print", action="store_true", help="print the program")
    args = ap.parse_args()
    seeds = [args.seed] if args.seeds is None else range(*map(int, args.seeds.split(":")))
    bad = 0
    for seed in seeds:
        if args.print:
            print(dumps(generate(seed)))
        diffs = check(seed, torch=args.torch, concurrent=not args.sequential)
        if diffs:
            bad += 1
            print(f"seed {seed}: {len(diffs)} differences")
            for d in diffs:
                print("   ", d[:600])
    print(f"{bad} failing of {len(seeds)}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
