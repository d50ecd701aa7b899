"""When a workload's smoothed loss crosses each candidate target, at the default setting: how its targets are set.

    python benchmarks/sizing.py [--workloads logr,cnn,mlp] [--seconds 200] [--db bench-runs/sizing.db]
    python benchmarks/sizing.py --seconds 400        # full mode's targets: about 5 minutes

Runs each benchmark workload (``workloads.py``, quick size) once at
TensorFlow's default setting, without tuning, past its quick target, to
:data:`LOWEST` or for ``--seconds``, and prints the seconds after start-up at
which the smoothed loss (what stops a job) first reached each candidate in
:data:`CANDIDATES`, and at which the loss's trend did (the mean of its last
:data:`TREND_WINDOW` losses). A target the trend never reaches is crossed
only by a dip of the smoothed loss: a wait for luck, not for training, so
no benchmark target is set there. The quick targets are the first candidates at 70-80 s
after start-up (``workloads.py`` says why), full mode's the first near 5
minutes or more. ``--learning-rate`` runs the workloads at another one (how
full mode's MLP rate was chosen). A sizing run is one run at one
setting: it sets a size, not a result, and tfonline's own runs never enter it.
"""

from __future__ import annotations

import argparse
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import workloads  # noqa: E402

from tfonline.repository import Repository  # noqa: E402

CANDIDATES = {"logr": [0.54, 0.535, 0.53, 0.525, 0.52, 0.515, 0.51, 0.505, 0.5, 0.495, 0.49, 0.485, 0.48],
              "svm": [0.66, 0.655, 0.65, 0.645, 0.64, 0.635, 0.63, 0.625, 0.62],
              "cnn": [0.045, 0.04, 0.035, 0.03, 0.025, 0.02, 0.015, 0.012, 0.01, 0.008, 0.006, 0.005],
              "mlp": [0.47, 0.46, 0.45, 0.44, 0.435, 0.43, 0.425, 0.42, 0.415, 0.41, 0.4, 0.39, 0.38, 0.37, 0.36, 0.35,
                      0.34, 0.33, 0.32, 0.31, 0.3, 0.28, 0.26, 0.24, 0.22, 0.2, 0.18, 0.16, 0.14, 0.12, 0.1]}
LOWEST = {name: values[-1] for name, values in CANDIDATES.items()}
WARM_UP = 50  # iterations before the smoothed loss may count, as a job's stop rule waits for its window
TREND_WINDOW = 2000  # losses the trend is the mean of (the MLP's scatter about it: sd 0.13, so 0.003 on the mean)


def first_crossings(rows: list[dict], candidates: list[float], started: float) -> dict[float, tuple[int, float] | None]:
    """For each candidate, the first ``(step, seconds after started)`` at which a row's smoothed loss is at or
    below it, counting from the :data:`WARM_UP`-th row; None where it never is."""
    crossings = {}
    for target in candidates:
        hit = next((r for r in rows[WARM_UP:] if r["smoothed_loss"] <= target), None)
        crossings[target] = None if hit is None else (hit["step"], hit["wall_time"] - started)
    return crossings


def trend_crossings(rows: list[dict], candidates: list[float], started: float,
                    window: int = TREND_WINDOW) -> dict[float, tuple[int, float] | None]:
    """For each candidate, the first ``(step, seconds after started)`` at which the mean of the last ``window``
    losses is at or below it; None where it never is (or the run has fewer than ``window`` rows)."""
    losses = np.array([r["loss"] for r in rows], dtype=float)
    if losses.size < window:
        return {target: None for target in candidates}
    sums = np.cumsum(np.concatenate([[0.0], losses]))
    trend = (sums[window:] - sums[:-window]) / window  # trend[i]: the mean of losses i .. i + window - 1
    crossings = {}
    for target in candidates:
        below = np.flatnonzero(trend <= target)
        hit = rows[below[0] + window - 1] if below.size else None
        crossings[target] = None if hit is None else (hit["step"], hit["wall_time"] - started)
    return crossings


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workloads", default="logr,cnn,mlp")
    parser.add_argument("--seconds", type=float, default=200.0, help="each run's cap (default 200)")
    parser.add_argument("--db", default=os.path.join("bench-runs", "sizing.db"))
    parser.add_argument("--learning-rate", type=float, help="the workloads' learning rate (default: their own)")
    args = parser.parse_args(argv)
    names = args.workloads.split(",")
    unknown = [n for n in names if n not in CANDIDATES]
    if unknown:
        parser.error(f"--workloads takes {', '.join(CANDIDATES)}, got {', '.join(map(repr, unknown))}")
    if args.learning_rate is not None and not args.learning_rate > 0:
        parser.error(f"--learning-rate takes a number > 0, got {args.learning_rate:g}")
    os.makedirs(os.path.dirname(os.path.abspath(args.db)), exist_ok=True)
    for name in names:
        job = workloads.job(name, "quick")
        quick_target = job.target_loss
        job.target_loss, job.max_seconds = LOWEST[name], args.seconds
        if args.learning_rate is not None:
            job.learning_rate = args.learning_rate
        result = job.run(db=args.db, quiet=True, seed=0)
        repo = Repository(args.db, create=False)
        try:
            row = repo.jobs(result.job_id)[0]
            rows = list(repo.rows("select step, loss, smoothed_loss, wall_time from iterations where job_id = ? "
                                  "order by step", (result.job_id,)))
        finally:
            repo.db.conn.close()
        started = row["first_iteration_at"]
        print(f"{name}: {result.status}, {result.iterations} iterations, start-up "
              f"{started - row['started_at']:.1f} s; learning rate {job.learning_rate:g}; targets: quick "
              f"{quick_target:g}, full {workloads.FULL_TARGETS[name]:g}")
        trends = trend_crossings(rows, CANDIDATES[name], started)
        for target, hit in first_crossings(rows, CANDIDATES[name], started).items():
            print(f"  {target:g}: smoothed loss {_when(hit)}; trend (mean of {TREND_WINDOW} losses) "
                  f"{_when(trends[target])}", flush=True)
    return 0


def _when(hit: tuple[int, float] | None) -> str:
    return "not reached" if hit is None else f"step {hit[0]}, {hit[1]:.1f} s after start-up"


if __name__ == "__main__":
    sys.exit(main())
