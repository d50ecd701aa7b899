"""Speed trials: running another worker count long enough to learn how fast it converges.

Any segment measures its setting's time per iteration; only a stint long
enough for the loss to fall clearly measures its convergence speed
(:mod:`tfonline.tuner.convergence`, rule 1). Random segments are short, so
after the random phase the worker counts run only in them keep the speeds'
prior, and nothing in the rest of the loop runs them again: EI leaves the
speeds' variance out (one segment cannot teach a speed), the measured rules
use the speeds' means, and an exploit needs confidence. On a simulated
CNN-like job (three asynchronous workers need 1.72x the iterations of one,
at 0.76x the time per iteration), four tuned runs of six stayed on three
workers to the end, 1.3x the best fixed setting (NOTES.md, thirtieth
session).

A *trial* runs another worker count's best measured setting for one stint
long enough to measure its speed, beside the current one's latest stint:

- **When.** With ``D`` the log of how much sooner the candidate would
  finish than the current setting (their mean times per iteration, their
  speeds' means) and ``σ²`` the speeds' variances summed, the chance that
  it is faster is P = Φ(D/σ) and what that chance may gain over the time
  left is R̂ · E[(1 − e^(−X))⁺], X ~ N(D, σ²). A trial starts when P is at
  least :data:`MIN_CHANCE`, that gain exceeds its price (the switch, and,
  as likely as the candidate is slower, the switch back and what its stint
  would lose: its seconds times E[(1 − e^X)⁺]), and the exploration budget
  covers the price. A speed key (:func:`~tfonline.tuner.convergence.speed_key`)
  is tried once per job, and the key it leaves counts as compared:
  afterwards both stints are in the speeds' fit. A random setting just
  measured is not left for a trial: its segment is no stint to compare
  with (in a tuned CNN job, a trial left one timed over 4 iterations, and
  its end went back to it on that timing).
- **How long.** As many iterations as the current speed key's stint has
  run so far, at least :data:`MIN_SEGMENTS` segments' worth and at most
  :data:`MOST_SHARE` of the iterations the candidate would still need:
  one segment, so that its slope is one regression.
- **Then.** The two stints decide, by their measured times over the
  speeds' means (which the trial's stint has just moved): the job goes back
  when the setting it came from finishes sooner by more than the switch
  back costs, and otherwise stays; the GP decides from there.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable, Sequence

from tfonline.setting import setting_key
from tfonline.tuner.convergence import speed_key
from tfonline.tuner.recheck import mean_times

Speed = Callable[[dict[str, Any]], tuple[float, float]]  # a setting's mean and variance of log ρ̃ at today's loss
Cost = Callable[[dict[str, Any]], float]  # a switch's estimated cost, to a setting

# A trial needs at least this chance that the candidate finishes sooner.
MIN_CHANCE = 0.2
# A trial's stint, in the job's base segments (segment_iterations), at least; and at most this share of the
# iterations the candidate would still need.
MIN_SEGMENTS = 4
MOST_SHARE = 0.15


def _phi(x: float) -> float:
    return 0.5 * math.erfc(-x / math.sqrt(2.0))


def expected_gain(mean: float, sd: float) -> float:
    """E[(1 − e^(−X))⁺] for X ~ N(mean, sd²): the expected share of the time saved by a switch whose log
    speed-up is X (0 when it is slower)."""
    if sd <= 0:
        return max(0.0, 1.0 - math.exp(-mean))
    z = mean / sd
    return max(0.0, _phi(z) - math.exp(-mean + sd * sd / 2) * _phi(z - sd))


def expected_loss(mean: float, sd: float) -> float:
    """E[(1 − e^X)⁺]: the expected share of its time a stint on the candidate loses when it is slower."""
    return expected_gain(-mean, sd)


@dataclass(frozen=True)
class TrialStart:
    """A trial to start: the candidate, its stint's iterations, the switch's estimated cost, and why."""

    setting: dict[str, Any]
    iterations: int
    cost_s: float
    reason: str


class Trials:
    """The trials' state across decisions (see the module's docstring); ``names``: the knobs a speed key is made
    of (:func:`~tfonline.tuner.convergence.speed_names`)."""

    def __init__(self, names: Sequence[str]):
        self.names = tuple(names)
        self.tried: set = set()  # speed keys tried, or compared in a trial
        self.running: dict[str, Any] | None = None  # the trial's setting while its stint runs
        self.origin: dict[str, Any] | None = None  # the setting the trial left
        self.iterations = 0  # the trial's stint
        self.stint = 0  # the iterations of the current speed key's stint so far
        self.pending = False  # the trial's stint is the next segment

    def key(self, setting: dict[str, Any]) -> tuple:
        return speed_key(setting, self.names)

    def segment_ended(self, iterations: int) -> None:
        self.stint, self.pending = self.stint + iterations, False

    def decided(self, decision) -> None:
        """After a :class:`~tfonline.tuner._records.Decision`: the stint of a speed key ends when a switch changes
        it (a decision to stay names the setting it weighed as its candidate)."""
        if decision.switch and self.key(decision.current) != self.key(decision.candidate):
            self.stint = 0

    def cancel(self) -> None:
        """The job left the trial's setting by no decision of the tuner's (a node was lost)."""
        self.running = self.origin = None
        self.pending = False

    def start(self, triples: Sequence, current: dict[str, Any], *, speed: Speed, iterations_left: float,
              base_iterations: int, cost: Cost, allowed: Callable[[dict[str, Any]], bool],
              left: float | None) -> TrialStart | None:
        """The trial to start now, or None; the job is taken to switch to it. ``speed``: a setting's (mean,
        variance) of log ρ̃ at today's loss; ``iterations_left``: the job's curve's, at today's loss;
        ``base_iterations``: a segment's before any stretch; ``cost``: a switch's estimated cost from the current
        setting; ``allowed``: whether the job may switch to a setting; ``left``: the exploration budget left
        (None: no budget)."""
        times = mean_times(triples)
        if self.running is not None or setting_key(current) not in times or not iterations_left > 0:
            return None
        now_key = self.key(current)
        best: dict[tuple, tuple[float, dict[str, Any]]] = {}  # each other key's fastest measured setting
        for per_iteration_s, setting in times.values():
            key = self.key(setting)
            if key != now_key and key not in self.tried and allowed(setting) \
                    and (key not in best or per_iteration_s < best[key][0]):
                best[key] = (per_iteration_s, setting)
        here = (times[setting_key(current)][0], speed(current))
        priced = [self._priced(here, per_iteration_s, setting, speed(setting), iterations_left, base_iterations,
                               cost(setting)) for per_iteration_s, setting in best.values()]
        worth = [p for p in priced if p[0] >= MIN_CHANCE and p[1] > p[2] and (left is None or p[2] <= left)]
        if not worth:
            return None
        trial = max(worth, key=lambda p: p[1] - p[2])[3]  # the largest expected gain over its price
        self.running, self.origin, self.iterations = dict(trial.setting), dict(current), trial.iterations
        self.pending = True
        self.tried |= {self.key(trial.setting), now_key}
        return trial

    def _priced(self, here, per_iteration_s, setting, its_speed, iterations_left, base_iterations, switch_s):
        """(chance, expected gain, price, TrialStart) of trying ``setting`` (see the module's docstring)."""
        (here_s, (mean_c, var_c)), (mean_k, var_k) = here, its_speed
        d, sd = math.log(here_s / per_iteration_s) + mean_k - mean_c, math.sqrt(var_c + var_k)
        chance = _phi(d / sd) if sd > 0 else float(d > 0)
        gain = here_s * iterations_left / math.exp(mean_c) * expected_gain(d, sd)  # the current R̂, times the share
        iterations = int(min(max(self.stint, MIN_SEGMENTS * base_iterations),
                             MOST_SHARE * iterations_left / math.exp(mean_k)))
        price = switch_s + (1 - chance) * switch_s + iterations * per_iteration_s * expected_loss(d, sd)
        knobs = ", ".join(f"{name} {value}" for name, value in zip(self.names, self.key(setting)))
        return chance, gain, price, TrialStart(dict(setting), iterations, switch_s, (
            f"speed trial of {knobs}: {setting} may finish sooner ({chance:.0%} likely by the speeds' "
            f"uncertainty: log speed-up {d:+.2f} ± {sd:.2f}); its expected gain over the time left, {gain:.3g} s, "
            f"exceeds the trial's price {price:.3g} s; {iterations} iterations measure its convergence speed"))

    def end(self, triples: Sequence, *, speed: Speed, iterations_left: float, cost: Cost,
            allowed: Callable[[dict[str, Any]], bool]) -> tuple[dict[str, Any] | None, float, str]:
        """After the trial's stint: (the setting to go back to or None, the switch's cost, why). ``speed`` as for
        :meth:`start`; ``cost``: a switch's estimated cost from the trial's setting."""
        trial, origin = self.running, self.origin
        self.running = self.origin = None
        times = mean_times(triples)
        per_trial = times[setting_key(trial)][0] / math.exp(speed(trial)[0])
        per_origin = times[setting_key(origin)][0] / math.exp(speed(origin)[0])
        price, gain = cost(origin), (per_trial - per_origin) * iterations_left
        if gain > price and allowed(origin):
            return origin, price, (
                f"speed trial ended: the setting it left finishes {gain:.3g} s sooner ({per_origin:.3g} s per "
                f"iteration of the job's curve, against {per_trial:.3g} s on the trial), more than the switch "
                f"back's {price:.3g} s: back")
        return None, 0.0, (f"speed trial ended: the trial's setting stays ({per_trial:.3g} s per iteration of the "
                           f"job's curve, against {per_origin:.3g} s on the setting it left)")
