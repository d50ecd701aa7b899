"""How often does a long, noisy, CNN-like simulated job switch? The tuner's online switches, counted.

    python benchmarks/experiments/switches.py DRIFT SEEDS [LOSS_NOISE]   # e.g. 0.1 0,1,2: about 25 s a seed

The full benchmark's first CNN run on the slower machine switched 147 times in 1,610 s (NOTES.md, forty-third
session). This job is of that kind: 4 nodes on one 2-core host, about 0.06 s per one-worker step with thread
pools, graph options and XLA mattering a little (XLA compiles 5-10 s), about 20,000 iterations to the target,
each loss scattered by LOSS_NOISE (default 0.3), each iteration's time by 10%, and the machine's drift (a
slowdown of mean 1 and relative deviation DRIFT, redrawn every 10 s). The comparison is
:func:`tfonline.simulator.evaluate.evaluate`'s (30 random fixed settings, the default fixed, a tuned run from the
default at each seed); each tuned run prints its time, iterations, switches and their cost, the GP's
hyperparameter fits, and its online switches by reason; then the fixed runs' figures.
"""

import collections
import os
import sys
import tempfile

from tfonline.repository import Repository
from tfonline.simulator import LossCurve, SpeedModel, Workload
from tfonline.simulator.evaluate import evaluate


def workload(drift: float, loss_noise: float) -> Workload:
    speed = SpeedModel([0.045, 0.004, 0.008, 0.004, 0.004, 0.002, 0.02, 0.006, 0.01], hosts=1, cores=2,
                       compile_s={"ON_1": 5.0, "ON_2": 10.0})
    curve = LossCurve(b0=1 / 2000, b1=2.0, b2=0.0, staleness=0.2, noise=loss_noise)
    return Workload("CNNish", 4, speed, curve, target_loss=0.074, model_bytes=1e6, start_s=8.0, time_noise=0.1,
                    drift=drift, drift_period_s=10.0)


def switches(repo: Repository, run: dict) -> str:
    """One tuned run of :func:`evaluate`'s result, with its switches read from the repository."""
    job = run["job_id"]
    online = collections.Counter(r["reason"].split(":")[0] for r in repo.db.query(
        "select reason from decisions where job_id = ? and applied and phase = 'online'", [job]))
    moves = next(repo.db.query("select count(*) n, total(cost_s) s from reconfigurations where job_id = ?", [job]))
    fits = next(repo.db.query("select count(*) n from gp_fits where job_id = ?", [job]))["n"]
    return (f"seed {run['seed']}: {run['status']} in {run['completion_s']:.0f} s, {run['iterations']} iterations, "
            f"{moves['n']} switches costing {moves['s']:.0f} s, {fits} GP fits; online {sum(online.values())}: "
            f"{dict(online.most_common())} ({run['real_s']:.0f} s real)")


def main(drift: float, seeds: list[int], loss_noise: float = 0.3) -> None:
    db = os.path.join(tempfile.mkdtemp(prefix="switches-"), "runs.db")
    result = evaluate(workload(drift, loss_noise), db, random_settings=30, seeds=seeds)
    repo = Repository(db, create=False)
    try:
        for run in result["tuned"]:
            print(switches(repo, run))
    finally:
        repo.close()
    print(f"default fixed {result['default_s']:.0f} s; 30 random fixed: best {result['best_s']:.0f}, average "
          f"{result['average_s']:.0f}, worst {result['worst_s']:.0f} s")


if __name__ == "__main__":
    main(float(sys.argv[1]), [int(s) for s in sys.argv[2].split(",")], *(float(a) for a in sys.argv[3:4]))
