"""Replay seeds: ``cd tests && python -m programs --seed 17 [--torch] [--sequential] [--print]
[--inplace | --extended]``, or ``--seeds 0:200`` to scan a range (prints each failing seed's differences);
``--record PATH`` writes torch's outcomes instead (tests/stress/torch_inplace_outcomes.json)."""
from __future__ import annotations

import argparse
import json
import sys

from . import TorchBackend, check, dumps, generate, outcome_to_json, run


def main() -> int:
    ap = argparse.ArgumentParser(prog="python -m programs")
    ap.add_argument("--seed", type=int)
    ap.add_argument("--seeds", help="a range, START:STOP")
    ap.add_argument("--torch", action="store_true", help="also run torch and compare")
    ap.add_argument("--sequential", action="store_true", help="run the program's threads one after another")
    ap.add_argument("--print", action="store_true", help="print the program")
    ap.add_argument("--inplace", action="store_true", help="programs with in-place writes through views")
    ap.add_argument("--extended", action="store_true",
                    help="issue 33's programs (dirty views, hooks on CopySlices and composite ops), against torch")
    ap.add_argument("--record", metavar="PATH", help="write torch's outcome of each seed to PATH (JSON)")
    args = ap.parse_args()
    seeds = [args.seed] if args.seeds is None else range(*map(int, args.seeds.split(":")))
    if args.record:
        recorded = {str(seed): outcome_to_json(run(generate(seed, args.inplace), TorchBackend(), concurrent=False))
                    for seed in seeds}
        with open(args.record, "w") as f:
            json.dump({"torch": __import__("torch").__version__, "inplace": args.inplace, "outcomes": recorded},
                      f, separators=(",", ":"))
        print(f"recorded torch's outcome of {len(recorded)} programs in {args.record}")
        return 0
    bad = 0
    for seed in seeds:
        if args.print:
            print(dumps(generate(seed, args.inplace, args.extended)))
        try:
            diffs = check(seed, torch=args.torch, concurrent=not args.sequential, inplace=args.inplace,
                          extended=args.extended)
        except Exception as e:  # noqa: BLE001 - a program that cannot run is a difference too
            diffs = [f"raised {type(e).__name__}: {e}"]
        if diffs:
            bad += 1
            print(f"seed {seed}: {len(diffs)} differences")
            for d in diffs:
                print("   ", d[:600])
    print(f"{bad} failing of {len(seeds)}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
