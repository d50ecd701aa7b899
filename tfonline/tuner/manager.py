"""The tuning loop of the paper's §III (DESIGN §3), independent of how settings are applied.

A driver (the TensorFlow runner, or a simulator in the tests) runs the job in
*segments*: iterations under one setting. At the end of each it hands the
:class:`TuningManager` a :class:`SegmentRun`; the manager turns it into a
triple ``(setting, loss before, R̂)``, decides the next setting, and returns a
:class:`Decision`, which carries its :class:`~tfonline.reconfig.Plan`. The
driver carries the plan out through a :class:`~tfonline.reconfig.Reconfig`
backend and reports the measured cost back with
:meth:`TuningManager.record_cost`.

Phases:

1. ``initial``: ``initial_iterations`` (I0) iterations under the starting
   setting.
2. ``random``: ``random_settings`` (N, the paper's 10) random settings of the
   space, each for one segment. When none fits the exploration budget left,
   the job waits (it may still exploit, as online) and draws again later:
   the budget grows with the job. The phase ends early once the job is
   too far along its estimated time for a random setting to pay off
   (:meth:`TuningManager.time_share`), or once every setting of the space
   has run (:data:`~tfonline.tuner.explore.EXHAUSTED`).
3. ``online``: every segment, the GP is refitted and EI maximised at the
   current loss. The job switches when the switch confidently pays by the
   GP's mean (to s* or to the best setting seen; *exploit*), or when EI(s*)
   exceeds the estimated cost of that reconfiguration and the exploration
   budget covers it (*explore*, the paper's gate). See :meth:`TuningManager._online`.
   When no switch exploits and the current setting's time per iteration
   rose within its stint, the settings that may now beat it are measured
   again first (:mod:`tfonline.tuner.recheck`): the GP alone read such a
   rise as the whole job slowing, and stayed. A random setting the job has
   just measured is left for the best setting seen by the GP's mean, or,
   when that shows no gain worth it (a flat fit), by measured times; a
   setting a decision chose is left by measured times after its first
   segment, before the GP guesses again. When none of that switches, another
   worker count that may finish sooner by its convergence speed's
   uncertainty is run for one stint long enough to measure it, and the two
   stints then decide (a *speed trial*, :mod:`tfonline.tuner.trial`).

Exploring, in the random phase and online, spends from one budget: a
fraction of the job's estimated length (:meth:`TuningManager.exploration_left`).

A segment lasts ``segment_iterations`` iterations (the paper's I = 3 ×
workers when None) *and* at least ``min_segment_s`` seconds. The second
bound is ours: here an iteration takes milliseconds, and a segment of six
iterations measures nothing but noise. A random setting's segment is the
exception: it is there to time its setting for the GP (one segment hardly
measures how fast a setting converges), so once the job's segments have
shown how noisy their timing is, it lasts the iterations that time it
within :data:`~tfonline.timing.TIMING_PRECISION`, up to ``min_segment_s``
at the latest segment's pace (about the segment it replaced), and its draw is
priced over those iterations (at the paper's scale, simulated, a whole
120-s segment per random setting was most of a tuned job's time over the
best fixed setting's). Also ours: in the online phase, each decision to
stay doubles the next segment's length (both bounds, up to
:data:`~tfonline.tuner.lengths.MAX_STRETCH` times), and a switch resets it. A job that has settled
then pays for a GP fit every 16 s rather than every 2 s; the paper refits
every I iterations.

The tuner's decisions may take ``overhead_share`` of the job (its thread's
CPU time over the job's elapsed time, 2% by default). Nearly all of a
decision's cost is fitting the GP's hyperparameters, so a decision refits
them only when the share so far pays for one more fit; the others condition
the GP on the new observations with the latest fit's hyperparameters, at a
tenth of the cost (a fit blind to the setting is refitted at the next
decision with a new observation: :attr:`~tfonline.tuner._gpyopt.GPOptimizer.blind`).
A segment but a random setting's also lasts until the tuner's time so far
is back within its share (:class:`~tfonline.tuner.budget.OverheadBudget`).
Before, every decision refitted and the next segment lasted 50 times that
decision: on the sweep benchmark's CNN jobs, 0.6-2.4 s of CPU per decision
made segments of 30-120 s, and a 5-minute job decided 5 times, one of them
to explore a setting 2.3x slower for 118 s.
"""

from __future__ import annotations

import math
import random
import statistics
import time
from dataclasses import replace
from functools import partial
from typing import Any, Callable, Sequence

from tfonline.estimator import BaseEstimator
from tfonline.exceptions import ConfigurationError
from tfonline.setting import setting_key
from tfonline.tuner._gpyopt import GPOptimizer, SpeedOf
from tfonline.tuner.convergence import Reference, Speeds, speed_key, speed_names
from tfonline.tuner._records import CostModel, Decision, GPFit, SegmentRun, Triple
from tfonline.tuner.budget import ExplorationBudget, OverheadBudget, best_time
from tfonline.tuner.explore import Draws, explore_price, segment_waste
from tfonline.reconfig.plan import COMPILING_KNOBS, Plan, plan, switch_parts
from tfonline.tuner.lengths import SegmentLengths
from tfonline.tuner.recheck import (FIRST_RUN, RANDOM_SETTING, Survey, first_run, mean_times, measured_way_out,
                                    segment_noise, sooner_beyond_noise)
from tfonline.tuner.history import JobHistory
from tfonline.tuner.space import KnobSpace
from tfonline.tuner.trial import Trials

# Exploring (random settings, and online switches made on EI alone) may spend
# this fraction of the job's estimated length (ExplorationBudget). It was 20%
# until 2026-11-24; on the 1-minute benchmark jobs, whose start setting was
# about the best, that let tuned jobs take up to 1.27x its time, and 8% did
# no worse in simulation at the paper's scale (README, "Let it tune itself").
EXPLORATION_BUDGET = 0.08
# An online switch exploits (needs no budget) when the GP is at least this
# sure that the candidate is better than the current setting.
CONFIDENCE = 0.8
# Going back to a setting the job left in the last RECENT_DECISIONS decisions
# for one predicted better needs this much confidence, and the job's segments
# must show it faster beyond their noise at that confidence (_exploits);
# exploring never goes back to one (TuningManager.left_recently): evidence
# beyond the noise it was left on (a resumed job ping-ponged 11 times between
# two layouts).
RECENT_DECISIONS = 2
RETURN_CONFIDENCE = 0.95
RETURN_Z = statistics.NormalDist().inv_cdf(RETURN_CONFIDENCE)
BEST_SEEN = "the best setting seen"  # the online candidate that is the observed setting predicted best
# The tuner's decisions (the GP's fits, mostly) may take at most this share of
# the job: a segment lasts at least 1/OVERHEAD_SHARE times the latest decision.
OVERHEAD_SHARE = 0.02
def check_options(initial_iterations, random_settings, segment_iterations, min_segment_s,
                  exploration_budget=EXPLORATION_BUDGET, overhead_share=OVERHEAD_SHARE) -> None:
    """Fails early (before any cluster starts) on bad tuning options."""
    for name, value, low in (("initial_iterations", initial_iterations, 1), ("random_settings", random_settings, 0)):
        if isinstance(value, bool) or not isinstance(value, int) or value < low:
            raise ConfigurationError(f"{name} must be an integer >= {low}, got {value!r}")
    if segment_iterations is not None and (isinstance(segment_iterations, bool)
                                           or not isinstance(segment_iterations, int) or segment_iterations < 3):
        raise ConfigurationError(f"segment_iterations must be an integer >= 3 or None, got {segment_iterations!r}")
    if isinstance(min_segment_s, bool) or not isinstance(min_segment_s, (int, float)) or not min_segment_s >= 0:
        raise ConfigurationError(f"min_segment_s must be a number >= 0, got {min_segment_s!r}")
    if exploration_budget is not None and (isinstance(exploration_budget, bool)
                                           or not isinstance(exploration_budget, (int, float))
                                           or not 0 <= exploration_budget <= 1):
        raise ConfigurationError(
            f"exploration_budget must be a fraction between 0 and 1, or None, got {exploration_budget!r}")
    if overhead_share is not None and (isinstance(overhead_share, bool) or not isinstance(overhead_share, (int, float))
                                       or not 0 < overhead_share <= 1):
        raise ConfigurationError(f"overhead_share must be a fraction > 0 and <= 1, or None, got {overhead_share!r}")


def _priced(suggestion, knobs, current: dict[str, Any], costs: CostModel,
            left_recently: Callable[[dict[str, Any]], bool]) -> list[tuple]:
    """A suggestion's candidates that differ from ``current``: (name, prediction, EI or None, the switch's
    parts, its estimated cost, whether the job left that setting recently)."""
    names = ["s*", "s* with XLA held off"]
    options = [(name, c.prediction, c.expected_improvement_s) for name, c in zip(names, suggestion.candidates)]
    if suggestion.best_known is not None:
        options.append((BEST_SEEN, suggestion.best_known, None))
    priced = []
    for name, prediction, option_ei in options:
        parts = switch_parts(knobs, current, prediction.setting)
        if parts:
            priced.append((name, prediction, option_ei, parts, costs.estimate(parts),
                           left_recently(prediction.setting)))
    return priced


def _exploits(priced: list[tuple], triples: Sequence[Triple], current: dict[str, Any], speed: SpeedOf) -> list[tuple]:
    """The priced candidates (:func:`_priced`) a switch may exploit: the GP's mean gain exceeds the switch's
    cost, it is :data:`CONFIDENCE` sure the candidate is better, and the candidate's compiling knobs (XLA) are
    at levels some setting of ``triples`` (or ``current``) had: the GP knows nothing of a level never run, and a
    wrong guess there costs a compile. In the sweep benchmark, a CNN job predicted hundreds of seconds slower on
    3 workers than on any other count "exploited" 2 workers with XLA, never run by it or the jobs before it, and
    trained 72 s at 1.4x the time per iteration of the same layout without XLA. Such a switch may still explore.

    Going back to a setting left recently needs :data:`RETURN_CONFIDENCE`, and the job's own segments must
    show it sooner than the current one beyond their noise at that confidence
    (:func:`~tfonline.tuner.recheck.sooner_beyond_noise`; ``speed``: the convergence speeds, as the GP read
    them). A tuned CNN job went back and forth five times between two settings that differed in common
    subexpression elimination alone, each time "100% sure" of a gain of 1-15 s, on a GP whose only fit had
    seen 9 observations; the two ran 0.073-0.078 s per iteration alike (NOTES.md, thirty-second session)."""
    levels = {(name, s.get(name)) for s in [t.setting for t in triples] + [current] for name in COMPILING_KNOBS}

    def log_speed(setting):
        return speed.log(speed_key(setting, speed.names))

    def may(p):
        return not p[5] or sooner_beyond_noise(triples, current, p[1].setting, log_speed, shared=(
            speed_key(current, speed.names) == speed_key(p[1].setting, speed.names)), z=RETURN_Z)
    return [p for p in priced
            if p[1].gain_s > p[4] and p[1].confidence >= (RETURN_CONFIDENCE if p[5] else CONFIDENCE) and may(p)
            and all((name, p[1].setting.get(name)) in levels for name in COMPILING_KNOBS)]


def _allowed(space: KnobSpace, left_recently: Callable[[dict[str, Any]], bool], setting: dict[str, Any]) -> bool:
    """Whether the job may switch to ``setting`` on measured times: it fits the nodes alive, and was not left
    recently."""
    return space.fits(setting) and not left_recently(setting)


class TuningManager:
    """Decides, segment by segment, which setting the job runs next.

    Args:
        space, start, target_loss: the knobs and domains to search, the (resolved) starting setting, the target.
        make_estimator: returns a fresh progress estimator.
        initial_iterations, random_settings, segment_iterations: I0, N and I (None: 3 × the setting's workers).
        min_segment_s: the least duration of a segment.
        exploration_budget: the fraction of the job's estimated remaining time
            (R̂ of the initial segment) the random phase may spend on
            switches; None: no limit (the paper's random phase).
        overhead_share: the share of the job the tuner's decisions may take
            (:class:`~tfonline.tuner.budget.OverheadBudget`); None: every
            decision refits the GP, and segments are as short as the other
            options say.
        seed: seeds the random phase and the GP.
        history: triples of earlier runs of the same job (resuming).
        gp_fit: an earlier job's GP fit to start from (:mod:`tfonline.tuner.inherit`).
    """

    def __init__(self, space: KnobSpace, start: dict[str, Any], target_loss: float,
                 make_estimator: Callable[[], BaseEstimator], *, initial_iterations: int = 50,
                 random_settings: int = 10, segment_iterations: int | None = None, min_segment_s: float = 2.0,
                 seed: int = 0, history: Sequence[Triple] = (), cost_model: CostModel | None = None,
                 exploration_budget: float | None = EXPLORATION_BUDGET, technique: str = "online",
                 overhead_share: float | None = OVERHEAD_SHARE, speed_prior: bool = False,
                 gp_fit: GPFit | None = None):
        check_options(initial_iterations, random_settings, segment_iterations, min_segment_s, exploration_budget,
                      overhead_share)
        self.overhead = OverheadBudget(overhead_share)
        self.space = space
        self.technique = technique  # how the driver switches (run(reconfig=...)): each decision's plan uses it
        self.current = dict(start)
        self.random_settings = random_settings
        self.lengths = SegmentLengths(initial_iterations, segment_iterations, min_segment_s, self.overhead)
        self.budget = ExplorationBudget(exploration_budget)
        self.draws = Draws(space, random.Random(seed), cost_model or CostModel(), self.lengths.min_segment_s)
        self.optimizer = GPOptimizer(space, seed, speed_prior) if space.free else None
        self.costs = self.draws.costs
        self.history = JobHistory(target_loss, make_estimator, speed_names(space), history)
        if gp_fit is not None and self.optimizer is not None:  # an earlier job's: the first decision need not fit
            self.optimizer.adopt(gp_fit.form, gp_fit.values)
            self.overhead.adopted(gp_fit.cost_s, len(self.history.observations()))
        self.triples = self.history.triples  # the paper's triples: this job's, and those it started from
        self.random_done = 0
        # Inherited (or resumed) observations, each worth exp(-distance) of this job's own, shorten the
        # random phase by their weight's whole part: a weight of random_settings or more skips it
        # (tfonline.tuner.inherit).
        self.phase = "initial"
        self.inherited_weight = sum(math.exp(-t.distance) for t in self.triples)
        self.random_settings = max(0, random_settings - int(self.inherited_weight))
        self.decisions = 0
        self._left_at: dict[str, int] = {}  # each setting the job left, and the decision that left it
        self._judged_worse = False  # the switch being decided leaves a setting the GP predicts worse by its cost
        self._refitted, self._waiting = False, False  # the decision being taken fitted the GP; stays but waits
        self._started = 0.0  # its thread's CPU time when it began
        self.survey = Survey()  # settings measured again once the current one is seen to change
        self.trials = Trials(speed_names(space))  # another worker count run long enough to measure its speed

    # -- segment lengths -------------------------------------------------------

    def segment_length(self) -> int:
        """Iterations the current segment should run; it lasts :meth:`segment_seconds` too (:class:`SegmentLengths`)."""
        if self.trials.pending:
            return self.trials.iterations
        return self.lengths.iterations(self.phase, self.current["worker"])

    def segment_seconds(self) -> float:
        """The least duration of the current segment (:class:`SegmentLengths`)."""
        return self.lengths.seconds(self.elapsed_s)

    @property
    def overhead_s(self) -> float:
        """The CPU time the tuner's decisions have taken."""
        return self.overhead.spent_s

    # -- the loop ----------------------------------------------------------------

    def on_segment_end(self, run: SegmentRun) -> Decision:
        """Turns a finished segment into a triple and decides what runs next.

        The decision's overhead is the CPU time it took (its thread's): what
        it takes from the job's training. Its wall time is longer on a busy
        machine, where the tuner's thread waits for a core while the workers
        train on (the LogR benchmark: 2.0 s of CPU, 6.5 s of wall time).
        """
        self._started, self._refitted, self._waiting = time.thread_time(), False, False
        triple = self.history.triple(run)
        self.history.add(triple)
        self.history.observe(run)
        self.lengths.timing.segment_ended(run.walls, run.warmup)
        self.budget.segment_ended(triple.per_iteration_s, max(0, len(run.walls) - run.warmup - 1))
        self.trials.segment_ended(len(run.steps))
        decision = self._decide(run)
        decision = replace(decision, overhead_s=time.thread_time() - self._started,
                           plan=plan(self.space.knobs, decision.current, decision.candidate, self.technique))
        self.overhead.decided(decision.overhead_s, self._refitted, len(self.history.observations()))
        if self._refitted and self.optimizer.latest_fit is not None:
            decision = replace(decision, gp_fit=GPFit(*self.optimizer.latest_fit, decision.overhead_s))
        self.decisions += 1
        self.trials.decided(decision)
        if decision.switch:
            if self._judged_worse:
                self._left_at[setting_key(self.current)] = self.decisions
            self.current = dict(decision.candidate)
        self._judged_worse, self.lengths.unmeasured = False, setting_key(self.current) not in mean_times(self.triples)
        return decision

    def moved_to(self, setting: dict[str, Any], back_to: int | None = None) -> None:
        """The job runs ``setting`` now, not by the tuner's decision (a node was lost); with ``back_to``, it
        went back to that step: the loss history after it is forgotten (the triples stay)."""
        self.current, self.draws.ahead, self.lengths.timing.random = dict(setting), None, False
        self.trials.cancel()
        if back_to is not None:
            self.history.forget_after(back_to)

    def observe(self, run: SegmentRun) -> None:
        """Adds a run's iterations to the job's loss history and elapsed time (:class:`JobHistory`). The runner
        calls this alone for iterations that make no triple: those trained under the old setting while the
        tuner decided to leave it."""
        self.history.observe(run)

    @property
    def target_loss(self) -> float:
        return self.history.target_loss

    @target_loss.setter
    def target_loss(self, value: float) -> None:
        self.history.target_loss = value

    @property
    def reference(self) -> Reference | None:
        """The job's curve, as the latest estimator fit describes it."""
        return self.history.reference

    @property
    def elapsed_s(self) -> float:
        """Wall time from the first iteration this manager saw to the latest."""
        return self.history.elapsed_s

    def speeds(self) -> Speeds:
        """The settings' convergence speeds, from every segment so far (:meth:`JobHistory.speeds`)."""
        return self.history.speeds()

    def _decide(self, run: SegmentRun) -> Decision:
        current = self.current
        if self.phase == "initial":
            self.phase = "online" if self.random_settings == 0 else "random"
        elif self.phase == "random" and self.random_done >= self.random_settings:
            self.phase = "online"
        ended = ""
        if self.phase == "random":
            candidate, parts, cost, left, late = self._draw(current)
            if candidate is not None:
                self.random_done, self.lengths.timing.random = self.random_done + 1, True
                self.budget.explore(self.best_per_iteration_s())  # its cost, and its segment against the best seen
                self.lengths.decided(switch=True)
                budget = "" if left is None else f"; estimated cost {cost:.3g} s of {left:.3g} s left to explore"
                return Decision("random", current, candidate, candidate != current,
                                f"initialisation: random setting {self.random_done} of {self.random_settings}{budget}",
                                cost_s=cost, parts=tuple(sorted(parts)))
            if late:
                self.phase = "online"
                ended = f"random phase ended after {self.random_done} random setting(s): {late}; "
            else:
                # The budget grows with the job (exploration_left): draw again later.
                decision = self._online(run, explore=False)
                decision = replace(decision, phase="random", reason=(
                    f"random setting {self.random_done + 1} of {self.random_settings} waits: no untried setting's "
                    f"switch fits the {left:.3g} s of exploration budget left; {decision.reason}"))
        if self.phase == "online":
            decision = self._online(run)
            decision = replace(decision, reason=ended + decision.reason)
        self.lengths.decided(decision.switch, settled=not self._waiting)
        return decision

    def _draw(self, current: dict[str, Any]):
        """The next random setting (:class:`~tfonline.tuner.explore.Draws`): (setting or None, its switch's parts,
        their estimated cost, the budget left or None, why the random phase ends now or ""); priced by the GP's
        times from two observations on, while the overhead share pays for a fit (:func:`segment_waste`)."""
        left = self.exploration_left()
        if left is not None and self.time_share() >= 1 - self.budget.fraction:
            self.draws.ahead = None
            return None, {}, 0.0, left, (f"the job is an estimated {self.time_share():.0%} through its time, too "
                                         "late for a random setting to pay off")
        observations, best = self.history.observations(), self.best_per_iteration_s()
        timed = self.lengths.timing.needed if best else None  # a random segment's iterations; seconds at best's pace
        self.draws.waste, self.draws.segment_s = None, self.lengths.min_segment_s if timed is None else timed * best
        if self.optimizer and len(observations) > 1 and best and self.overhead.affords_fit(self.elapsed_s):
            fitted = self.optimizer.fit_seeded(observations, observations[-1].loss, current, self.draws.refit(
                len(observations), self.overhead.refit_due(self.elapsed_s)))
            self._refitted, self.draws.waste = fitted.refitted, segment_waste(fitted, best, timed is not None)
        candidate, parts, cost, ended = self.draws.next(current, [t.setting for t in self.triples] + [current], left)
        return candidate, parts, cost, left, ended

    def ahead(self) -> tuple[dict[str, Any], Plan] | None:
        """The random setting the next random segment will likely run, and its plan, for the driver to prepare
        while the current segment runs (None outside the random phase)."""
        if self.phase != "random" or self.random_done >= self.random_settings:
            return None
        ahead = self.draws.prepared(self.current, [t.setting for t in self.triples] + [self.current],
                                    self.exploration_left())
        return ahead, plan(self.space.knobs, self.current, ahead, self.technique)

    def time_share(self) -> float:
        """The job's estimated share of its time so far (:meth:`JobHistory.time_share`)."""
        return self.history.time_share()

    def _online(self, run: SegmentRun, explore: bool = True) -> Decision:
        """Refit, then: exploit when a switch confidently pays, else explore when EI pays for its price, else stay.

        The candidates are s*, the EI maximiser; while XLA is off, s* with
        XLA held off (turning it on costs a compile, and a gate that refuses
        s* every time would leave the cheap knobs unexplored); and the
        setting seen so far that the GP predicts best at today's loss.

        - A setting a decision chose, just run for the first time, is left for
          the best setting seen when it measures over 15% slower per unit of
          progress: the GP was wrong there (:func:`~tfonline.tuner.recheck.first_run`).
        - A switch *exploits* when the GP's mean gain (current R̂ −
          candidate R̂) exceeds the switch's estimated cost and the GP is at
          least :data:`CONFIDENCE` sure the candidate is better (:data:`RETURN_CONFIDENCE`
          for a setting left recently); the largest net gain wins
          (:func:`_exploits`). Off a random setting no decision has judged
          yet, the best setting seen needs no confidence, only a mean gain
          above the switch's cost: the random setting was drawn, not chosen
          (a tuned LogR run stayed its last 19 s on one 40% slower than the
          best seen). When the GP's mean shows no gain worth it, the
          measured times decide (:meth:`_by_measurement`).
        - Otherwise a switch *explores* when EI exceeds its price (:func:`explore_price`):
          the switch's cost, plus, as likely as the candidate is worse, the
          time its segment would lose and the switch back. The largest EI −
          price wins, never a setting left recently; it is charged to the
          exploration budget (EI against the cost alone switched 26 of 28
          times on LogR: NOTES.md).
        """
        current = self.current
        leaving_random, self.lengths.timing.random = self.lengths.timing.random, False
        suggested = self._suggest(run)
        if isinstance(suggested, Decision):
            return suggested
        suggestion, iterations_left, loss_now, speed = suggested
        if self.trials.running is not None:  # its stint has run
            return self._trial(iterations_left, loss_now)
        if self.decisions and not leaving_random and self.phase == "online" and first_run(self.triples, current) and (
                tested := self._by_measurement(iterations_left, loss_now, FIRST_RUN)):
            return tested
        ei = suggestion.expected_improvement_s
        priced = _priced(suggestion, self.space.knobs, current, self.costs, self.left_recently)
        paying = _exploits(priced, self.triples, current, speed)
        if paying:
            name, prediction, _, parts, cost, back = max(paying, key=lambda p: p[1].gain_s - p[4])
            return self._switch(prediction, parts, cost, ei,
                                f"exploit {name}{' (back to a setting left recently)' if back else ''}: predicted "
                                f"gain {prediction.gain_s:.3g} s exceeds the estimated cost {cost:.3g} s "
                                f"({', '.join(sorted(parts))}), {prediction.confidence:.0%} sure")
        if back := [p for p in priced if leaving_random and p[0] == BEST_SEEN and p[1].gain_s > p[4]]:
            _, prediction, _, parts, cost, _ = back[0]
            return self._switch(prediction, parts, cost, ei,
                                f"leave random setting {self.random_done}: the best setting seen is predicted "
                                f"{prediction.gain_s:.3g} s faster, more than the estimated cost {cost:.3g} s "
                                f"({', '.join(sorted(parts))}; {prediction.confidence:.0%} sure, and a random "
                                f"setting is kept only when predicted best)")
        if (measured := self._by_measurement(iterations_left, loss_now, RANDOM_SETTING if leaving_random else None)):
            return measured
        if explore and not leaving_random and (trial := self._trial(iterations_left, loss_now)):
            return trial
        by_ei = [p + (self._explore_price(p[1], p[4], suggestion.current_s, iterations_left),) for p in priced
                 if p[2] is not None and not p[5]]
        if not by_ei:
            self._waiting = any(p[2] is not None for p in priced)  # for the block to end: not settled
            recent = "was left recently" if self._waiting else "is the current one"
            return Decision("online", current, suggestion.setting, False, f"the best setting by EI {recent}",
                            expected_improvement_s=ei, cost_s=0.0)
        name, prediction, ei, parts, cost, _, price = max(by_ei, key=lambda p: p[2] - p[6])
        if not explore:
            return Decision("online", current, prediction.setting, False,
                            f"no switch is sure to pay (EI of {name} {ei:.3g} s, its price {price:.3g} s)",
                            expected_improvement_s=ei, cost_s=cost)
        if not ei > price:
            return Decision("online", current, prediction.setting, False,
                            f"EI {ei:.3g} s does not exceed the price of exploring {price:.3g} s (switch "
                            f"{cost:.3g} s: {', '.join(sorted(parts))}; the rest if it is worse, "
                            f"{1 - prediction.confidence:.0%} likely)", expected_improvement_s=ei, cost_s=cost)
        left = self.exploration_left()
        if left is not None and price > left:
            return Decision("online", current, prediction.setting, False,
                            f"EI {ei:.3g} s exceeds the price of exploring {price:.3g} s, but the exploration "
                            f"budget left ({left:.3g} s) does not cover it", expected_improvement_s=ei, cost_s=cost)
        self.budget.explore(self.best_per_iteration_s())  # its cost, and its segment against the best seen
        budget = "" if left is None else f"; {left:.3g} s of exploration budget left"
        return self._switch(prediction, parts, cost, ei,
                            f"explore {name}: EI {ei:.3g} s exceeds the price of exploring {price:.3g} s (switch "
                            f"{cost:.3g} s: {', '.join(sorted(parts))}); predicted gain {prediction.gain_s:.3g} s"
                            f"{budget}")

    def _explore_price(self, prediction, cost: float, current_s: float, iterations_left: float) -> float:
        """:func:`explore_price`, over the segment the overhead share holds the next one to, this decision's CPU
        so far counted."""
        held_s = self.overhead.segment_seconds(0.0, self.elapsed_s, time.thread_time() - self._started)
        return explore_price(prediction, cost, current_s, iterations_left, self.lengths.segment_iterations,
                             self.lengths.min_segment_s, held_s)

    def _suggest(self, run: SegmentRun):
        """The GP's suggestion at the job's loss trend, the iterations left there, that loss and the speeds the
        GP read; or a Decision to stay when there is nothing to suggest."""
        current = self.current
        if self.optimizer is None:
            return Decision("online", current, current, False, "every knob is pinned: nothing to tune")
        observations = self.history.observations()
        if len(observations) < 2:
            return Decision("online", current, current, False,
                            f"only {len(observations)} usable observation(s); the GP needs 2")
        if self.reference is None:  # inherited observations, but no estimate of this job's own curve yet
            return Decision("online", current, current, False, "no estimate of this job's curve yet: stay")
        if self.phase == "random" and self.overhead.first_fit_waits(self.elapsed_s):
            return Decision("online", current, current, False, "the GP's first fit waits for the overhead share")
        loss_now = self.history.loss_now(run)
        iterations_left = self.reference.iterations_left(loss_now) if loss_now > self.target_loss else 0.0
        if not iterations_left:
            return Decision("online", current, current, False,
                            f"the job's curve has no iterations left at the loss trend {loss_now:.4g}: nothing to gain")
        hold = [name for name, off in COMPILING_KNOBS.items() if name in self.space.free and current[name] == off]
        speeds = self.speeds()
        speed = SpeedOf(speed_names(self.space), lambda key: speeds.at(key, loss_now).log)
        suggestion = self.optimizer.suggest(observations, loss_now, current, hold=hold,
                                            iterations_left=iterations_left, speed=speed,
                                            refit=self.overhead.refit_due(self.elapsed_s) and not self._refitted,
                                            margin=segment_noise(self.triples))
        self._refitted = self._refitted or suggestion.refitted  # a decision fits the GP once at most
        return suggestion, iterations_left, loss_now, speed

    def _by_measurement(self, iterations_left: float, loss: float, leaving: str | None) -> Decision | None:
        """A switch on measured times, or None: off ``leaving`` (:func:`measured_way_out`; off :data:`FIRST_RUN`
        back to the setting just left too), else but off that, to one measured again (:class:`Survey`: explores)."""
        speeds, names = self.speeds(), speed_names(self.space)
        ask = (self.triples, self.current, iterations_left, lambda s: speeds.at(speed_key(s, names), loss).value,
               self._switch_cost)
        allowed, first = partial(_allowed, self.space, self.left_recently), leaving == FIRST_RUN
        found = measured_way_out(*ask, self.space.fits if first else allowed, leaving) if leaving else None
        self._judged_worse = found is not None
        if found is None and not first and (found := self.survey.next(*ask, self.exploration_left(), allowed)):
            self.budget.explore(self.best_per_iteration_s())  # its cost, and its segment against the best seen
        return found and self._measured_switch(found.setting, found.cost_s, found.reason)

    def _trial(self, iterations_left: float, loss: float) -> Decision | None:
        """A speed trial's start, or its end once its stint has run (:mod:`tfonline.tuner.trial`); or None."""
        speeds, trial, allowed = self.speeds(), self.trials, partial(_allowed, self.space, self.left_recently)
        speed, cost = (lambda s: speeds.at(trial.key(s), loss).log), self._switch_cost
        if trial.running is None:
            found = trial.start(self.triples, self.current, speed=speed, iterations_left=iterations_left, cost=cost,
                                base_iterations=self.lengths.base(self.current["worker"]),
                                allowed=allowed, left=self.exploration_left())
            if found is not None:
                self.budget.explore(self.best_per_iteration_s())  # its cost, and its stint against the best seen
            return found and self._measured_switch(found.setting, found.cost_s, found.reason)
        back, cost_s, reason = trial.end(self.triples, speed=speed, iterations_left=iterations_left, cost=cost,
                                         allowed=self.space.fits)
        if back is None:
            return Decision("online", self.current, self.current, False, reason)
        self._judged_worse = True
        return self._measured_switch(back, cost_s, reason)

    def _switch_cost(self, setting: dict[str, Any]) -> float:
        """A switch's estimated cost, from the current setting to ``setting``."""
        return self.costs.estimate(switch_parts(self.space.knobs, self.current, setting))

    def _measured_switch(self, setting: dict[str, Any], cost_s: float, reason: str) -> Decision:
        """A switch decided on measured times, not on the GP's prediction."""
        parts = switch_parts(self.space.knobs, self.current, setting)
        return Decision("online", self.current, setting, True, reason, cost_s=cost_s, parts=tuple(sorted(parts)))

    def left_recently(self, setting: dict[str, Any]) -> bool:
        """Whether the job left ``setting`` within the last :data:`RECENT_DECISIONS` decisions for one the GP
        predicted better by more than the switch's cost (by its mean). Leaving a setting to explore says
        nothing against it."""
        left = self._left_at.get(setting_key(setting))
        return left is not None and self.decisions - left <= RECENT_DECISIONS

    def _switch(self, prediction, parts, cost, ei, reason) -> Decision:
        self._judged_worse = prediction.gain_s > cost
        return Decision("online", self.current, prediction.setting, True, reason, expected_improvement_s=ei,
                        cost_s=cost, parts=tuple(sorted(parts)))

    # -- the exploration budget ------------------------------------------------

    def exploration_left(self) -> float | None:
        """Seconds the job may still spend exploring; None without a budget (see :class:`ExplorationBudget`)."""
        return self.budget.left(self.elapsed_s + (self.history.remaining_s() or 0.0))

    def best_per_iteration_s(self) -> float | None:
        """The lowest mean time per iteration of any setting seen (:func:`~tfonline.tuner.budget.best_time`)."""
        return best_time(self.triples)

    def record_cost(self, parts: Sequence[str], cost_s: float) -> None:
        """The measured cost of a switch the driver applied, and its parts (:attr:`Decision.parts`)."""
        measured = bool(parts) and math.isfinite(cost_s)
        if measured:
            self.costs.record(parts, cost_s)
        self.budget.switch_made(cost_s if measured else None)
