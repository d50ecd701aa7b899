"""What a tuned job has measured so far: its loss history, its wall time, its triples and its curve.

The tuning loop (:mod:`tfonline.tuner.manager`) decides on these; they are
kept apart from its decisions because everything here is measurement: a
segment becomes a triple, ``(setting, loss before, R̂)``, and the settings'
convergence speeds are refitted from the triples against the job's latest
curve (:mod:`tfonline.tuner.convergence`).
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Callable, Sequence

import numpy as np

from tfonline._columns import Columns
from tfonline.estimator import BaseEstimator
from tfonline.timing import per_iteration_time
from tfonline.tuner._gpyopt import Observation
from tfonline.tuner._records import TREND_ITERATIONS, SegmentRun, Triple, loss_trend
from tfonline.tuner.budget import latest_own
from tfonline.tuner.convergence import Reference, Speeds, segment_slope, speed_key


class JobHistory:
    """A tuned job's measurements.

    Args:
        target_loss: the job's target.
        make_estimator: returns a fresh progress estimator (the job's curve).
        names: the knobs a setting's convergence speed depends on (:func:`~tfonline.tuner.convergence.speed_names`).
        triples: triples of earlier runs of the same job (resuming, or inherited).
    """

    def __init__(self, target_loss: float, make_estimator: Callable[[], BaseEstimator], names: Sequence[str],
                 triples: Sequence[Triple] = ()):
        self.target_loss = target_loss
        self.make_estimator = make_estimator
        self.names = tuple(names)
        self.triples: list[Triple] = list(triples)
        self._losses = Columns(2)  # the job's loss history: steps and losses
        self.reference: Reference | None = None  # the job's curve, as the latest estimator fit describes it
        self._walls: list[float] = []  # the first and the latest wall time seen
        self._first_loss: float | None = None  # the loss before this run's first segment
        self._speeds: tuple | None = None  # (triples, reference, their Speeds): one fit serves a whole decision
        self._eta: tuple[float, float] | None = None  # (step, iterations left): the ETA's latest answer with a prior

    def add(self, triple: Triple) -> None:
        """Keeps a triple of this job's (:meth:`triple`)."""
        self.triples.append(triple)
        if self._first_loss is None:
            self._first_loss = triple.loss_before

    def observe(self, run: SegmentRun) -> None:
        """Adds a run's iterations to the job's loss history and elapsed time."""
        self._losses.extend(run.steps, run.losses)
        if len(run.walls):
            self._walls = [self._walls[0] if self._walls else float(run.walls[0]), float(run.walls[-1])]

    def forget_after(self, step: int) -> None:
        """The job went back to ``step``: its loss history after it is forgotten (the triples stay)."""
        self._losses.cut_after(step)

    @property
    def steps(self) -> np.ndarray:
        """The steps of the job's loss history (a copy)."""
        return self._losses.columns()[0]

    @property
    def losses(self) -> np.ndarray:
        """The losses of the job's loss history (a copy)."""
        return self._losses.columns()[1]

    def _trend(self, at_step: float) -> float:
        return loss_trend(*self._losses.columns(TREND_ITERATIONS), at_step)

    @property
    def elapsed_s(self) -> float:
        """Wall time from the first iteration seen to the latest."""
        return self._walls[1] - self._walls[0] if self._walls else 0.0

    def loss_now(self, run: SegmentRun) -> float:
        """The job's loss trend at its latest iteration (:func:`loss_trend`), or the driver's smoothed loss
        before any history."""
        return self._trend(self._losses.row(-1)[0]) if len(self._losses) else run.loss_now

    def triple(self, run: SegmentRun) -> Triple:
        """``(setting, loss before, R̂)``, R̂ = time per iteration × the iterations its setting still needs.

        The iterations are the job's curve's from the loss before (the
        estimator, fitted to the segment and the job's history: the job's
        :class:`~tfonline.tuner.convergence.Reference`, kept as
        :attr:`reference`), over the setting's convergence speed relative
        to that curve (:mod:`tfonline.tuner.convergence`). The loss before
        is the job's loss trend at the segment's start (:func:`loss_trend`)
        once the job has a history, else the driver's smoothed loss. A
        triple whose loss is already at the target has no R̂ to learn from
        (0) and is not usable; its time per iteration and slope still inform
        its setting.
        """
        loss_before = self._trend(run.steps[0] - 1) if len(self._losses) else run.loss_before
        per_iteration_s = per_iteration_time(run.walls, run.warmup)
        slope = segment_slope(run.steps, run.losses)
        if per_iteration_s is None:
            return Triple(run.setting, loss_before, None, None, None, "fewer than 3 timed iterations", slope)
        if not loss_before > self.target_loss:
            return Triple(run.setting, loss_before, per_iteration_s, None, None,
                          f"the loss trend {loss_before:.4g} is already at the target {self.target_loss:g}", slope)
        estimator = self.make_estimator()
        history = self._losses.columns() if len(self._losses) else None
        estimator.fit(run.steps, run.losses, history=history)
        reference = Reference(estimator, self.target_loss)
        remaining = reference.iterations_left(loss_before)
        if remaining is None:
            return Triple(run.setting, loss_before, per_iteration_s, None, None, estimator.reason, slope)
        self.reference = reference
        triple = Triple(run.setting, loss_before, per_iteration_s, None, None, None, slope)
        speed = self.speeds([triple]).at(speed_key(run.setting, self.names), loss_before).value
        return replace(triple, remaining_iterations=remaining / speed, remaining_s=remaining / speed * per_iteration_s,
                       speed=speed)

    def speeds(self, extra: Sequence[Triple] = ()) -> Speeds:
        """The settings' convergence speeds, from every segment so far (and ``extra``), against the latest
        reference. Without ``extra`` they are fitted once per set of triples and reference: a decision asks for
        them up to four times (the GP's speeds, the measured rules, a speed trial)."""
        if not extra and self._speeds is not None and self._speeds[:2] == (len(self.triples), id(self.reference)):
            return self._speeds[3]
        triples = list(self.triples) + list(extra)
        first = max([t.loss_before for t in triples if math.isfinite(t.loss_before)] + [self._first_loss or -math.inf])
        keys = [speed_key(t.setting, self.names) for t in triples]
        speeds = Speeds(keys, [t.slope for t in triples], self.reference, first, [t.source for t in triples])
        if not extra:  # the reference is kept with them, so its id is not reused while they are
            self._speeds = (len(self.triples), id(self.reference), self.reference, speeds)
        return speeds

    def eta_answered(self, step: float, iterations_left: float) -> None:
        """The job's ETA, which took the job's earlier runs (:mod:`tfonline.estimator._prior`), answered
        ``iterations_left`` at ``step``: from now on the job's time left is read from it (:meth:`remaining_s`).
        Called from the driver's monitor thread; one assignment, so the tuner's thread reads one answer whole."""
        if math.isfinite(iterations_left) and iterations_left >= 0:
            self._eta = (float(step), float(iterations_left))

    def remaining_s(self) -> float | None:
        """The job's estimated time left; None before its first R̂.

        The latest R̂, the job's curve's iterations left at the current
        setting's speed and time per iteration. Once the job's ETA has
        answered with its earlier runs (:meth:`eta_answered`), the
        iterations are that answer's instead, less those run since, at the
        latest R̂'s time per iteration: the runs' iterations were a better
        guess than the curve's on the benchmark's runs (the curve alone was
        off by a median 24-30% at a quarter of a run, the ETA with them
        3-13%; README, "The ETA").
        """
        latest = latest_own(self.triples)
        if latest is None or self._eta is None or not len(self._losses):
            return None if latest is None else latest.remaining_s
        step, left = self._eta
        return max(0.0, left - (self._losses.row(-1)[0] - step)) * latest.per_iteration_s

    def time_share(self) -> float:
        """The job's estimated share of its time so far: elapsed / (elapsed + :meth:`remaining_s`); 0 before."""
        remaining, elapsed = self.remaining_s(), self.elapsed_s
        return elapsed / (elapsed + remaining) if remaining is not None and elapsed > 0 else 0.0

    def observations(self) -> list[Observation]:
        """Every timed triple as the GP sees it: (setting, loss, time per iteration)."""
        return [Observation(t.setting, t.loss_before, t.per_iteration_s, t.distance, t.source or "")
                for t in self.triples if t.per_iteration_s is not None and math.isfinite(t.loss_before)]
