"""A tuned job against the same job kept at its (poor) starting setting, side by side on one cluster.

    python benchmarks/tune_vs_fixed.py [--db bench-runs/tune.db] [--pairs 1] [--start layout|xla]
                                       [--learning-rate 0.02] [--random-settings 10]
                                       [--exploration-budget F]
                                       [--pin global_jit_level=OFF ...]

The job is the LogR example with Adagrad at a smaller learning rate (0.02:
about 14,000 iterations to the target 0.60, a longer run, so that a switch
can pay for itself). The starting setting is deliberately poor:

- ``layout``: three parameter servers, one worker, one thread per pool;
  about 25% slower per iteration than the best layout on this machine.
- ``xla``: the same with XLA on (ON_2): an 11-13 s compile before the
  first iteration, then about 7 ms per iteration against 3.6-4 ms for the
  best settings with XLA off; use ``--learning-rate 0.1`` (about 3,000
  iterations, a 35-s job).

Each pair runs the fixed job and the tuned one (from the same setting) on
one embedded cluster, the fixed one first in even pairs and last in odd
ones; the script prints each completion time, the ratio
fixed/tuned (> 1: tuning won), and the tuned runs' tuning overhead (GP
fitting and EI maximisation) as a fraction of their completion time, and
the settings the tuned run spent most of its iterations at. The tuner decides
beside the training, so its overhead is also given as the training time it
cost (each decision's window less that window's iterations at the setting's
own time per iteration).
``tfonline report DB`` shows every decision.
"""

from __future__ import annotations

import argparse
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), os.pardir, "examples"))

import tensorflow as tf  # noqa: E402
from logr import LogR  # noqa: E402

from tfonline.cluster import LocalCluster  # noqa: E402
from tfonline.repository import Repository  # noqa: E402

POOR = {"ps": 3, "worker": 1, "intra_op_parallelism_threads": 1, "inter_op_parallelism_threads": 1}
STARTS = {
    # A poor layout: about 25% slower per iteration than the best one here.
    "layout": POOR,
    # The same with XLA on, a common mistake for a sparse model: ~12x slower.
    "xla": dict(POOR, global_jit_level="ON_2"),
}


class LongLogR(LogR):
    target_loss = 0.60
    max_seconds = 1800
    learning_rate = 0.02

    def optimizer_fn(self):
        return tf.compat.v1.train.AdagradOptimizer(self.learning_rate)


def decisions_beside_training(repo: Repository, job_id: str) -> tuple[float, float]:
    """Seconds the tuner spent deciding beside the training, and about how much training time that cost.

    A decision's window runs from its segment's end to the decision. The
    cost is the window less its iterations at the decided segment's own time
    per iteration (the workers run slower while the GP shares the machine).
    """
    ended = {r["segment"]: r["ended_at"] for r in repo.rows(
        "SELECT segment, ended_at FROM segments WHERE job_id = ?", (job_id,))}
    triples = list(repo.rows("SELECT segment, per_iteration_s FROM triples WHERE job_id = ? ORDER BY segment",
                             (job_id,)))
    decided = [r["wall_time"] for r in repo.rows(
        "SELECT wall_time FROM decisions WHERE job_id = ? ORDER BY step", (job_id,))]
    beside = lost = 0.0
    for triple, end in zip(triples, decided):
        start = ended[triple["segment"]]
        (n,) = next(repo.rows("SELECT count(*) AS n FROM iterations WHERE job_id = ? AND wall_time > ? "
                              "AND wall_time <= ?", (job_id, start, end))).values()
        beside += end - start
        if triple["per_iteration_s"]:
            lost += max(0.0, end - start - n * triple["per_iteration_s"])
    return beside, lost


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", default="bench-runs/tune.db")
    parser.add_argument("--pairs", type=int, default=1)
    parser.add_argument("--start", choices=sorted(STARTS), default="layout", help="the poor starting setting")
    parser.add_argument("--learning-rate", type=float, default=LongLogR.learning_rate)
    parser.add_argument("--random-settings", type=int, default=10)
    parser.add_argument("--exploration-budget", type=float, default=None,
                        help="the tuning option of that name (default: tfonline's)")
    parser.add_argument("--pin", action="append", default=[], metavar="KNOB=VALUE",
                        help="pin a knob of the tuning space (e.g. global_jit_level=OFF); repeatable")
    args = parser.parse_args(argv)
    LongLogR.learning_rate = args.learning_rate
    os.makedirs(os.path.dirname(os.path.abspath(args.db)), exist_ok=True)
    space = {}
    for pin in args.pin:
        name, _, value = pin.partition("=")
        space[name] = int(value) if value.isdigit() else {"True": True, "False": False}.get(value, value)
    tuning = {"random_settings": args.random_settings, "resume": False}
    if args.exploration_budget is not None:
        tuning["exploration_budget"] = args.exploration_budget
    ratios = []
    with LocalCluster() as cluster:
        for pair in range(args.pairs):
            start = STARTS[args.start]

            def fixed_run():
                return LongLogR().run(setting=start, db=args.db, cluster=cluster, quiet=True)

            def tuned_run():
                return LongLogR().run(setting=start, tune=True, db=args.db, cluster=cluster, quiet=True,
                                      space=space or None, tuning=tuning)

            # Odd pairs run the tuned job first: a slow or fast spell of this
            # shared machine then favours neither side on average.
            if pair % 2:
                tuned, fixed = tuned_run(), fixed_run()
            else:
                fixed, tuned = fixed_run(), tuned_run()
            repo = Repository(args.db, create=False)
            (overhead,) = [j["tuning_overhead_s"] for j in repo.jobs() if j["id"] == tuned.job_id]
            beside, lost = decisions_beside_training(repo, tuned.job_id)
            by_setting = {}
            for row in repo.rows("SELECT s.short, g.end_step - g.start_step + 1 AS n FROM segments g "
                                 "JOIN settings s ON s.id = g.setting_id WHERE g.job_id = ?", (tuned.job_id,)):
                by_setting[row["short"]] = by_setting.get(row["short"], 0) + row["n"]
            repo.close()
            ratio = fixed.completion_time_s / tuned.completion_time_s
            ratios.append(ratio)
            order = "tuned first" if pair % 2 else "fixed first"
            print(f"pair {pair} ({order}): fixed {fixed.status} {fixed.completion_time_s:.1f} s ({fixed.iterations} it); "
                  f"tuned {tuned.status} {tuned.completion_time_s:.1f} s ({tuned.iterations} it); "
                  f"fixed/tuned {ratio:.2f}; tuning overhead {overhead:.1f} s = "
                  f"{100 * overhead / tuned.completion_time_s:.1f}% of the tuned run, decided beside the training, "
                  f"which it slowed by about {lost:.1f} s = {100 * lost / tuned.completion_time_s:.1f}%", flush=True)
            most = sorted(by_setting.items(), key=lambda kv: -kv[1])[:3]
            print("  tuned run's iterations by setting: " + "; ".join(
                f"{short} {100 * n / max(1, tuned.iterations):.0f}%" for short, n in most), flush=True)
    print(f"fixed/tuned over {len(ratios)} pair(s): " + ", ".join(f"{r:.2f}" for r in ratios))
    return 0


if __name__ == "__main__":
    sys.exit(main())
