"""Whether the tuner's job length is better read from the ETA with the job's earlier runs, in simulation.

    python benchmarks/experiments/tuner_eta.py [--runs N] [--workload small|paper]

Tuned runs of one simulated workload, one after another on one repository
(as the benchmark's tuned runs are, and a user's repeated job), seeds 0 to
N-1, from the default setting, twice: once as the product runs (from the
third run on the ETA takes the earlier runs, and the tuner reads the job's
length from it: :meth:`tfonline.tuner.history.JobHistory.eta_answered`),
once with the tuner deaf to it (its length from the latest R̂, the rule
before). Per run: its completion time, its random settings, and the median
absolute error of the tuner's estimated share of the job's time at its
decisions (:meth:`TuningManager.time_share`) against the share each
decision was in fact at (of the time from the first iteration to the end).
About 4 s for ``small`` (a 12-s job: too short for a random setting), 12
minutes for ``paper`` (five hour-long jobs at the paper's scale).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "tests"))

from tfonline.repository import Repository  # noqa: E402
from tfonline.simulator import Simulation  # noqa: E402
from tfonline.simulator.run import paper_scale  # noqa: E402
from tfonline.tuner import Tuning  # noqa: E402
from tfonline.tuner.history import JobHistory  # noqa: E402
from tfonline.tuner.manager import TuningManager  # noqa: E402


def _workload(name: str):
    if name == "paper":
        return paper_scale("async")
    from simulated import small_workload

    return small_workload()


def runs(workload, count: int, hear: bool, folder: str) -> list[dict]:
    """``count`` tuned runs on one repository; ``hear``: the tuner reads the ETA's answers."""
    shares: list[tuple[float, float]] = []  # (elapsed, estimated share) at each decision of the run going on
    decide, answered = TuningManager.on_segment_end, JobHistory.eta_answered

    def recorded(self, run):
        decision = decide(self, run)
        shares.append((self.elapsed_s, self.time_share()))
        return decision

    TuningManager.on_segment_end = recorded
    if not hear:
        JobHistory.eta_answered = lambda self, step, left: None
    repo = Repository(os.path.join(folder, f"{'hears' if hear else 'deaf'}.db"))
    rows = []
    try:
        for seed in range(count):
            shares.clear()
            sim = Simulation(workload, repo, workload.default_setting(), seed=seed,
                             tuning=Tuning(min_segment_s=2.0, resume=False))
            status, _ = sim.run()
            total = sim.clock.now - sim.state.first_iteration_at  # the tuner's elapsed time counts from there too
            errors = [abs(share - elapsed / total) for elapsed, share in shares if total > 0]
            rows.append({"seed": seed, "status": status, "completion_s": sim.clock.now - sim.started_at,
                         "random": sim.manager.random_done, "decisions": len(shares),
                         "share_error": statistics.median(errors) if errors else None,
                         "prior": sim.progress.source()})
    finally:
        TuningManager.on_segment_end, JobHistory.eta_answered = decide, answered
        repo.close()
    return rows


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.strip().splitlines()[0])
    parser.add_argument("--runs", type=int, default=6)
    parser.add_argument("--workload", choices=["small", "paper"], default="small")
    args = parser.parse_args(argv)
    workload = _workload(args.workload)
    with tempfile.TemporaryDirectory() as folder:
        arms = {hear: runs(workload, args.runs, hear, folder) for hear in (False, True)}
    print(f"{workload.name}, {args.runs} tuned runs on one repository; per run: completion s, random settings, "
          "median |share error| at decisions (deaf -> hears the ETA)")
    for deaf, hears in zip(arms[False], arms[True]):
        print(f"  seed {deaf['seed']}: {deaf['completion_s']:.0f} -> {hears['completion_s']:.0f} s, "
              f"{deaf['random']} -> {hears['random']} random, share error "
              f"{deaf['share_error']:.3f} -> {hears['share_error']:.3f} ({hears['prior']})")
    later = [(d, h) for d, h in zip(arms[False], arms[True]) if d["seed"] >= 2]
    if later:
        deaf_s, hears_s = (statistics.mean(arm["completion_s"] for arm in pair) for pair in zip(*later))
        print(f"  runs with a prior (seed 2 on): mean completion {deaf_s:.0f} -> {hears_s:.0f} s; median share error "
              f"{statistics.median(d['share_error'] for d, _ in later):.3f} -> "
              f"{statistics.median(h['share_error'] for _, h in later):.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
