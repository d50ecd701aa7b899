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
   the budget grows with the job. The phase ends early once the loss is
   close to the target (:meth:`TuningManager.loss_progress`).
3. ``online``: every segment, the GP is refitted and EI maximised at the
   current loss. The job switches when the switch confidently pays by the
   GP's mean (to s* or to the best setting seen; *exploit*), or when EI(s*)
   exceeds the estimated cost of that reconfiguration and the exploration
   budget covers it (*explore*, the paper's gate). See :meth:`TuningManager._online`.

Exploring, in the random phase and online, spends from one budget: a
fraction of the job's estimated length (:meth:`TuningManager.exploration_left`).

A segment lasts ``segment_iterations`` iterations (the paper's I = 3 ×
workers when None) *and* at least ``min_segment_s`` seconds. The second
bound is ours: here an iteration takes milliseconds, and a segment of six
iterations measures nothing but noise. Also ours: in the online phase, each
decision to stay doubles the next segment's length (both bounds, up to
:data:`MAX_STRETCH` times), and a switch resets it. A job that has settled
then pays for a GP fit every 16 s rather than every 2 s; the paper refits
every I iterations.
"""

from __future__ import annotations

import math
import random
import time
from dataclasses import dataclass, replace
from typing import Any, Callable, Iterable, Sequence

import numpy as np

from tfonline.estimator import BaseEstimator
from tfonline.exceptions import ConfigurationError
from tfonline.setting import setting_key
from tfonline.tuner._gpyopt import GPOptimizer, Observation, SpeedOf
from tfonline.tuner.convergence import SPEED_KNOBS, Reference, SegmentSlope, Speeds, segment_slope, speed_key
from tfonline.reconfig.plan import COMPILING_KNOBS, Plan, plan, switch_parts
from tfonline.timing import per_iteration_time
from tfonline.tuner.space import KnobSpace

# Before any switch that changed a part (see switch_parts) has been measured,
# the part is taken to cost this many seconds, by its type: about what
# rebuilding the graphs and sessions of a small job takes on a local
# cluster; and for "compile" (turning XLA on), what the first step's
# compilation took for the LogR example: 5.5 s alone on this machine's 2
# cores, 15-50 s on a busy cluster (NOTES.md).
PRIOR_COST_S = {"I-a": 2.0, "I-b": 2.0, "II": 1.0, "compile": 10.0}
# Exploring (random settings, and online switches made on EI alone) may spend
# this fraction of the job's estimated length (TuningManager.exploration_left).
# The estimate is low early (hogwild's R̂ was 3-5× low on LogR after the
# initial phase), so early on this is 4-7% of the true length; at 10%, the
# LogR benchmark's budget (1.9 s) fitted no layout switch (prior 2 s).
EXPLORATION_BUDGET = 0.2
# An online switch exploits (needs no budget) when the GP is at least this
# sure that the candidate is better than the current setting.
CONFIDENCE = 0.8
# Going back to a setting the job left in the last RECENT_DECISIONS decisions
# for one predicted better needs this much confidence, and exploring never
# goes back to one (TuningManager.left_recently).
RECENT_DECISIONS = 2
RETURN_CONFIDENCE = 0.95
# How many times longer than the first an online segment may grow while the
# tuner keeps deciding to stay.
MAX_STRETCH = 8
# The tuner's decisions (the GP's fits, mostly) may take at most this share of
# the job: a segment lasts at least 1/OVERHEAD_SHARE times the latest decision.
OVERHEAD_SHARE = 0.02
# The loss a triple and a suggestion are made at is the job's loss *trend*:
# a straight line fitted to the latest this many iterations, read at the
# segment's start (or end). A smoothed minibatch loss is too noisy for this:
# on LogR, segments a few hundred iterations apart started at 0.57 and 0.67
# with the trend near 0.62, and R̂ at a loss under the target is 0.
TREND_ITERATIONS = 500


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

    @property
    def usable(self) -> bool:
        return self.remaining_s is not None


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

    @property
    def types(self) -> tuple[str, ...]:
        """The paper's reconfiguration types of the change to the candidate."""
        return self.plan.types if self.plan is not None else ()


def loss_trend(steps: Sequence[float], losses: Sequence[float], at_step: float,
               iterations: int = TREND_ITERATIONS) -> float:
    """The least-squares line through the latest ``iterations`` losses, read at ``at_step``."""
    steps = np.asarray(steps[-iterations:], dtype=float)
    losses = np.asarray(losses[-iterations:], dtype=float)
    usable = np.isfinite(losses)
    steps, losses = steps[usable], losses[usable]
    if steps.size < 3 or np.ptp(steps) == 0:
        return float(np.mean(losses)) if losses.size else math.nan
    slope, intercept = np.polyfit(steps, losses, 1)
    return float(slope * at_step + intercept)


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


def check_options(initial_iterations, random_settings, segment_iterations, min_segment_s,
                  exploration_budget=EXPLORATION_BUDGET) -> None:
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


class TuningManager:
    """Decides, segment by segment, which setting the job runs next.

    Args:
        space: the knobs and domains to search.
        start: the (resolved) starting setting.
        target_loss: the job's target.
        make_estimator: returns a fresh progress estimator.
        initial_iterations: I0.
        random_settings: N.
        segment_iterations: I; None means 3 × the setting's workers.
        min_segment_s: the least duration of a segment.
        exploration_budget: the fraction of the job's estimated remaining time
            (R̂ of the initial segment) the random phase may spend on
            switches; None: no limit (the paper's random phase).
        seed: seeds the random phase and the GP.
        history: triples of earlier runs of the same job (resuming).
    """

    def __init__(self, space: KnobSpace, start: dict[str, Any], target_loss: float,
                 make_estimator: Callable[[], BaseEstimator], *, initial_iterations: int = 50,
                 random_settings: int = 10, segment_iterations: int | None = None, min_segment_s: float = 2.0,
                 seed: int = 0, history: Sequence[Triple] = (), cost_model: CostModel | None = None,
                 exploration_budget: float | None = EXPLORATION_BUDGET, technique: str = "online"):
        check_options(initial_iterations, random_settings, segment_iterations, min_segment_s, exploration_budget)
        self.space = space
        self.technique = technique  # how the driver switches (run(reconfig=...)): each decision's plan uses it
        self.current = dict(start)
        self.target_loss = target_loss
        self.make_estimator = make_estimator
        self.initial_iterations = initial_iterations
        self.random_settings = random_settings
        self.segment_iterations = segment_iterations
        self.min_segment_s = float(min_segment_s)
        self.exploration_budget = exploration_budget
        self.exploration_spent_s = 0.0
        self._charge_cost = False  # the switch being applied explores: its cost goes to the budget
        self._explore_reference: float | None = None  # per-iteration time an exploring segment is measured against
        self._walls: list[float] = []  # the first and the latest wall time seen
        self._first_loss: float | None = None  # the loss before this run's first segment
        self.stretch = 1
        self.rng = random.Random(seed)
        self.optimizer = GPOptimizer(space, seed) if space.free else None
        self.costs = cost_model or CostModel()
        self.triples: list[Triple] = list(history)
        self.resumed = len(self.triples)
        self.random_done = 0
        self.overhead_s = 0.0
        # Resuming with enough observations skips the random phase.
        self.phase = "initial"
        self._skip_random = self.resumed >= random_settings + 1
        self.job_steps: list[float] = []
        self.job_losses: list[float] = []
        self.reference: Reference | None = None  # the job's curve, as the latest estimator fit describes it
        self.decisions = 0
        self._left_at: dict[str, int] = {}  # each setting the job left, and the decision that left it
        self._judged_worse = False  # the switch being decided leaves a setting the GP predicts worse by its cost
        self._last_overhead_s = 0.0
        self._ahead: dict[str, Any] | None = None  # the next random setting, drawn ahead (see ahead())

    # -- segment lengths -------------------------------------------------------

    def segment_length(self) -> int:
        """Iterations the current segment should run (it also runs for :meth:`segment_seconds`)."""
        if self.phase == "initial":
            return self.initial_iterations
        return self.stretch * (self.segment_iterations or 3 * int(self.current["worker"]))

    def segment_seconds(self) -> float:
        """The least duration of the current segment: ``min_segment_s`` stretched, and at least the latest
        decision's time over :data:`OVERHEAD_SHARE`."""
        return max(self.stretch * self.min_segment_s, self._last_overhead_s / OVERHEAD_SHARE)

    # -- the loop ----------------------------------------------------------------

    def on_segment_end(self, run: SegmentRun) -> Decision:
        """Turns a finished segment into a triple and decides what runs next."""
        started = time.perf_counter()
        triple = self.triple(run)
        self.triples.append(triple)
        if self._first_loss is None:
            self._first_loss = triple.loss_before
        self.observe(run)
        self._charge_lost_time(triple, run)
        decision = self._decide(run)
        decision = replace(decision, overhead_s=time.perf_counter() - started,
                           plan=plan(self.space.knobs, decision.current, decision.candidate, self.technique))
        self.overhead_s += decision.overhead_s
        self._last_overhead_s = decision.overhead_s
        self.decisions += 1
        if decision.switch:
            if self._judged_worse:
                self._left_at[setting_key(self.current)] = self.decisions
            self.current = dict(decision.candidate)
        self._judged_worse = False
        return decision

    def observe(self, run: SegmentRun) -> None:
        """Adds a run's iterations to the job's loss history and elapsed time.

        The runner calls this alone for iterations that make no triple: those
        trained under the old setting while the tuner decided to leave it.
        """
        self.job_steps.extend(float(s) for s in run.steps)
        self.job_losses.extend(float(x) for x in run.losses)
        if len(run.walls):
            self._walls = [self._walls[0] if self._walls else float(run.walls[0]), float(run.walls[-1])]

    def triple(self, run: SegmentRun) -> Triple:
        """``(setting, loss before, R̂)``, R̂ = time per iteration × the iterations its setting still needs.

        The iterations are the job's curve's from the loss before (the
        estimator, fitted to the segment and the job's history: the job's
        :class:`~tfonline.tuner.convergence.Reference`), over the setting's
        convergence speed relative to that curve (:mod:`tfonline.tuner.convergence`).
        The loss before is the job's loss trend at the segment's start
        (:func:`loss_trend`) once the job has a history, else the driver's
        smoothed loss. A triple whose loss is already at the target has no
        R̂ to learn from (0) and is not usable; its time per iteration and
        slope still inform its setting.
        """
        loss_before = run.loss_before
        if self.job_steps:
            loss_before = loss_trend(self.job_steps, self.job_losses, run.steps[0] - 1)
        per_iteration_s = per_iteration_time(run.walls, run.warmup)
        slope = segment_slope(run.steps, run.losses)
        if per_iteration_s is None:
            return Triple(run.setting, loss_before, None, None, None, "fewer than 3 timed iterations", slope)
        if not loss_before > self.target_loss:
            return Triple(run.setting, loss_before, per_iteration_s, None, None,
                          f"the loss trend {loss_before:.4g} is already at the target {self.target_loss:g}", slope)
        estimator = self.make_estimator()
        history = (np.array(self.job_steps), np.array(self.job_losses)) if self.job_steps else None
        estimator.fit(run.steps, run.losses, history=history)
        reference = Reference(estimator, self.target_loss)
        remaining = reference.iterations_left(loss_before)
        if remaining is None:
            return Triple(run.setting, loss_before, per_iteration_s, None, None, estimator.reason, slope)
        self.reference = reference
        triple = Triple(run.setting, loss_before, per_iteration_s, None, None, None, slope)
        speed = self.speeds([triple]).at(self.speed_key(run.setting), loss_before).value
        return replace(triple, remaining_iterations=remaining / speed, remaining_s=remaining / speed * per_iteration_s,
                       speed=speed)

    def speed_names(self) -> tuple[str, ...]:
        """The knobs a setting's convergence speed depends on (:func:`~tfonline.tuner.convergence.speed_key`)."""
        return SPEED_KNOBS + tuple(knob.name for knob in self.space.extra_knobs)

    def speed_key(self, setting: dict[str, Any]) -> tuple:
        return speed_key(setting, self.speed_names())

    def speeds(self, extra: Sequence[Triple] = ()) -> Speeds:
        """The settings' convergence speeds, from every segment so far, against the latest reference."""
        triples = list(self.triples) + list(extra)
        first = max([t.loss_before for t in triples if math.isfinite(t.loss_before)] + [self._first_loss or -math.inf])
        return Speeds([self.speed_key(t.setting) for t in triples], [t.slope for t in triples], self.reference, first)

    @property
    def elapsed_s(self) -> float:
        """Wall time from the first iteration this manager saw to the latest."""
        return self._walls[1] - self._walls[0] if self._walls else 0.0

    def _decide(self, run: SegmentRun) -> Decision:
        current = self.current
        if self.phase == "initial":
            self.phase = "online" if self._skip_random or self.random_settings == 0 else "random"
        elif self.phase == "random" and self.random_done >= self.random_settings:
            self.phase = "online"
        ended = ""
        if self.phase == "random":
            candidate, parts, cost, left, late = self._draw(current)
            if candidate is not None:
                self.random_done += 1
                self._explore()
                self.stretch = 1
                budget = "" if left is None else f"; estimated cost {cost:.3g} s of {left:.3g} s left to explore"
                return Decision("random", current, candidate, candidate != current,
                                f"initialisation: random setting {self.random_done} of {self.random_settings}{budget}",
                                cost_s=cost, parts=tuple(sorted(parts)))
            if late:
                self.phase = "online"
                ended = (f"random phase ended after {self.random_done} random setting(s): the job is an estimated "
                         f"{self.time_share():.0%} through its time, too late for a random setting to pay off; ")
            else:
                # The budget grows with the job (exploration_left): draw again later.
                decision = self._online(run, explore=False)
                decision = replace(decision, phase="random", reason=(
                    f"random setting {self.random_done + 1} of {self.random_settings} waits: no untried setting's "
                    f"switch fits the {left:.3g} s of exploration budget left; {decision.reason}"))
        if self.phase == "online":
            decision = self._online(run)
            decision = replace(decision, reason=ended + decision.reason)
        self.stretch = 1 if decision.switch else min(2 * self.stretch, MAX_STRETCH)
        return decision

    def _draw(self, current: dict[str, Any], tries: int = 64):
        """A random untried setting whose switch fits the exploration budget, chosen for what it teaches per
        second it costs.

        Returns (setting or None, its switch's parts, their estimated cost,
        the budget left or None when unlimited, whether the job is too far
        along for any draw). Without a budget, draws are uniform over the
        space. With one, the job is too far along once its estimated share
        of the job's time (:meth:`time_share`) reaches 1 − the budget's
        fraction: a setting found then has little time left to pay off.
        Else ``tries`` uniform draws are made, and those whose estimated
        cost exceeds the budget left are dropped. Of the rest, the one with
        the most *new values* (a knob at a value no tried setting had) per
        second it costs (the switch's estimated cost, XLA's compile
        included, plus the segment it runs for) is taken: cheap switches
        change few knobs, and without this a small budget spends itself on
        thread and optimizer knobs, and the GP never sees the layout vary
        (measured on LogR: three random settings, all at the starting
        layout); a costly one must teach more to be drawn.

        The setting drawn for the next random segment is kept (:meth:`ahead`:
        the driver prepares its switch while the current segment runs) and
        taken at the next draw if it still fits.
        """
        tried = [t.setting for t in self.triples] + [current]
        left = self.exploration_left()
        ahead, self._ahead = self._ahead, None
        if left is None:
            candidate = ahead if ahead is not None and ahead not in tried else self.space.sample(self.rng, exclude=tried)
            parts = switch_parts(self.space.knobs, current, candidate)
            return candidate, parts, self.costs.estimate(parts), None, False
        if self.time_share() >= 1 - self.exploration_budget:
            return None, {}, 0.0, left, True
        if ahead is not None and ahead not in tried:
            parts = switch_parts(self.space.knobs, current, ahead)
            cost = self.costs.estimate(parts)
            if cost <= left:
                return ahead, parts, cost, left, False
        fitting = []
        for _ in range(tries):
            candidate = self.space.sample(self.rng, exclude=tried)
            parts = switch_parts(self.space.knobs, current, candidate)
            cost = self.costs.estimate(parts)
            if candidate not in tried and cost <= left:
                new = sum(all(t.get(name) != value for t in tried) for name, value in candidate.items())
                fitting.append((new / (cost + self.min_segment_s + 1e-3), candidate, parts, cost))
        if not fitting:
            return None, {}, 0.0, left, False
        best = max(f[0] for f in fitting)
        return (*self.rng.choice([f[1:] for f in fitting if f[0] == best]), left, False)

    def ahead(self) -> tuple[dict[str, Any], Plan] | None:
        """The random setting the next random segment will likely run, and its plan, for the driver to prepare
        while the current segment runs (None outside the random phase)."""
        if self.phase != "random" or self.random_done >= self.random_settings:
            return None
        if self._ahead is None:
            tried = [t.setting for t in self.triples] + [self.current]
            self._ahead = self.space.sample(self.rng, exclude=tried)
        return dict(self._ahead), plan(self.space.knobs, self.current, self._ahead, self.technique)

    def time_share(self) -> float:
        """The job's estimated share of its time so far: elapsed / (elapsed + the latest R̂); 0 before any R̂."""
        usable = [t for t in self.triples if t.usable]
        if not usable or not self.elapsed_s > 0:
            return 0.0
        return self.elapsed_s / (self.elapsed_s + usable[-1].remaining_s)

    def loss_progress(self) -> float:
        """How much of its way from this run's first loss to the target the job's loss trend has covered (0 to 1)."""
        if len(self.job_steps) < 2 or self._first_loss is None or not self._first_loss > self.target_loss:
            return 0.0
        now = loss_trend(self.job_steps, self.job_losses, self.job_steps[-1])
        return min(1.0, max(0.0, (self._first_loss - now) / (self._first_loss - self.target_loss)))

    def usable_observations(self) -> list[Observation]:
        """Every timed triple as the GP sees it: (setting, loss, time per iteration)."""
        return [Observation(t.setting, t.loss_before, t.per_iteration_s) for t in self.triples
                if t.per_iteration_s is not None and math.isfinite(t.loss_before)]

    def _online(self, run: SegmentRun, explore: bool = True) -> Decision:
        """Refit, then: exploit when a switch confidently pays, else explore when EI pays for its price, else stay.

        The candidates are s*, the EI maximiser; while XLA is off, s* with
        XLA held off (turning it on costs a compile, and a gate that refuses
        s* every time would leave the cheap knobs unexplored); and the
        setting seen so far that the GP predicts best at today's loss.

        - A switch *exploits* when the GP's mean gain (current R̂ −
          candidate R̂) exceeds the switch's estimated cost and the GP is at
          least :data:`CONFIDENCE` sure the candidate is better; the largest
          net gain wins. Going back to a setting left in the last
          :data:`RECENT_DECISIONS` decisions needs :data:`RETURN_CONFIDENCE`:
          evidence beyond the noise it was left on (measured: a resumed job
          ping-ponged 11 times between two layouts).
        - Otherwise a switch *explores* when EI exceeds its price: the
          switch's cost, plus, as likely as the candidate is worse, the time
          its segment would lose (the GP's mean slowdown over one segment)
          and the switch back (:meth:`_explore_price`). The largest EI −
          price wins, never a setting left recently; the switch is charged,
          with the time its segment loses, to the exploration budget.
          Measured on the LogR job, EI against the cost alone made 26 of 28
          decisions switch, and on an MLP it explored settings the GP's own
          mean put 8.9 s behind for an EI of 2-3 s (NOTES.md).
        """
        current = self.current
        if self.optimizer is None:
            return Decision("online", current, current, False, "every knob is pinned: nothing to tune")
        observations = self.usable_observations()
        if len(observations) < 2:
            return Decision("online", current, current, False,
                            f"only {len(observations)} usable observation(s); the GP needs 2")
        loss_now = loss_trend(self.job_steps, self.job_losses, self.job_steps[-1]) if self.job_steps else run.loss_now
        iterations_left = self.reference.iterations_left(loss_now) if loss_now > self.target_loss else 0.0
        if not iterations_left:
            return Decision("online", current, current, False,
                            f"the job's curve has no iterations left at the loss trend {loss_now:.4g}: nothing to gain")
        hold = [name for name, off in COMPILING_KNOBS.items() if name in self.space.free and current[name] == off]
        speeds = self.speeds()
        speed = SpeedOf(self.speed_names(), lambda key: speeds.at(key, loss_now).log)
        suggestion = self.optimizer.suggest(observations, loss_now, current, hold=hold,
                                            iterations_left=iterations_left, speed=speed)
        ei = suggestion.expected_improvement_s
        names = ["s*", "s* with XLA held off", "the best setting seen"]
        options = [(name, c.prediction, c.expected_improvement_s) for name, c in zip(names, suggestion.candidates)]
        if suggestion.best_known is not None:
            options.append((names[2], suggestion.best_known, None))
        priced = []
        for name, prediction, option_ei in options:
            parts = switch_parts(self.space.knobs, current, prediction.setting)
            if parts:
                priced.append((name, prediction, option_ei, parts, self.costs.estimate(parts),
                               self.left_recently(prediction.setting)))
        paying = [p for p in priced if p[1].gain_s > p[4]
                  and p[1].confidence >= (RETURN_CONFIDENCE if p[5] else CONFIDENCE)]
        if paying:
            name, prediction, _, parts, cost, back = max(paying, key=lambda p: p[1].gain_s - p[4])
            return self._switch(prediction, parts, cost, ei,
                                f"exploit {name}{' (back to a setting left recently)' if back else ''}: predicted "
                                f"gain {prediction.gain_s:.3g} s exceeds the estimated cost {cost:.3g} s "
                                f"({', '.join(sorted(parts))}), {prediction.confidence:.0%} sure")
        by_ei = [p + (self._explore_price(p[1], p[4], suggestion.current_s, iterations_left),)
                 for p in priced if p[2] is not None and not p[5]]
        if not by_ei:
            recent = [p for p in priced if p[2] is not None]
            return Decision("online", current, suggestion.setting, False,
                            "the best setting by EI was left recently" if recent
                            else "the best setting by EI is the current one",
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
        self._explore()
        budget = "" if left is None else f"; {left:.3g} s of exploration budget left"
        return self._switch(prediction, parts, cost, ei,
                            f"explore {name}: EI {ei:.3g} s exceeds the price of exploring {price:.3g} s (switch "
                            f"{cost:.3g} s: {', '.join(sorted(parts))}); predicted gain {prediction.gain_s:.3g} s"
                            f"{budget}")

    def _explore_price(self, prediction, cost: float, current_s: float, iterations_left: float) -> float:
        """What exploring a candidate costs: its switch, and as likely as it is worse, one segment's loss
        (the GP's mean slowdown over a segment of the current length) and the switch back."""
        slowdown = max(0.0, prediction.remaining_s / current_s - 1.0) if current_s > 0 else 0.0
        per_iteration = current_s / iterations_left
        iterations = self.segment_iterations or 3 * int(prediction.setting["worker"])
        segment_s = max(self.min_segment_s, iterations * per_iteration)
        return cost + (1.0 - prediction.confidence) * (slowdown * segment_s + cost)

    def left_recently(self, setting: dict[str, Any]) -> bool:
        """Whether the job left ``setting`` within the last :data:`RECENT_DECISIONS` decisions for one the GP
        predicted better by more than the switch's cost (by its mean). Leaving a setting to explore says
        nothing against it."""
        left = self._left_at.get(setting_key(setting))
        return left is not None and self.decisions - left <= RECENT_DECISIONS

    def _switch(self, prediction, parts, cost, ei, reason) -> Decision:
        self._judged_worse = prediction.gain_s > cost
        candidate = prediction.setting
        return Decision("online", self.current, candidate, True, reason, expected_improvement_s=ei, cost_s=cost,
                        parts=tuple(sorted(parts)))

    # -- the exploration budget ------------------------------------------------

    def exploration_left(self) -> float | None:
        """Seconds the job may still spend exploring; None without a budget.

        The budget is :attr:`exploration_budget` × the job's estimated length
        (its time so far + the latest R̂), re-estimated at every decision;
        the spending is every exploratory switch's measured cost plus the
        time its segment lost (or won: a credit) against the best setting
        seen before it (:meth:`_charge_lost_time`). An estimator that
        is low early (hogwild's R̂ was 3-5× low on LogR after the initial
        phase) allows little at first; as the job outlives its estimate, its
        time so far makes up for it.
        """
        if self.exploration_budget is None:
            return None
        usable = [t for t in self.triples if t.usable]
        total = self.elapsed_s + (usable[-1].remaining_s if usable else 0.0)
        return max(0.0, self.exploration_budget * total - self.exploration_spent_s)

    def _explore(self) -> None:
        """The switch being decided explores: its cost, and its segment's time against the best setting seen, are charged."""
        self._charge_cost = True
        self._explore_reference = self.best_per_iteration_s()

    def best_per_iteration_s(self) -> float | None:
        """The lowest mean time per iteration of any setting seen (each setting's mean over its segments)."""
        times: dict[str, list[float]] = {}
        for t in self.triples:
            if t.per_iteration_s is not None:
                times.setdefault(setting_key(t.setting), []).append(t.per_iteration_s)
        return min((float(np.mean(v)) for v in times.values()), default=None)

    def _charge_lost_time(self, triple: Triple, run: SegmentRun) -> None:
        """After an exploring segment: the time it lost against the best setting seen before it.

        Negative when it found a faster setting: an exploration that pays
        for itself leaves budget for the next.
        """
        reference, self._explore_reference = self._explore_reference, None
        if reference is not None and triple.per_iteration_s is not None:
            timed = max(0, len(run.walls) - run.warmup - 1)
            self.exploration_spent_s += timed * (triple.per_iteration_s - reference)

    def record_cost(self, parts: Sequence[str], cost_s: float) -> None:
        """The measured cost of a switch the driver applied, and its parts (:attr:`Decision.parts`)."""
        if parts and math.isfinite(cost_s):
            self.costs.record(parts, cost_s)
            if self._charge_cost:
                self.exploration_spent_s += cost_s
        self._charge_cost = False
