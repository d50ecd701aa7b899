"""A tiny deterministic backend for the tuning loop: a known response surface instead of TensorFlow.

Time per iteration and convergence per iteration depend on the setting
through a fixed formula; the driver runs the manager's segments against it,
applies its decisions at a fixed cost, and reports that cost back, exactly as
the TensorFlow runner does.
"""

from __future__ import annotations

import math

import numpy as np

from tfonline.estimator import get_estimator
from tfonline.tuner.manager import SegmentRun, TuningManager
from tfonline.tuner.space import KnobSpace

NODES, CORES = 5, 4
PINNED = {"do_common_subexpression_elimination": True, "max_folded_constant_in_bytes": 10 * 1024 * 1024,
          "do_function_inlining": True, "infer_shapes": False, "place_pruned_graph": False,
          "enable_bfloat16_sendrecv": False}


def space(**restrict) -> KnobSpace:
    return KnobSpace(NODES, CORES, dict(PINNED, **restrict))


def seconds_per_iteration(s) -> float:
    """Best at 3 workers, 1 ps, the most intra-op threads, XLA off; inter-op threads matter little."""
    t = 0.01 * (1 + 0.35 * abs(s["worker"] - 3) + 0.25 * (s["ps"] - 1)
                + 0.1 * (CORES / s["intra_op_parallelism_threads"] - 1)
                + 0.02 * abs(s["inter_op_parallelism_threads"] - 2))
    return t * {"OFF": 1.0, "ON_1": 2.0, "ON_2": 4.0}[s["global_jit_level"]]


def progress_per_iteration(s) -> float:
    """Staleness: more workers, a little less progress per (asynchronous) iteration."""
    return 1.0 / (1 + 0.05 * (s["worker"] - 1))


def time_per_progress(s) -> float:
    return seconds_per_iteration(s) / progress_per_iteration(s)


def optimum(sp: KnobSpace) -> float:
    best = math.inf
    for ps in sp.values["ps"]:
        for w in sp.values["worker"]:
            if ps + w > sp.node_count:
                continue
            for intra in sp.values["intra_op_parallelism_threads"]:
                for inter in sp.values["inter_op_parallelism_threads"]:
                    for jit in sp.values["global_jit_level"]:
                        s = {"ps": ps, "worker": w, "intra_op_parallelism_threads": intra,
                             "inter_op_parallelism_threads": inter, "global_jit_level": jit}
                        best = min(best, time_per_progress(s))
    return best


class SimulatedJob:
    """Loss ``0.3 + 0.4/(1 + p/300)`` after progress p, with 2% multiplicative noise; a switch costs 0.1 s."""

    switch_cost_s = 0.1

    def __init__(self, seed: int, target_loss: float = 0.33):
        self.rng = np.random.default_rng(seed)
        self.target_loss = target_loss
        self.step, self.progress, self.clock = 0, 0.0, 0.0
        self.smoothed = 0.7

    def loss(self) -> float:
        return 0.3 + 0.4 / (1 + self.progress / 300)

    def run_segment(self, setting, iterations: int) -> SegmentRun:
        before = self.smoothed
        steps, losses, walls = [], [], []
        for _ in range(iterations):
            self.step += 1
            self.progress += progress_per_iteration(setting)
            self.clock += seconds_per_iteration(setting) * (1 + 0.05 * self.rng.standard_normal())
            loss = self.loss() * (1 + 0.02 * self.rng.standard_normal())
            self.smoothed = 0.9 * self.smoothed + 0.1 * loss
            steps.append(self.step), losses.append(loss), walls.append(self.clock)
        return SegmentRun(dict(setting), np.array(steps, float), np.array(losses), np.array(walls), before,
                          self.smoothed)


def drive(manager: TuningManager, job: SimulatedJob, decisions: int) -> list:
    """Runs ``decisions`` segments; returns the decisions."""
    made = []
    for _ in range(decisions):
        run = job.run_segment(manager.current, manager.segment_length())
        decision = manager.on_segment_end(run)
        made.append(decision)
        if decision.switch:
            job.clock += job.switch_cost_s
            manager.record_cost(decision.parts, job.switch_cost_s)
    return made


def make_manager(sp: KnobSpace, seed: int, **options) -> TuningManager:
    start = sp.start({"ps": 2, "worker": 1,
                      "intra_op_parallelism_threads": min(sp.values["intra_op_parallelism_threads"]),
                      "inter_op_parallelism_threads": min(sp.values["inter_op_parallelism_threads"]),
                      "global_jit_level": "ON_2"})
    options.setdefault("initial_iterations", 40)
    options.setdefault("random_settings", 10)
    options.setdefault("segment_iterations", 40)
    return TuningManager(sp, start, 0.33, lambda: get_estimator("hogwild"), min_segment_s=0, seed=seed, **options)
