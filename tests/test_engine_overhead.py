"""A smoke test of benchmarks/engine_overhead.py: both loops it compares train on the shared cluster."""

from __future__ import annotations

import math
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))


def test_the_plain_loop_and_the_fixed_run_both_train_and_are_timed(cluster, tmp_path):
    sys.path.insert(0, os.path.join(HERE, os.pardir, "benchmarks"))
    try:
        import engine_overhead as bench
    finally:
        sys.path.pop(0)
    job = bench.make_job("mlp")
    plain = bench.plain(job, cluster, 1, 2, 80)
    partitioned = bench.plain(job, cluster, 1, 2, 80, 4)
    ours = bench.fixed(job, cluster, 1, 2, 80, str(tmp_path / "runs.db"))
    for pace in (plain, partitioned, ours):
        assert math.isfinite(pace) and 0 < pace < 1.0  # seconds per iteration of a small MLP
