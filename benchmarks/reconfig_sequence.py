"""Cost of the same 11 switches done online (ODMR, TDR, SSR) and by checkpoint-restart, side by side.

    python benchmarks/reconfig_sequence.py [--models logr,cnn] [--db bench-runs/sequence.db] [--pairs 1]
                                           [--every N] [--baseline-nodes fork|process]

Each model runs the same scripted sequence (``run(schedule=...)``) on one
5-node local cluster: parameter-server changes, worker changes, thread-pool
changes and session-knob changes, mixed, one every ``--every`` steps (LogR
150, CNN 40 by default; online switches come a little later than scheduled,
as their next setting is made ready while the workers train on), once
with ``reconfig="online"`` and once with ``reconfig="checkpoint"`` (the
baseline of existing systems: a Saver checkpoint, every node restarted,
graphs built anew, restored); the order alternates between pairs. Models:
the LogR example (2**20 hashed features: a 4 MiB weight vector and its 4 MiB
Adagrad slot, cut into 8 partitions) and the CNN example (MNIST digits; its
3.2 MB fully connected layer and momentum slot partitioned likewise).

The baseline's node restarts are forks of a process that has TensorFlow
imported, as the online technique's are (``--baseline-nodes fork``, the
default, generous to the baseline), or fresh processes that import
TensorFlow, as existing systems restart (``--baseline-nodes process``: the
checkpoint runs get a cluster of their own without a fork server).

It prints each switch's measured cost (wall time from the last iteration
under the old setting to the first under the new one), technique and bytes
moved for both techniques, and the iterations trained while an online
switch was made (live switches: no global stop, see tfonline.reconfig), then the ratios checkpoint/online of the median
and of the total cost.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), os.pardir, "examples"))

from cnn import CNN  # noqa: E402
from logr import LogR  # noqa: E402

from tfonline.cluster import LocalCluster  # noqa: E402
from tfonline.repository import Repository  # noqa: E402

START = {"ps": 1, "worker": 1, "intra_op_parallelism_threads": 2, "inter_op_parallelism_threads": 2,
         "global_jit_level": "OFF"}
# Every kind of change, on its own and mixed; ps + worker stays within 5 nodes.
SEQUENCE = [
    {"ps": 2},
    {"worker": 2},
    {"do_function_inlining": False},
    {"ps": 3},
    {"intra_op_parallelism_threads": 1},
    {"ps": 1, "worker": 3},
    {"infer_shapes": True},
    {"ps": 2, "worker": 1},
    {"inter_op_parallelism_threads": 1},
    {"ps": 3, "worker": 2},
    {"do_common_subexpression_elimination": False, "worker": 1},
]
MODELS = {"logr": LogR, "cnn": CNN}
EVERY = {"logr": 150, "cnn": 40}


def switches(db: str, job_id: str) -> list[dict]:
    repo = Repository(db, create=False)
    rows = list(repo.rows("SELECT step, technique, cost_s, bytes_moved, iterations_during FROM reconfigurations "
                          "WHERE job_id = ? "
                          "ORDER BY step", (job_id,)))
    repo.close()
    return rows


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="logr,cnn")
    parser.add_argument("--db", default="bench-runs/sequence.db")
    parser.add_argument("--pairs", type=int, default=1)
    parser.add_argument("--every", type=int, help="steps between switches (default: LogR 150, CNN 40)")
    parser.add_argument("--baseline-nodes", choices=["fork", "process"], default="fork",
                        help="how the checkpoint baseline restarts nodes (default: fork)")
    args = parser.parse_args(argv)
    os.makedirs(os.path.dirname(os.path.abspath(args.db)), exist_ok=True)
    summary = []
    with contextlib.ExitStack() as stack:
        online_cluster = stack.enter_context(LocalCluster(5))
        baseline_cluster = (online_cluster if args.baseline_nodes == "fork"
                            else stack.enter_context(LocalCluster(5, fork_server=False)))
        for name in args.models.split(","):
            every = args.every or EVERY[name]
            schedule = [(every * (i + 1), change) for i, change in enumerate(SEQUENCE)]
            max_steps = every * (len(SEQUENCE) + 2)
            job = MODELS[name]()
            job.target_loss = 1e-9  # not reached: every run trains max_steps
            for pair in range(args.pairs):
                order = ("online", "checkpoint") if pair % 2 == 0 else ("checkpoint", "online")
                made = {}
                for how in order:
                    cluster = online_cluster if how == "online" else baseline_cluster
                    result = job.run(setting=START, db=args.db, cluster=cluster, max_steps=max_steps, quiet=True,
                                     schedule=schedule, reconfig=how)
                    made[how] = switches(args.db, result.job_id)
                    print(f"{name} {how}: {result.iterations} iterations in {result.completion_time_s:.1f} s, "
                          f"{len(made[how])} switches", flush=True)
                online, checkpoint = made["online"], made["checkpoint"]
                for i, (a, b) in enumerate(zip(online, checkpoint)):
                    print(f"  {i + 1:>2} {str(SEQUENCE[i]):<58} {a['technique']:<13} {a['cost_s']:6.3f} s "
                          f"{a['bytes_moved'] / 2**20:6.2f} MiB {a['iterations_during']:>3} it during | checkpoint {b['cost_s']:6.3f} s "
                          f"{b['bytes_moved'] / 2**20:6.2f} MiB | {b['cost_s'] / a['cost_s']:5.1f}x")
                medians = [statistics.median(r["cost_s"] for r in rows) for rows in (online, checkpoint)]
                totals = [sum(r["cost_s"] for r in rows) for rows in (online, checkpoint)]
                line = (f"{name} pair {pair} ({args.baseline_nodes} restarts in the baseline): {len(online)} and "
                        f"{len(checkpoint)} switches; median online {medians[0]:.3f} s, checkpoint {medians[1]:.3f} s:"
                        f" {medians[1] / medians[0]:.1f}x; total {totals[0]:.2f} s against {totals[1]:.2f} s: "
                        f"{totals[1] / totals[0]:.1f}x")
                summary.append(line)
                print(line, flush=True)
    print("\n".join(["summary:"] + summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
