"""A surface whose optimum the tuner's tests know, on the simulator (:mod:`tfonline.simulator`).

Time per iteration depends on the setting through a fixed formula (not
the calibrated speed model: the tests need an optimum they can compute);
convergence is the simulator's loss curve, ``0.3 + 0.4/(1 + k/300)`` after
progress k, written in Optimus's form, with its staleness. The simulator's
:class:`~tfonline.simulator.Segments` runs the segments and the switches,
as the driver does for the TensorFlow runner.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from tfonline.estimator import get_estimator
from tfonline.simulator import LossCurve, Segments, SpeedModel, Workload
from tfonline.simulator.model import FEATURES
from tfonline.tuner.manager import TuningManager
from tfonline.tuner.space import KnobSpace

NODES, CORES = 5, 4
PINNED = {"do_common_subexpression_elimination": True, "max_folded_constant_in_bytes": 10 * 1024 * 1024,
          "do_function_inlining": True, "infer_shapes": False, "place_pruned_graph": False,
          "enable_bfloat16_sendrecv": False}
SWITCH_COST_S = 0.1


def space(**restrict) -> KnobSpace:
    return KnobSpace(NODES, CORES, dict(PINNED, **restrict))


def seconds_per_iteration(s) -> float:
    """Best at 3 workers, 1 ps, the most intra-op threads, XLA off; inter-op threads matter little."""
    t = 0.01 * (1 + 0.35 * abs(s["worker"] - 3) + 0.25 * (s["ps"] - 1)
                + 0.1 * (CORES / s["intra_op_parallelism_threads"] - 1)
                + 0.02 * abs(s["inter_op_parallelism_threads"] - 2))
    return t * {"OFF": 1.0, "ON_1": 2.0, "ON_2": 4.0}[s["global_jit_level"]]


class KnownSurface(SpeedModel):
    """:func:`seconds_per_iteration` as the simulator's speed model (asynchronous: a step takes ``w`` times it)."""

    def __init__(self):
        super().__init__([0.0] * len(FEATURES), hosts=1, cores=CORES)

    def step_s(self, setting) -> float:
        return seconds_per_iteration(setting) * setting["worker"]


CURVE = LossCurve(b0=1 / 120, b1=2.5, b2=0.3, staleness=0.05, noise=0.02)  # 0.3 + 0.4/(1 + k/300)


def progress_per_iteration(s) -> float:
    """Staleness: more workers, a little less progress per (asynchronous) iteration."""
    return CURVE.progress_per_iteration(s, sync=False)


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


# A job of the calibrated speed model's form (9 coefficients: tfonline.simulator.FEATURES), with XLA compiles.
THETA = [0.004, 0.002, 0.001, 0.0005, 0.003, 0.0005, 0.002, 0.004, 0.012]
LONG = LossCurve(b0=1 / 400, b1=2.0, b2=0.3)  # about 6,000 iterations: room for a few decisions


def small_workload(**changes) -> Workload:
    """A 4-node job on one 2-core host that converges in about 2,000 iterations."""
    speed = SpeedModel(THETA, hosts=1, cores=2, compile_s={"ON_1": 3.0, "ON_2": 6.0})
    options = dict(name="SmallJob", nodes=4, speed=speed, curve=LossCurve(b0=1 / 100, b1=2.0, b2=0.3),
                   target_loss=0.36, model_bytes=1e6, start_s=2.0)
    options.update(changes)
    return Workload(**options)


def SimulatedJob(seed: int, target_loss: float = 0.33) -> Segments:
    """The known surface's job, segment by segment; a switch costs ``switch_cost_s`` (0.1 s)."""
    workload = Workload("KnownSurface", NODES, KnownSurface(), CURVE, target_loss=target_loss, model_bytes=0.0,
                        start_s=0.0, smoothing_window=19)  # the smoothed loss weighs a new loss 0.1
    return Segments(workload, seed, switch_cost_s=SWITCH_COST_S)


def make_manager(sp: KnobSpace, seed: int, target_loss: float = 0.33, **options) -> TuningManager:
    start = sp.start({"ps": 2, "worker": 1,
                      "intra_op_parallelism_threads": min(sp.values["intra_op_parallelism_threads"]),
                      "inter_op_parallelism_threads": min(sp.values["inter_op_parallelism_threads"]),
                      "global_jit_level": "ON_2"})
    options.setdefault("initial_iterations", 40)
    options.setdefault("random_settings", 10)
    options.setdefault("segment_iterations", 40)
    # Segments.drive runs segment_length() iterations (unless timed) and lets no time pass for the tuner's
    # decisions, so an overhead share means little to it: every decision fits the GP, as it would with all the time
    # it needs.
    options.setdefault("overhead_share", None)
    options.setdefault("min_segment_s", 0)
    return TuningManager(sp, start, target_loss, lambda: get_estimator("hogwild"), seed=seed, **options)


# A surface where time per iteration and iterations needed pull apart: async staleness 0.5 per extra worker.
# Per iteration, 4 workers are the fastest; per unit of progress, 2 workers are: 4 workers need 2.5/1.5 = 1.67x
# the iterations of 2.
STALE_T = {1: 0.02, 2: 0.011, 3: 0.009, 4: 0.008}


class StaleSurface(SpeedModel):
    def __init__(self):
        super().__init__([0.0] * len(FEATURES), hosts=1, cores=CORES)

    def step_s(self, setting) -> float:
        return STALE_T[setting["worker"]] * setting["worker"]


def stale_space() -> KnobSpace:
    return space(ps=1, intra_op_parallelism_threads=CORES, inter_op_parallelism_threads=2, global_jit_level="OFF")


def stale_job(seed: int) -> Segments:
    curve = LossCurve(b0=1 / 120, b1=2.5, b2=0.3, staleness=0.5, noise=0.02)
    workload = Workload("StaleSurface", NODES, StaleSurface(), curve, target_loss=0.305, model_bytes=0.0, start_s=0.0,
                        smoothing_window=19)
    return Segments(workload, seed, switch_cost_s=SWITCH_COST_S)


# The stale surface's times per iteration until half the progress to the target, then these: the fastest worker
# count moves from 4 to 2 (the "a simulated job whose best setting changes halfway"); no staleness.
MOVED_T = {1: 0.02, 2: 0.008, 3: 0.011, 4: 0.014}


@dataclass
class MovingWorkload(Workload):
    moves_at: float = math.inf  # the progress from which a segment runs at MOVED_T

    def draw(self, setting, n, progress, rng):
        gaps, steps, losses, after = super().draw(setting, n, progress, rng)
        if progress >= self.moves_at:
            factor = MOVED_T[setting["worker"]] / STALE_T[setting["worker"]]
            gaps, steps = gaps * factor, steps * factor
        return gaps, steps, losses, after


def moving_job(seed: int, target_loss: float = 0.305) -> Segments:
    """A job on :func:`stale_space` whose fastest worker count moves halfway (:data:`MOVED_T`)."""
    curve = LossCurve(b0=1 / 120, b1=2.5, b2=0.3, staleness=0.0, noise=0.02)
    workload = MovingWorkload("MovingOptimum", NODES, StaleSurface(), curve, target_loss=target_loss, model_bytes=0.0,
                              start_s=0.0, smoothing_window=19, moves_at=curve.progress_to(target_loss) / 2)
    return Segments(workload, seed, switch_cost_s=SWITCH_COST_S)


def known_surface_loop(seed: int, decisions: int = 40, **options) -> tuple[float, TuningManager, list, list[float]]:
    """The tuner's loop on the known surface from a start about 8x slower than the optimum, target 0.305 (a
    long job: switching pays): the start's distance from the optimum, the manager, its decisions, and the
    distance of the setting each decision leaves running (1.0 is the optimum)."""
    sp = space()
    manager = make_manager(sp, seed, 0.305, **options)
    best = optimum(sp)
    start = time_per_progress(manager.current) / best
    made = SimulatedJob(seed).drive(manager, decisions)
    return start, manager, made, [time_per_progress(d.candidate if d.switch else d.current) / best for d in made]
