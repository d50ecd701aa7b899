"""Runs one example under K fixed settings to its target, then rates the estimators on them.

    python benchmarks/estimator_rank.py [--db bench-runs/rank.db] [--segment 60]

The settings differ in layout and thread pools (XLA stays off: on this
machine it makes the sparse jobs ~12x slower, which would only lengthen the
run). All runs share one embedded cluster; the oracle ranks them by training
time, which excludes cluster start-up.
"""

from __future__ import annotations

import argparse
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), os.pardir, "examples"))

from logr import LogR  # noqa: E402

from tfonline.cli import main as cli  # noqa: E402
from tfonline.cluster import LocalCluster  # noqa: E402

SETTINGS = [
    {"ps": 1, "worker": 1},
    {"ps": 1, "worker": 2},
    {"ps": 1, "worker": 3},
    {"ps": 2, "worker": 1},
    {"ps": 2, "worker": 2, "intra_op_parallelism_threads": 1, "inter_op_parallelism_threads": 1},
    {"ps": 3, "worker": 1, "intra_op_parallelism_threads": 1},
]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", default="bench-runs/rank.db")
    parser.add_argument("--segment", type=int, default=60)
    args = parser.parse_args(argv)
    os.makedirs(os.path.dirname(os.path.abspath(args.db)), exist_ok=True)
    with LocalCluster() as cluster:
        for setting in SETTINGS:
            result = LogR().run(setting=setting, db=args.db, cluster=cluster, quiet=True)
            print(f"{setting}: {result.status}, {result.iterations} iterations, {result.completion_time_s:.1f} s",
                  flush=True)
    return cli(["estimate-quality", args.db, "--job", "LogR", "--segment", str(args.segment)])


if __name__ == "__main__":
    sys.exit(main())
