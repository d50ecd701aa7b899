"""A CNN-like simulated job, tuned from three workers: does the tuner end on the worker count that finishes first?

    python benchmarks/experiments/cnnsim.py [SEEDS]     # about 1 minute a seed on this machine

The loss falls as 0.02 + 2.28 / (1 + (k/150)^1.5) after k iterations of progress (a plateau, then a fast fall,
as the CNN example's does), each minibatch loss scattered by 20% (lognormal); asynchronous staleness makes an
iteration of 1, 2, 3 or 4 workers worth 1, 0.8, 0.58 or 0.45 of one, and an iteration takes 0.083, 0.070, 0.063 or
0.075 s (times factors for ps nodes and threads). So three workers run the fastest iterations and need 1.72x the
iterations of one. The last lines print the fixed runs' times, computed. Only the ps nodes, workers and intra-op
threads are free; a switch costs 0.5 s. NOTES.md (thirtieth and thirty-first sessions) has the measured figures.
"""

import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tests"))
import simulated as sim  # noqa: E402  (the tests' simulated surfaces)

from tfonline.estimator import get_estimator  # noqa: E402
from tfonline.simulator import LossCurve, Segments, Workload  # noqa: E402
from tfonline.tuner.manager import TuningManager  # noqa: E402

T = {1: 0.083, 2: 0.070, 3: 0.063, 4: 0.075}
RHO = {1: 1.0, 2: 0.8, 3: 0.58, 4: 0.45}
TARGET, SWITCH_S = 0.045, 0.5


def seconds_per_iteration(s) -> float:
    return T[s["worker"]] * (1 + 0.15 * (s["ps"] - 1)) * (1 + 0.1 * (sim.CORES / s["intra_op_parallelism_threads"] - 1))


class Surface(sim.StaleSurface):
    def step_s(self, s):
        return seconds_per_iteration(s) * s["worker"]


@dataclass
class Plateau(Workload):
    noise_rel: float = 0.2

    def loss_at(self, k):
        return 0.02 + 2.28 / (1 + (k / 150) ** 1.5)

    def draw(self, setting, n, progress, rng):
        gaps = seconds_per_iteration(setting) * np.clip(1 + 0.05 * rng.standard_normal(n), 0.2, None)
        ahead = progress + RHO[setting["worker"]] * np.arange(1, n + 1)
        losses = self.loss_at(ahead) * np.exp(self.noise_rel * rng.standard_normal(n))
        return gaps, gaps * setting["worker"], losses, float(ahead[-1])


def tuned(seed: int) -> tuple[float, str]:
    """The tuned job's simulated time to the target (its loss trend under it), and the workers after each decision."""
    space = sim.space(global_jit_level="OFF")
    manager = TuningManager(space, space.start({"worker": 3, "ps": 1, "intra_op_parallelism_threads": sim.CORES}),
                            TARGET, lambda: get_estimator("hogwild"), initial_iterations=50, random_settings=10,
                            segment_iterations=25, min_segment_s=0, seed=seed, overhead_share=None)
    workload = Plateau("CNNlike", sim.NODES, Surface(), LossCurve(1 / 120, 2.5, 0.3), target_loss=TARGET,
                       model_bytes=0.0, start_s=0.0, smoothing_window=20)
    job, workers = Segments(workload, seed, switch_cost_s=SWITCH_S), []
    for _ in range(200):
        decision = manager.on_segment_end(job.run(manager.current, manager.segment_length()))
        if decision.switch:
            job.clock += SWITCH_S
            manager.record_cost(decision.parts, SWITCH_S)
        workers.append(manager.current["worker"])
        if manager.triples[-1].loss_before < TARGET:
            break
    return job.clock, "".join(map(str, workers))


if __name__ == "__main__":
    times = []
    for seed in range(int(sys.argv[1]) if len(sys.argv) > 1 else 6):
        clock, workers = tuned(seed)
        times.append(clock)
        print(f"seed {seed}: {clock:.0f} s; workers after each decision {workers}", flush=True)
    print(f"tuned, mean of {len(times)}: {np.mean(times):.1f} s")
    iterations = 150 * (2.28 / (TARGET - 0.02) - 1) ** (1 / 1.5)
    for w in (1, 2, 3):
        print(f"fixed, {w} worker(s): {iterations / RHO[w]:.0f} iterations, {iterations / RHO[w] * T[w]:.1f} s")
