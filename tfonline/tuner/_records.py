"""What the tuning loop exchanges with its driver, and the small models it keeps beside the GP.

- :class:`SegmentRun`: what a driver measured in one segment;
- :class:`Triple`: the paper's (setting, loss, R̂), with what it was made of;
- :class:`Decision`: what the tuner decided, and why;
- :func:`loss_trend`: the loss a triple and a suggestion are made at;
- :class:`CostModel`: the expected cost of a switch, learnt from measured ones.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Iterable, Sequence

import numpy as np

from tfonline.reconfig.plan import Plan
from tfonline.tuner.convergence import SegmentSlope

# Before any switch that changed a part (see switch_parts) has been measured,
# the part is taken to cost this many seconds, by its type: about what
# rebuilding the graphs and sessions of a small job takes on a local
# cluster; and for "compile" (turning XLA on), what the first step's
# compilation took for the LogR example: 5.5 s alone on this machine's 2
# cores, 15-50 s on a busy cluster (NOTES.md).
PRIOR_COST_S = {"I-a": 2.0, "I-b": 2.0, "II": 1.0, "compile": 10.0}
# The loss a triple and a suggestion are made at is the job's loss *trend*:
# a straight line fitted to the latest this many iterations, read at the
# segment's start (or end). A smoothed minibatch loss is too noisy for this:
# on LogR, segments a few hundred iterations apart started at 0.57 and 0.67
# with the trend near 0.62, and R̂ at a loss under the target is 0.
TREND_ITERATIONS = 500
# The line is read within the lowest and highest loss of its window. Read
# at the end of a window where the loss falls steeply and bends (a CNN's
# first 500 iterations), a straight line falls below every loss the window
# saw: the fresh CNN jobs of both quick benches of 2026-11-27 read trends of
# -0.17 and -0.04 there, a cross-entropy below 0, and their first online
# decisions saw "no iterations left". Held within the means of the window's
# ten blocks instead, the trend of a steadily falling loss was held up a
# block's worth above the line more often than not, and the simulated
# moving optimum was followed less (38 of 60 segments on the new best over
# 4 seeds, 49 unbounded; NOTES.md, thirty-third session).


@dataclass
class SegmentRun:
    """What a driver measured in one segment.

    Attributes:
        setting: the setting the segment ran under.
        steps, losses, walls: per iteration: global step, loss, wall-clock
            time when it finished.
        loss_before: the smoothed loss when the segment started.
        loss_now: the smoothed loss at its end.
        warmup: how many of the first iterations are warm-up after a switch,
            left out of the timing.
    """

    setting: dict[str, Any]
    steps: np.ndarray
    losses: np.ndarray
    walls: np.ndarray
    loss_before: float
    loss_now: float
    warmup: int = 0


@dataclass
class Triple:
    setting: dict[str, Any]
    loss_before: float
    per_iteration_s: float | None
    remaining_iterations: float | None
    remaining_s: float | None
    reason: str | None = None
    slope: SegmentSlope | None = None  # how the loss fell in the segment (its setting's convergence speed)
    speed: float | None = None  # ρ̃, the setting's speed relative to the job's curve, when R̂ was made
    distance: float = 0.0  # inherited: its job's workload distance from this one's (tfonline.tuner.inherit)
    source: str | None = None  # inherited: the job it came from; None: this job's own

    @property
    def usable(self) -> bool:
        return self.remaining_s is not None


@dataclass(frozen=True)
class GPFit:
    """The GP's fitted hyperparameters (:meth:`tfonline.tuner._gpyopt.GPOptimizer.fit`): its kernel's form (the
    names of its parameters), all its parameters' values, and the CPU time of the decision that fitted them.
    Recorded in the repository; a job that inherits from another starts from that job's latest
    (:mod:`tfonline.tuner.inherit`)."""

    form: tuple[str, ...]
    values: tuple[float, ...]
    cost_s: float


@dataclass(frozen=True)
class Decision:
    """What the tuner decided at a segment's end, as the driver carries it out and the repository records it.

    Immutable. ``plan`` is how the change from ``current`` to ``candidate``
    is carried out (:func:`tfonline.reconfig.plan`, technique "none" when
    they are equal): the change is classified once, by the manager that
    decided it, and the driver follows the plan. ``parts`` name what the
    switch changes as the cost model learns it.
    """

    phase: str
    current: dict[str, Any]
    candidate: dict[str, Any]
    switch: bool
    reason: str
    expected_improvement_s: float | None = None
    cost_s: float | None = None
    overhead_s: float = 0.0
    parts: tuple[str, ...] = ()
    plan: Plan | None = None
    gp_fit: GPFit | None = None  # the GP's hyperparameters, when this decision fitted them

    @property
    def types(self) -> tuple[str, ...]:
        """The paper's reconfiguration types of the change to the candidate."""
        return self.plan.types if self.plan is not None else ()


def loss_trend(steps: Sequence[float], losses: Sequence[float], at_step: float,
               iterations: int = TREND_ITERATIONS) -> float:
    """The least-squares line through the latest ``iterations`` losses, read at ``at_step``, held within the
    lowest and highest of those losses."""
    steps = np.asarray(steps[-iterations:], dtype=float)
    losses = np.asarray(losses[-iterations:], dtype=float)
    usable = np.isfinite(losses)
    steps, losses = steps[usable], losses[usable]
    if steps.size < 3 or np.ptp(steps) == 0:
        return float(np.mean(losses)) if losses.size else math.nan
    slope, intercept = np.polyfit(steps, losses, 1)
    return float(np.clip(slope * at_step + intercept, losses.min(), losses.max()))


class CostModel:
    """The expected cost of a switch, learnt per set of changed parts from measured costs.

    A part is a changed knob (:func:`tfonline.reconfig.switch_parts`).

    - A set of parts measured before costs the mean of its measurements.
    - Otherwise each part costs at most the cheapest measured switch that
      changed it (a switch costs at least as much as any of its parts), or
      the prior of its type (:data:`PRIOR_COST_S`) while none did; the
      switch costs the largest of those.

    Keying by knob rather than by type keeps one costly knob (XLA's compile)
    from making every other knob of its type look costly.
    """

    def __init__(self, prior: dict[str, float] | None = None):
        self.prior = dict(PRIOR_COST_S if prior is None else prior)
        self.measured: list[tuple[frozenset[str], float]] = []

    def record(self, parts: Iterable[str], cost_s: float) -> None:
        self.measured.append((frozenset(parts), float(cost_s)))

    def estimate(self, parts: dict[str, str]) -> float:
        """``parts``: each changed part and its type."""
        if not parts:
            return 0.0
        key = frozenset(parts)
        exact = [c for k, c in self.measured if k == key]
        if exact:
            return float(np.mean(exact))
        per_part = []
        for name, kind in parts.items():
            seen = [c for k, c in self.measured if name in k]
            per_part.append(min(seen) if seen else self.prior.get(kind, max(self.prior.values())))
        return max(per_part)
