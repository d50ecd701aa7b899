"""Exploring, and what it costs: the random phase's draws, and the price of an online exploration (the tuning
loop of :mod:`tfonline.tuner.manager`)."""

from __future__ import annotations

import math
import random
from typing import Any, Callable, Sequence

from tfonline.reconfig.plan import switch_parts
from tfonline.tuner._records import CostModel
from tfonline.tuner.space import KnobSpace


# Why a random phase ends when no untried setting is left (a user who pins all but the worker count has a few): it
# would otherwise wait for a draw that cannot come, and never reach the online phase.
EXHAUSTED = "every setting of the space has run"


def draw(space: KnobSpace, rng: random.Random, costs: CostModel, current: dict[str, Any],
         tried: Sequence[dict[str, Any]], ahead: dict[str, Any] | None, left: float | None, segment_s: float,
         tries: int = 64, waste: Callable[[list[dict[str, Any]]], Sequence[float]] | None = None,
         ) -> tuple[dict[str, Any] | None, dict[str, str], float, str]:
    """A random untried setting whose switch fits the exploration budget ``left``, chosen for what it teaches
    per second it costs; returns (setting or None, its switch's parts, their estimated cost, why the random
    phase ends now: :data:`EXHAUSTED` when no draw found an untried setting, else "").

    ``ahead``, the setting drawn ahead for the driver to prepare
    (:meth:`TuningManager.ahead`), is taken if it is untried and fits the budget and the nodes alive.
    Without a budget (``left`` None), draws are uniform over the space.
    With one, ``tries`` uniform draws are made, and those whose estimated
    cost exceeds the budget left are dropped. Of the rest, the one with the
    most *new values* (a knob at a value no tried setting had) per second it
    costs (the switch's estimated cost, XLA's compile included, plus the
    ``segment_s`` it runs for) is taken: cheap switches change few knobs,
    and without this a small budget spends itself on thread and optimizer
    knobs, and the GP never sees the layout vary (measured on LogR: three
    random settings, all at the starting layout); a costly one must teach
    more to be drawn. (The caller ends the random phase once the job is too
    far along: :meth:`tfonline.tuner.manager.TuningManager._draw`.)

    ``waste``, when given, says what share of its segment each candidate is
    predicted to lose against the best setting seen (:func:`segment_waste`):
    its segment then costs that share of ``segment_s``, not all of it. At the
    paper's scale, simulated, uniform draws ran layouts 2-10x slower than the
    best seen for whole segments, the largest part of a tuned job's time over
    the best fixed setting's (NOTES.md, twenty-third session).
    """
    def priced(candidate):
        parts = switch_parts(space.knobs, current, candidate)
        return candidate, parts, costs.estimate(parts), ""

    if ahead is not None and (ahead in tried or not space.fits(ahead)):
        ahead = None
    if left is None:
        candidate = ahead if ahead is not None else space.sample(rng, exclude=tried)
        return priced(candidate) if candidate not in tried else (None, {}, 0.0, EXHAUSTED)
    if ahead is not None and priced(ahead)[2] <= left:
        return priced(ahead)
    drawn = [priced(candidate) for candidate in (space.sample(rng, exclude=tried) for _ in range(tries))
             if candidate not in tried]
    if not drawn:  # each draw looked for an untried setting 100 times (KnobSpace.sample)
        return None, {}, 0.0, EXHAUSTED
    drawn = [(candidate, parts, cost) for candidate, parts, cost, _ in drawn if cost <= left]
    if not drawn:
        return None, {}, 0.0, ""
    lost = waste([candidate for candidate, _, _ in drawn]) if waste is not None else [1.0] * len(drawn)
    fitting = []
    for (candidate, parts, cost), share in zip(drawn, lost):
        new = sum(all(t.get(name) != value for t in tried) for name, value in candidate.items())
        fitting.append((new / (cost + share * segment_s + 1e-3), candidate, parts, cost))
    best = max(f[0] for f in fitting)
    return *rng.choice([f[1:] for f in fitting if f[0] == best]), ""


class Draws:
    """The random phase's draws (:func:`draw`): the next random setting, and the one drawn ahead for the driver
    to prepare; ``waste`` (:func:`segment_waste`, or None) prices them by the GP's times."""

    def __init__(self, space: KnobSpace, rng: random.Random, costs: CostModel, segment_s: float):
        self.space, self.rng, self.costs, self.segment_s = space, rng, costs, segment_s
        self.ahead: dict[str, Any] | None = None
        self.waste: Callable[[list[dict[str, Any]]], Sequence[float]] | None = None
        self.fitted_at = 0  # the observations when pricing a draw last fitted the GP's hyperparameters

    def refit(self, observations: int, due: bool) -> bool:
        """Whether pricing this draw fits the GP's hyperparameters (else it takes the latest fit's): when the
        overhead share has it ``due`` and the observations have doubled since the last draw that did (2, 4, 8:
        three fits in a random phase of 10, rather than nine)."""
        refit = due and observations >= 2 * self.fitted_at
        self.fitted_at = observations if refit else self.fitted_at
        return refit

    def next(self, current: dict[str, Any], tried: Sequence[dict[str, Any]], left: float | None):
        """The next random setting (the one drawn ahead when it fits): (setting or None, parts, cost, why the
        random phase ends now: "" unless every setting of the space has run)."""
        ahead, self.ahead = self.ahead, None
        return draw(self.space, self.rng, self.costs, current, tried, ahead, left, self.segment_s, waste=self.waste)

    def prepared(self, current: dict[str, Any], tried: Sequence[dict[str, Any]], left: float | None) -> dict[str, Any]:
        """The setting drawn ahead, drawn now if there is none yet or it no longer fits the nodes alive."""
        if self.ahead is None or not self.space.fits(self.ahead):  # without a budget, draw() samples uniformly
            drawn = draw(self.space, self.rng, self.costs, current, tried, None, left, self.segment_s,
                         waste=self.waste)[0]
            self.ahead = drawn or self.space.sample(self.rng, exclude=tried)
        return dict(self.ahead)


def segment_waste(fitted, best_s: float, timed: bool = False) -> Callable[[list[dict[str, Any]]], list[float]]:
    """What each setting is predicted to lose against the best setting seen, which runs at ``best_s`` per
    iteration, by the GP's mean time per iteration t (``fitted``, a :class:`~tfonline.tuner._gpyopt.Fitted`), as
    a share of :class:`Draws`' ``segment_s``, at least 0: a segment of fixed seconds loses 1 − best_s / t of them;
    a ``timed`` one, of fixed iterations (:class:`~tfonline.timing.Timing`; ``segment_s`` is then their time at
    ``best_s``), loses t / best_s − 1 times that. Measured at the paper's scale, simulated: random segments
    timed but priced as if they lasted ``min_segment_s`` (120 s, where they ran about 6 s) gave 4,098-4,229 s a job
    (three runs), priced as timed 3,821-3,864 s (two; NOTES.md, 2026-11-26): a switch's cost, an XLA compile's
    above all, is most of what a timed random setting costs.

    A time that is not a positive number is no prediction: that setting is priced as draws are without the
    GP, at its whole segment. (At the paper's scale, simulated, a fit reused on new observations
    predicted a setting at exp(-1734) s per iteration, 0 in floats, and the division failed the job's tuner:
    tests/gp_reused_fit_case.json.)"""
    def lost(t: float) -> float:
        return t / best_s - 1.0 if timed else 1.0 - best_s / t

    def shares(settings: list[dict[str, Any]]) -> list[float]:
        return [max(0.0, lost(t)) if 0.0 < t < math.inf else 1.0 for t in map(float, fitted.seconds(settings))]
    return shares


def explore_price(prediction, cost: float, current_s: float, iterations_left: float,
                  segment_iterations: int | None, min_segment_s: float, held_s: float = 0.0) -> float:
    """What exploring a candidate costs: its switch, and as likely as it is worse, one segment's loss
    (the GP's mean slowdown over a segment of the current length, or of ``held_s``, the seconds the tuner's
    overhead share holds the next segment to, if longer) and the switch back. A tuned CNN job explored a
    setting predicted 19 s slower, priced at 0.84 s for a segment of 2 s, right after a GP fit of 3.6 s of
    CPU: the share held that segment 170 s (NOTES.md, thirty-second session)."""
    slowdown = max(0.0, prediction.remaining_s / current_s - 1.0) if current_s > 0 else 0.0
    per_iteration = current_s / iterations_left
    iterations = segment_iterations or 3 * int(prediction.setting["worker"])
    segment_s = max(min_segment_s, iterations * per_iteration, held_s)
    return cost + (1.0 - prediction.confidence) * (slowdown * segment_s + cost)
