"""How much the job's seed alone moves one setting's iterations to its target, and what that leaves an ETA.

    python benchmarks/seed_noise.py [--workloads logr,cnn,mlp] [--seeds 4] [--mode quick] [--out DIR]
                                                        # quick: about 20 minutes for the three

Runs each benchmark workload (``workloads.py``) at TensorFlow's default
setting, fixed, to its target, once per seed (the job's graph-level seed:
its initial weights and data draws; the benchmark's fixed runs all use 0),
each on its own embedded cluster. Prints, per workload:

- each seed's iterations and completion time, and their spread
  ((largest - smallest) / smallest): how far apart two runs of one setting
  land, which no tuner removes (the benchmark's target for tuned runs from
  one start is 15%);
- at 25, 50 and 75% of each run, the median relative error of the
  remaining iterations of two predictors: ``hogwild``, the ETA's estimator
  (``tfonline estimate-quality``'s measure), and ``mean``, one that knows
  the setting's mean iterations over these seeds (N̄ − k left at iteration
  k). ``mean`` knows what no ETA can (the answer averaged over seeds) but
  nothing of the run's own luck, so where the target is crossed by a dip of
  the smoothed loss on a plateau it shows the error a run's noise leaves.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import numpy as np  # noqa: E402
import workloads  # noqa: E402

from tfonline.estimator._quality import FRACTIONS, estimate_quality, load_runs  # noqa: E402
from tfonline.repository import Repository  # noqa: E402


def mean_predictor_errors(iterations: list[int]) -> dict[float, float]:
    """At each of :data:`FRACTIONS` of every run, the median over runs of ``|(N̄ − k) − (N − k)| / (N − k)``: the
    relative error of the remaining iterations predicted from the runs' mean N̄ alone (k = fraction × N)."""
    mean = statistics.mean(iterations)
    return {f: float(np.median([abs(mean - n) / ((1.0 - f) * n) for n in iterations])) for f in FRACTIONS}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workloads", default="logr,cnn,mlp")
    parser.add_argument("--seeds", type=int, default=4, help="runs per workload, seeds 0 to N-1 (default 4)")
    parser.add_argument("--mode", default="quick", choices=("quick", "full"), help="the targets' size")
    parser.add_argument("--out", help="where the runs' repository goes (default: a temporary folder)")
    args = parser.parse_args(argv)
    names = args.workloads.split(",")
    unknown = [n for n in names if n not in workloads.SIZED]
    if unknown:
        parser.error(f"--workloads takes {', '.join(workloads.SIZED)}, got {', '.join(map(repr, unknown))}")
    if args.seeds < 2:
        parser.error(f"--seeds must be at least 2, got {args.seeds}")
    out = args.out or tempfile.mkdtemp(prefix="seed-noise-")
    os.makedirs(out, exist_ok=True)
    db = os.path.join(out, f"seed-noise-{args.mode}.db")
    for name in names:
        results = []
        for seed in range(args.seeds):
            job = workloads.job(name, args.mode)
            result = job.run(db=db, quiet=True, seed=seed)
            results.append(result)
            print(f"{name} seed {seed}: {result.status}, {result.iterations} iterations, "
                  f"{result.completion_time_s:.1f} s", flush=True)
        done = [r.iterations for r in results if r.status == "converged"]
        if len(done) < 2:
            print(f"{name}: fewer than 2 runs converged")
            continue
        print(f"{name}: iterations {min(done)}-{max(done)} (mean {statistics.mean(done):.0f}), spread "
              f"{_spread(done):.0%}; completion times spread "
              f"{_spread([r.completion_time_s for r in results if r.status == 'converged']):.0%}")
        ours = {r.job_id for r in results}  # the repository may hold earlier runs of the job
        repo = Repository(db, create=False)
        try:
            runs = [r for r in load_runs(repo, job.name) if r.job_id in ours]
        finally:
            repo.db.conn.close()
        hogwild = estimate_quality(runs, "hogwild", 60).median_relative_error
        mean = mean_predictor_errors(done)
        for label, errors in (("hogwild", hogwild), ("mean", mean)):
            print(f"  {label:<8} median relative error of the remaining iterations at 25 / 50 / 75%: "
                  + " / ".join("-" if errors[f] is None else f"{errors[f]:.2f}" for f in FRACTIONS))
    print(f"repository: {db}")
    return 0


def _spread(values: list[float]) -> float:
    return (max(values) - min(values)) / min(values)


if __name__ == "__main__":
    sys.exit(main())
