"""Fixed-setting runs to calibrate the simulator's speed model on this machine (``tfonline calibrate``).

    python benchmarks/calibration_runs.py --db bench-runs/calibration.db [--runs 24] [--max-steps 4000] [--seed 7]
    tfonline calibrate bench-runs/calibration.db --out bench-runs/logr-model.json

Runs the LogR example on ``--runs`` settings drawn at random (seed 7) from
the full knob space, each on its own embedded cluster (thread pools are a
node's), to its target or for at most ``--max-steps`` iterations. The
calibration holds a share of them out and reports its error on those.
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, os.pardir, "examples"))

from logr import LogR  # noqa: E402

from tfonline.cluster import default_node_count  # noqa: E402
from tfonline.setting import short_form  # noqa: E402
from tfonline.tuner.space import KnobSpace  # noqa: E402

DRAW_SEED = 7


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", required=True, help="the repository to write the runs to")
    parser.add_argument("--runs", type=int, default=24, help="random fixed settings (default 24)")
    parser.add_argument("--max-steps", type=int, default=4000,
                        help="iterations per run at most (default 4000: LogR reaches its target in about 2000)")
    parser.add_argument("--seed", type=int, default=DRAW_SEED, help=f"the settings' draw (default {DRAW_SEED})")
    args = parser.parse_args(argv)
    space = KnobSpace(default_node_count(), os.cpu_count() or 1)
    rng = random.Random(args.seed)
    drawn = []
    for _ in range(args.runs):
        drawn.append(space.sample(rng, exclude=drawn))
    started = time.monotonic()
    for i, setting in enumerate(drawn, 1):
        result = LogR().run(db=args.db, quiet=True, setting=setting, max_steps=args.max_steps, seed=0)
        print(f"[{(time.monotonic() - started) / 60:5.1f} min] {i:>3}/{len(drawn)} {result.status:<10} "
              f"{result.iterations:>5} it  {short_form(setting)}", flush=True)
    print(f"next: tfonline calibrate {args.db}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
