"""Cost of a switch of session knobs: SSR (reopen sessions) against restart and checkpoint-restart, side by side.

    python benchmarks/reconfig_cost.py [--db bench-runs/reconfig.db] [--switches 10] [--pairs 1]

The LogR benchmark job (see tune_vs_fixed.py) is tuned over the session
knobs only (ps 1, 2 workers and the thread pools pinned, XLA off), once
with each technique: ``reconfig="online"`` (every switch is SSR),
``"restart"`` (read every variable, reopen on the layout's graphs,
restore) and ``"checkpoint"`` (the baseline of existing systems: a Saver
checkpoint, every node restarted, graphs built anew, restored). The random
phase has no budget, so every run draws the same ``--switches`` random
settings in the same order (the draws are seeded). The script prints each
switch's measured cost (wall time from the last iteration under the old
setting to the first under the new one) for each technique, their medians,
and the ratios to SSR. Layout and thread switches are not SSR's and are
not measured here.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys

sys.path.insert(0, os.path.dirname(__file__))
from tune_vs_fixed import LongLogR  # noqa: E402

from tfonline.cluster import LocalCluster  # noqa: E402
from tfonline.repository import Repository  # noqa: E402

START = {"ps": 1, "worker": 2, "intra_op_parallelism_threads": 1, "inter_op_parallelism_threads": 2,
         "global_jit_level": "OFF"}


def costs(db: str, job_id: str, limit: int) -> list[float]:
    repo = Repository(db, create=False)
    rows = [r["cost_s"] for r in repo.rows(
        "SELECT cost_s FROM reconfigurations WHERE job_id = ? ORDER BY step", (job_id,))]
    repo.close()
    return rows[:limit]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", default="bench-runs/reconfig.db")
    parser.add_argument("--switches", type=int, default=10)
    parser.add_argument("--pairs", type=int, default=1)
    args = parser.parse_args(argv)
    os.makedirs(os.path.dirname(os.path.abspath(args.db)), exist_ok=True)
    tuning = {"random_settings": args.switches, "exploration_budget": None, "resume": False,
              "segment_iterations": 100, "min_segment_s": 1.0}
    ratios = []
    with LocalCluster() as cluster:
        for pair in range(args.pairs):
            measured = {}
            order = ("online", "restart", "checkpoint")
            for how in (order[::-1] if pair % 2 else order):
                result = LongLogR().run(setting=START, tune=True, db=args.db, cluster=cluster, quiet=True,
                                        space=START, tuning=tuning, reconfig=how)
                measured[how] = costs(args.db, result.job_id, args.switches)
            ssr, restart, checkpoint = measured["online"], measured["restart"], measured["checkpoint"]
            for i, (a, b, c) in enumerate(zip(ssr, restart, checkpoint)):
                print(f"  switch {i + 1}: SSR {a:.3f} s, restart {b:.3f} s, checkpoint {c:.3f} s")
            median = {how: statistics.median(values) for how, values in measured.items()}
            ratio = median["checkpoint"] / median["online"]
            ratios.append(ratio)
            print(f"pair {pair}: {len(ssr)}, {len(restart)} and {len(checkpoint)} switches; median SSR "
                  f"{median['online']:.3f} s, restart {median['restart']:.3f} s, checkpoint "
                  f"{median['checkpoint']:.3f} s; restart/SSR {median['restart'] / median['online']:.1f}, "
                  f"checkpoint/SSR {ratio:.1f}", flush=True)
    print("checkpoint/SSR over {} pair(s): {}".format(len(ratios), ", ".join(f"{r:.1f}" for r in ratios)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
