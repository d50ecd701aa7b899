"""When a workload's smoothed loss crosses each candidate target, at the default setting: how its targets are set.

    python benchmarks/sizing.py [--workloads logr,cnn,mlp] [--seconds 200] [--db bench-runs/sizing.db]
    python benchmarks/sizing.py --seconds 400        # full mode's targets: about 5 minutes

Runs each benchmark workload (``workloads.py``, quick size) once at
TensorFlow's default setting, without tuning, past its quick target, to
:data:`LOWEST` or for ``--seconds``, and prints the seconds after start-up at
which the smoothed loss (what stops a job) first reached each candidate in
:data:`CANDIDATES`. The quick targets are the first candidates at 70-80 s
after start-up (``workloads.py`` says why), full mode's the first near 5
minutes or more. A sizing run is one run at one
setting: it sets a size, not a result, and tfonline's own runs never enter it.
"""

from __future__ import annotations

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import workloads  # noqa: E402

from tfonline.repository import Repository  # noqa: E402

CANDIDATES = {"logr": [0.54, 0.535, 0.53, 0.525, 0.52, 0.515, 0.51, 0.505, 0.5, 0.495, 0.49, 0.485, 0.48],
              "svm": [0.66, 0.655, 0.65, 0.645, 0.64, 0.635, 0.63, 0.625, 0.62],
              "cnn": [0.045, 0.04, 0.035, 0.03, 0.025, 0.02, 0.015, 0.012, 0.01, 0.008, 0.006, 0.005],
              "mlp": [0.47, 0.46, 0.45, 0.44, 0.435, 0.43, 0.425, 0.42, 0.415, 0.41]}
LOWEST = {name: values[-1] for name, values in CANDIDATES.items()}
WARM_UP = 50  # iterations before the smoothed loss may count, as a job's stop rule waits for its window


def first_crossings(rows: list[dict], candidates: list[float], started: float) -> dict[float, tuple[int, float] | None]:
    """For each candidate, the first ``(step, seconds after started)`` at which a row's smoothed loss is at or
    below it, counting from the :data:`WARM_UP`-th row; None where it never is."""
    crossings = {}
    for target in candidates:
        hit = next((r for r in rows[WARM_UP:] if r["smoothed_loss"] <= target), None)
        crossings[target] = None if hit is None else (hit["step"], hit["wall_time"] - started)
    return crossings


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workloads", default="logr,cnn,mlp")
    parser.add_argument("--seconds", type=float, default=200.0, help="each run's cap (default 200)")
    parser.add_argument("--db", default=os.path.join("bench-runs", "sizing.db"))
    args = parser.parse_args(argv)
    names = args.workloads.split(",")
    unknown = [n for n in names if n not in CANDIDATES]
    if unknown:
        parser.error(f"--workloads takes {', '.join(CANDIDATES)}, got {', '.join(map(repr, unknown))}")
    os.makedirs(os.path.dirname(os.path.abspath(args.db)), exist_ok=True)
    for name in names:
        job = workloads.job(name, "quick")
        quick_target = job.target_loss
        job.target_loss, job.max_seconds = LOWEST[name], args.seconds
        result = job.run(db=args.db, quiet=True, seed=0)
        repo = Repository(args.db, create=False)
        try:
            row = repo.jobs(result.job_id)[0]
            rows = list(repo.rows("select step, smoothed_loss, wall_time from iterations where job_id = ? "
                                  "order by step", (result.job_id,)))
        finally:
            repo.db.conn.close()
        started = row["first_iteration_at"]
        print(f"{name}: {result.status}, {result.iterations} iterations, start-up "
              f"{started - row['started_at']:.1f} s; targets: quick {quick_target:g}, "
              f"full {workloads.FULL_TARGETS[name]:g}")
        for target, hit in first_crossings(rows, CANDIDATES[name], started).items():
            print(f"  {target:g}: " + ("not reached" if hit is None else f"step {hit[0]}, {hit[1]:.1f} s after start-up"),
                  flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
