"""Measuring settings again when the current one is seen to change: what keeps the online phase from freezing.

When the current setting's time per iteration rises late in a job, the GP
can explain the rise two ways: a change common to every setting (its loss
kernel: "the job got slower") or a change of the current setting alone (the
setting-by-loss kernel). Only the current setting has been measured lately,
so its data cannot tell the two apart, and a fit that takes the first way
predicts every other setting slower by as much: the job stays where it is,
though another setting may now be faster. On the simulated job whose best
worker count moves from 4 to 2 halfway (NOTES.md), one seed in four stayed
on a setting 1.25-1.38x the new best to the end.

So a change of the current setting within its own stint is read as what it
is, evidence that the settings' times moved, and the settings that may now
beat it are measured again (a *survey*):

- It starts when the stint's latest segment ran its iterations more than
  :data:`SURPRISE` slower than the stint's earlier segments did (their
  median; at least :data:`EARLIER_SEGMENTS` of them).
- Each step measures again the setting, last measured before the change,
  that finishes soonest by its old time (its time per iteration over its
  convergence speed) divided by the largest change seen so far: the best
  it may do now if it moved as much, the other way. It is measured only
  if that beats the best setting measured since the change, and the gain
  over the iterations left pays for the switch.
- The survey goes on while each re-measured setting has moved by more
  than :data:`SURPRISE` too (then old times cannot be trusted), for at most
  :data:`MOST_RECHECKS` settings; it ends at the first that has not moved,
  or when none may beat the best measured since. The GP then decides on
  late measurements of each.

On a stationary job the survey never starts unless the machine itself slows
by more than :data:`SURPRISE` within a stint (measured here: episodes of
5-12% over 3-10 s, README "The simulator"); then it costs a few segments at
most, each charged to the exploration budget.

Measured times also take the job off a random setting the GP cannot judge
(:func:`measured_way_out`): when its mean shows no gain worth a switch, the best
setting seen by measurement is taken if the random setting is more than
:data:`SURPRISE` slower by its own segments and the gain pays for the switch.
So they do off a setting a decision chose, once its first segment has shown
the GP wrong about it (:func:`first_run`), before the GP's next guess.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from typing import Any, Callable, Sequence

from tfonline.setting import setting_key

# The rise of a stint's latest segment over its earlier ones that marks a change of its setting: three times the
# timing's precision (tfonline.timing.TIMING_PRECISION), above this machine's measured drift of 5-12% in episodes.
SURPRISE = 0.15
# The stint's earlier segments that make its "before".
EARLIER_SEGMENTS = 2
# Settings measured again in one survey, at most.
MOST_RECHECKS = 3
# What measured_way_out leaves: a random setting, or one a decision chose, run for the first time.
RANDOM_SETTING, FIRST_RUN = "the random setting", "a setting run for the first time"


@dataclass(frozen=True)
class Recheck:
    """A setting to measure again, its switch's estimated cost, and why."""

    setting: dict[str, Any]
    cost_s: float
    reason: str


def stint_change(triples: Sequence, current: dict[str, Any]) -> tuple[float, float] | None:
    """The current setting's time per iteration before and now, when the latest of its stint's segments (this
    job's consecutive triples of it) ran more than :data:`SURPRISE` slower than the earlier ones; else None (also
    when the latest segment was not timed)."""
    if not triples or triples[-1].per_iteration_s is None or triples[-1].source is not None:
        return None
    key, stint = setting_key(current), []
    for triple in reversed(_timed(triples)):
        if setting_key(triple.setting) != key:
            break
        stint.append(triple.per_iteration_s)
    if len(stint) < EARLIER_SEGMENTS + 1:
        return None
    now, before = stint[0], statistics.median(stint[1:])
    return (before, now) if now > before * (1 + SURPRISE) else None


def sooner_beyond_noise(triples: Sequence, current: dict[str, Any], candidate: dict[str, Any],
                        speed: Callable[[dict[str, Any]], tuple[float, float]], shared: bool, z: float) -> bool:
    """Whether ``candidate`` finishes sooner than ``current`` by this job's timed segments, beyond their noise.

    D is the mean log time per iteration of the current setting's segments
    less the candidate's, plus the candidate's mean log convergence speed
    less the current's (``speed``: a setting's mean and variance of log ρ̃);
    its variance, each side's variance of log time over its segments divided
    by their number, plus both speeds' variances unless the two share their
    speed (``shared``: one speed key, whose uncertainty cancels).
    True when D exceeds ``z`` standard deviations. A setting with fewer than
    two timed segments has no measured noise: False.
    """
    timed = [(setting_key(t.setting), math.log(t.per_iteration_s)) for t in _timed(triples)]
    here, there = ([log for key, log in timed if key == setting_key(s)] for s in (current, candidate))
    if len(here) < 2 or len(there) < 2:
        return False
    (mean_c, var_c), (mean_k, var_k) = speed(current), speed(candidate)
    d = statistics.mean(here) - statistics.mean(there) + mean_k - mean_c
    variance = statistics.variance(here) / len(here) + statistics.variance(there) / len(there)
    if not shared:
        variance += var_c + var_k
    return d > z * math.sqrt(variance)


def segment_noise(triples: Sequence) -> float:
    """The standard deviation of one segment's log time per iteration about its setting's mean, pooled over the
    settings this job ran at least twice (0 when none has): what one segment of a setting is judged by.

    The GP's expected improvement is taken beyond it (:meth:`~tfonline.tuner._gpyopt.GPOptimizer.suggest`'s
    ``margin``): a gain one segment cannot tell from this noise is not worth a switch to measure it.
    """
    runs = [[math.log(t.per_iteration_s) for t in ts] for ts in _runs(triples).values() if len(ts) >= 2]
    freedom = sum(len(logs) - 1 for logs in runs)
    if not freedom:
        return 0.0
    return math.sqrt(sum((len(logs) - 1) * statistics.variance(logs) for logs in runs) / freedom)


def _timed(triples: Sequence) -> list:
    return [t for t in triples if t.source is None and t.per_iteration_s is not None]


def _runs(triples: Sequence) -> dict[str, list]:
    """This job's timed triples by their setting's key, in order."""
    runs: dict[str, list] = {}
    for triple in _timed(triples):
        runs.setdefault(setting_key(triple.setting), []).append(triple)
    return runs


def mean_times(triples: Sequence) -> dict[str, tuple[float, dict[str, Any]]]:
    """Each setting this job ran, by its key: its mean time per iteration over its timed segments, and itself."""
    return {key: (statistics.mean(t.per_iteration_s for t in ts), ts[-1].setting)
            for key, ts in _runs(triples).items()}


class Survey:
    """The survey's state across decisions (see the module's docstring)."""

    def __init__(self):
        self.since: int | None = None  # the triples from this index on were measured after the change
        self.moved = 1.0  # the largest factor by which a setting's time per iteration was seen to move
        self.rechecked = 0

    def next(self, triples: Sequence, current: dict[str, Any], iterations_left: float,
             speed: Callable[[dict[str, Any]], float], cost: Callable[[dict[str, Any]], float],
             left: float | None, allowed: Callable[[dict[str, Any]], bool]) -> Recheck | None:
        """The setting to measure next, or None (no survey, or it ended). Call it once per decision, after the
        decision's triple is in ``triples``.

        ``speed``: a setting's convergence speed ρ̃ at today's loss; ``cost``: its switch's estimated cost,
        which the exploration budget ``left`` must cover (None: no budget); ``allowed``: whether the job may
        switch to it (it fits the nodes alive and was not left recently).
        """
        if self.since is None:
            change = stint_change(triples, current)
            if change is None:
                return None
            self.since, self.moved, self.rechecked = len(triples) - 1, change[1] / change[0], 0
            why = f"its time per iteration rose from {change[0]:.3g} s to {change[1]:.3g} s within its stint"
        else:
            why = self._went_on(triples)
            if why is None:
                return self.end()
        return self._candidate(triples, iterations_left, speed, cost, left, allowed, why)

    def end(self) -> None:
        self.since = None
        return None

    def _went_on(self, triples: Sequence) -> str | None:
        """Why the survey goes on after its latest re-check (that setting moved too), or None (it ends)."""
        latest, before = triples[-1], _timed(triples[:self.since])
        old = [t.per_iteration_s for t in before if setting_key(t.setting) == setting_key(latest.setting)]
        if self.rechecked >= MOST_RECHECKS or latest.per_iteration_s is None or not old:
            return None
        moved = max(latest.per_iteration_s / old[-1], old[-1] / latest.per_iteration_s)
        if moved <= 1 + SURPRISE:
            return None
        self.moved = max(self.moved, moved)
        return f"the setting measured again moved too, from {old[-1]:.3g} s to {latest.per_iteration_s:.3g} s"

    def _candidate(self, triples, iterations_left, speed, cost, left, allowed, why: str) -> Recheck | None:
        after, before = _timed(triples[self.since:]), _timed(triples[:self.since])
        best_now = min(t.per_iteration_s / speed(t.setting) for t in after)
        measured = {setting_key(t.setting) for t in after}
        latest = {setting_key(t.setting): t for t in before}
        found = None
        for key, triple in latest.items():
            hope = triple.per_iteration_s / speed(triple.setting) / self.moved
            if key in measured or not allowed(triple.setting) or not hope < best_now:
                continue
            price = cost(triple.setting)
            if (best_now - hope) * iterations_left > price and (left is None or price <= left) \
                    and (found is None or hope < found[0]):
                found = (hope, triple, price)
        if found is None:
            return self.end()
        self.rechecked += 1
        return Recheck(dict(found[1].setting), found[2],
                       f"measure again a setting that may now be faster: {why}; {found[1].setting} ran "
                       f"{found[1].per_iteration_s:.3g} s per iteration before the change (measured again: "
                       f"{self.rechecked} of at most {MOST_RECHECKS})")


def measured_way_out(triples: Sequence, current: dict[str, Any], iterations_left: float,
                     speed: Callable[[dict[str, Any]], float], cost: Callable[[dict[str, Any]], float],
                     allowed: Callable[[dict[str, Any]], bool], leaving: str = RANDOM_SETTING) -> Recheck | None:
    """Off a random setting by measurement, for when the GP's mean shows no gain worth a switch (a flat fit, or
    one the random setting's own segments contradict), or off :data:`FIRST_RUN` (``leaving``; see
    :func:`first_run`): the setting seen that finishes soonest by its measured
    times (the mean over its segments, over its convergence speed ρ̃), when the current one's is more than
    :data:`SURPRISE` above it and the gain over the iterations left pays for the switch; else None. (A tuned CNN
    job stayed its whole online phase on a random setting at 0.104 s per iteration, against 0.066-0.072 for five
    settings it had measured: its GP's one fit predicted no difference.)"""
    times = mean_times(triples)
    here = times.get(setting_key(current))
    others = [(time / speed(setting), setting) for key, (time, setting) in times.items()
              if key != setting_key(current) and allowed(setting)]
    if here is None or not others:
        return None
    now, (best, setting) = here[0] / speed(here[1]), min(others, key=lambda o: o[0])
    price = cost(setting)
    if not now > best * (1 + SURPRISE) or (now - best) * iterations_left <= price:
        return None
    return Recheck(dict(setting), price,
                   f"leave {leaving}: by measurement, the best setting seen finishes "
                   f"{(now - best) * iterations_left:.3g} s sooner ({best:.3g} s per iteration of the job's curve, "
                   f"against {now:.3g} s here), more than the estimated cost {price:.3g} s; "
                   + ("it was predicted faster" if leaving == FIRST_RUN else "the GP's mean shows no such gain"))


def first_run(triples: Sequence, current: dict[str, Any]) -> bool:
    """Whether ``current`` has run exactly one segment of this job's: the one just measured, its first.

    Such a setting, when a decision chose it, was the GP's prediction, and its segment has just tested it: when
    it measures more than :data:`SURPRISE` slower than the best setting seen (:func:`measured_way_out`), the
    job goes back to measured ground before it trusts another prediction. At the paper's scale, simulated, a
    "100% sure" exploit left a setting at 0.060 s per iteration for one never run at 1.11 s, then went on to
    another never run at 0.71 s, and a tuned CNN job made two such exploits to settings 1.3-1.5x slower
    (NOTES.md, twenty-ninth session)."""
    key = setting_key(current)
    return sum(setting_key(t.setting) == key for t in _timed(triples)) == 1 and setting_key(triples[-1].setting) == key
