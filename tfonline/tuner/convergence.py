"""Each setting's convergence speed, relative to the job's own loss curve: progress per second, per setting.

The tuner's remaining time for a setting ``s`` at loss ``l`` is

    R̂(s, l) = t(s) × N(l) / ρ(s, l)

- ``t(s)``: the setting's time per iteration, measured on its segments;
- ``N(l)``: the iterations left from ``l`` to the target on the job's
  *reference curve*, the progress estimator fitted to the whole job so far
  (:class:`Reference`);
- ``ρ(s, l)``: the setting's progress per iteration relative to that curve,
  from its own segments (:class:`Speeds`). Asynchronous staleness, a
  synchronous job's larger batch, anything that changes how many iterations
  a setting needs, shows here: a setting whose loss falls half as fast per
  iteration as the curve at the same loss has ρ = 0.5, and needs twice the
  iterations.

Rules (plug-in estimators, no fitted model beyond the reference curve):

1. **A stint's speed.** A segment's slope is the least-squares slope of
   its losses on its iterations (with an intercept, after the estimators'
   outlier filter, :func:`segment_slope`), divided by the reference curve's
   slope at the segment's mean loss; its standard error comes from the
   regression. Consecutive segments of one speed key (a stint) are pooled,
   inverse-variance, before anything else: a single short segment's slope
   is often not clear of zero, and leaving out only those that are not
   would keep the ones whose noise happened to make them steep, a bias
   upwards that pooling the whole stint does not have. A stint's log speed
   has the variance (se/ρ̂)² of its standard error read at its speed ρ̂,
   or at most :data:`PLAUSIBLE_LOGS` above the clear stints' median speed
   when ρ̂ lies beyond: one 88-iteration segment of a tuned LogR job near its
   target measured 631 ± 252, clear of zero by 2.5 standard errors; read at
   631 that is a log speed of 6.4 ± 0.4, and the job kept a setting 1.6x
   slower per iteration on it (NOTES.md, thirty-seventh session). Read at
   a plausible speed, it says next to nothing, as it should.
2. **Which settings share a speed.** What an iteration computes depends on
   how many workers compute gradients and how they are combined (the job's
   mode), and on the user's own knobs, which may change the algorithm (a
   batch size). The other knobs (ps nodes, which partition exactly; thread
   pools; the graph optimizer; XLA) change how fast an iteration runs, not
   what it computes. Settings with the same workers and user knobs
   therefore share one speed (:func:`speed_key`): a segment's slope is far
   noisier than its time per iteration (on the simulated test surface, a
   40-iteration segment's slope has a standard error about its size), and
   pooling gives each speed many segments.
3. **Shrinkage.** A key's log speed has the prior N(0, τ²): the job's
   own pace, give or take τ, the spread of the keys' speeds. τ is measured
   (empirical Bayes): the variance of the keys' speeds fitted with a vague
   prior, less the mean of their own variances, within
   [:data:`MIN_SPREAD`, :data:`PRIOR_SD`]. Where the worker counts
   converge alike, their noisy measured differences are shrunk hard and
   the time per iteration decides; where one needs far more iterations
   than another, the data speak. A speed may drift along the loss's way,
   prior N(0, :data:`DRIFT`²) per whole way.
4. ρ̃ is at least :data:`MIN_SPEED`: a setting whose loss does not fall
   is 1/MIN_SPEED times slower, not infinitely.
5. **The reference's own error.** The estimator's curve is not the job's:
   its pace may be right at one loss and 30% off at another, and a setting
   run only late would then look slower than one run only early. A smooth
   factor b(share) common to every key is fitted with the speeds
   (:class:`Speeds`), so that settings are compared with each other near
   the same loss, and the reference only carries a speed across the way.

6. **Other jobs** (inherited, :mod:`tfonline.tuner.inherit`). A job of
   the same model with another learning rate falls at its own pace per
   iteration, so its segments read against this job's curve are off by a
   factor common to all its settings: each other job has a level of its
   own, prior N(0, :data:`JOB_LEVEL_SD`²), and what its segments carry over
   is how its settings' speeds differ from each other (asynchronous
   staleness: the CNN's 3 workers needed 1.85x the iterations of 1 at one
   learning rate, 2.7x at another). Their size differs from job to job, so
   another job's stint counts :data:`OTHER_JOB_WEIGHT` of one of this
   job's.

Every segment's speed is recomputed against the latest reference at each
decision: the reference improves as the job goes on, and all settings are
then measured by one curve.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from tfonline.estimator import BaseEstimator, clean_segment
from tfonline.estimator._base import fit_slope

# Before its segments say otherwise, a setting's log speed is the job's own (0), give or take this much.
PRIOR_SD = 0.5
MIN_SPREAD = 0.1
VAGUE_SD = 3.0
# How much a setting's log speed may change over the loss's whole way from the first loss to the target.
DRIFT = 0.25
MIN_SPEED = 0.05
# A segment measures a speed when its loss falls by at least this many standard errors.
CLEAR_T = 2.0
# A stint's log speed is as precise as its standard error allows at most this far (in logs) above the clear stints'
# median speed (rule 1).
PLAUSIBLE_LOGS = 3 * PRIOR_SD
# The reference's error along the loss's way (rule 5): knots, and how much its slope may change between knots.
KNOTS = 11
SMOOTHNESS = 0.05
# ... and how far off it may be at a knot, give or take (its level: with none, the settings' speeds would be known
# only relative to each other, and each one's variance would be the prior's).
BIAS_SD = 1.0
# A segment with fewer usable points than this has no slope of its own.
MIN_POINTS = 5
# Another job's level against this job's curve (rule 6), give or take this much in logs, and the weight of its
# stints against this job's.
JOB_LEVEL_SD = 1.0
OTHER_JOB_WEIGHT = 0.25


@dataclass(frozen=True)
class SegmentSlope:
    """How the loss fell in one segment: a least-squares line through its losses."""

    loss_mid: float  # the line's loss at the segment's mean iteration (the mean loss)
    slope: float  # loss per iteration: negative while the loss falls
    slope_se: float


# The repository's triples columns that keep a segment's SegmentSlope (schema v5).
SLOPE_COLUMNS = ("slope_loss", "slope", "slope_se")


def slope_columns(slope: SegmentSlope | None) -> dict[str, float | None]:
    """``slope`` as the triples table's columns (all None without one)."""
    values = (None, None, None) if slope is None else (slope.loss_mid, slope.slope, slope.slope_se)
    return dict(zip(SLOPE_COLUMNS, values))


def slope_from_columns(row) -> SegmentSlope | None:
    """The SegmentSlope a triples row keeps, or None (a row written before schema v5)."""
    values = [row[name] for name in SLOPE_COLUMNS]
    return None if None in values else SegmentSlope(*values)


# The knobs a setting's convergence speed depends on, besides the user's own (rule 2).
SPEED_KNOBS = ("worker",)


def speed_names(space) -> tuple[str, ...]:
    """The knobs a setting's convergence speed depends on in ``space`` (a KnobSpace): :data:`SPEED_KNOBS` and
    the user's own knobs."""
    return SPEED_KNOBS + tuple(knob.name for knob in space.extra_knobs)


def speed_key(setting: dict[str, Any], names: Sequence[str] = SPEED_KNOBS) -> tuple:
    """What a setting's convergence speed depends on (rule 2): the values of ``names`` (its workers, and the
    user's own knobs)."""
    return tuple(setting.get(name) for name in names)


def segment_slope(steps: Sequence[float], losses: Sequence[float]) -> SegmentSlope | None:
    """The segment's :class:`SegmentSlope`; None when it has fewer than :data:`MIN_POINTS` usable losses."""
    if len(steps) < MIN_POINTS:
        return None
    steps, losses, _ = clean_segment(steps, losses)
    if steps.size < MIN_POINTS or np.ptp(steps) == 0:
        return None
    slope, se = fit_slope(steps, losses)
    if not (math.isfinite(slope) and math.isfinite(se)):
        return None
    return SegmentSlope(float(np.mean(losses)), slope, se)


class Reference:
    """The job's loss curve, as a fitted estimator describes it: iterations left, and the pace at a loss."""

    def __init__(self, estimator: BaseEstimator, target_loss: float):
        self.estimator = estimator
        self.target_loss = target_loss

    def iterations_left(self, loss: float) -> float | None:
        return self.estimator.remaining_iterations(loss, self.target_loss)

    def rate(self, loss: float) -> float | None:
        """How fast the curve's loss falls per iteration at ``loss`` (> 0), or None."""
        if not (loss > 0 and math.isfinite(loss)):
            return None
        delta = 0.02 * loss
        iterations = self.estimator.remaining_iterations(loss + delta / 2, loss - delta / 2)
        if iterations is None or not iterations > 0:
            return None
        return delta / iterations


@dataclass(frozen=True)
class Speed:
    """ρ̃ of a speed key at a loss: the mean and variance of log ρ."""

    log_mean: float
    log_var: float

    @property
    def value(self) -> float:
        return max(MIN_SPEED, math.exp(self.log_mean))

    @property
    def log(self) -> tuple[float, float]:
        return max(math.log(MIN_SPEED), self.log_mean), self.log_var


class Speeds:
    """Every speed key's log ρ at any loss, from the segments seen (rules 1-5 of the module's docstring).

    One penalised least-squares fit of each segment's measured log speed
    (rule 1: each stint's, its consecutive segments of one key pooled; a
    stint whose loss does not fall clearly, by :data:`CLEAR_T` standard
    errors, measures nothing in logs and is left out), weighted by its
    variance:

        log ρ̂_i = θ(key_i) + θ'(key_i)·(share_i − share̅(key_i)) + b(share_i) + ε_i

    - θ: each key's log speed, prior N(0, τ²), τ = :attr:`spread` (rule 3);
    - θ': how it changes along the loss's way, prior N(0, :data:`DRIFT`²);
    - b: the reference's own error along the way (rule 5), common to every
      key: piecewise linear on :data:`KNOTS` knots, its second differences
      penalised (:data:`SMOOTHNESS`), each knot's value with prior
      N(0, :data:`BIAS_SD`²). A setting run only late
      is then compared with the others through the segments around each
      switch, not through the reference's pace, which may be off late.

    The variances come from the fit's posterior covariance, the
    confounding with b included: a key seen only far from every other key
    stays uncertain.

    - c: each other job's level (rule 6), prior N(0, :data:`JOB_LEVEL_SD`²);
      its stints' variances are divided by :data:`OTHER_JOB_WEIGHT`.

    Args:
        keys: each segment's :func:`speed_key`.
        slopes: each segment's :class:`SegmentSlope`, None when it has none.
        reference: the job's curve.
        first_loss: the start of the loss's way (its end is the target).
        jobs: each segment's job, None (or empty) for this job's own; None: all are this job's.
    """

    def __init__(self, keys: Sequence[Any], slopes: Sequence[SegmentSlope | None], reference: Reference,
                 first_loss: float, jobs: Sequence[str | None] | None = None):
        self.first_loss, self.target_loss = first_loss, reference.target_loss
        jobs = [job or None for job in jobs] if jobs is not None else [None] * len(keys)
        rows = []  # (key, log ρ measured against the reference, its variance, share of the way, job)
        pooled = [(job, key, *_pooled(stint))
                  for (job, key), stint in _stints(list(zip(jobs, keys)), slopes, reference)]
        clear = [(job, key, speed, se, share)
                 for job, key, speed, se, share in pooled if se > 0 and speed >= CLEAR_T * se]
        speeds = [speed for _, _, speed, _, _ in clear]
        plausible = float(np.median(speeds)) * math.exp(PLAUSIBLE_LOGS) if clear else 0.0
        for job, key, speed, se, share in clear:
            weight = 1.0 if job is None else OTHER_JOB_WEIGHT
            rows.append((key, math.log(speed), (se / min(speed, plausible)) ** 2 / weight, self.share(share), job))
        self.keys = sorted({row[0] for row in rows}, key=repr)
        self.jobs = sorted({row[4] for row in rows if row[4] is not None})
        self.centre = {k: float(np.mean([r[3] for r in rows if r[0] == k])) for k in self.keys}
        self.spread = self._spread(rows)
        self._fit(rows, self.spread)

    def _spread(self, rows) -> float:
        """How far the keys' log speeds lie apart (rule 3's prior): the spread about their mean of the keys'
        speeds fitted with a vague prior, less what their own variances explain (a method of moments), within
        [:data:`MIN_SPREAD`, :data:`PRIOR_SD`]. Their common level is b's (rule 5) as much as theirs."""
        if len(self.keys) < 2:
            return PRIOR_SD
        self._fit(rows, VAGUE_SD)
        n_keys = len(self.keys)
        centring = np.eye(n_keys) - 1.0 / n_keys  # the keys' speeds about their mean: b takes their common level
        measured = centring @ self.theta[:n_keys]
        noise = np.trace(centring @ self.covariance[:n_keys, :n_keys] @ centring)
        excess = (measured @ measured - noise) / (n_keys - 1)
        return float(min(PRIOR_SD, max(MIN_SPREAD, math.sqrt(max(excess, 0.0)))))

    def _fit(self, rows, prior_sd: float) -> None:
        n_keys, n_jobs = len(self.keys), len(self.jobs)
        knots = slice(2 * n_keys, 2 * n_keys + KNOTS)
        size = 2 * n_keys + KNOTS + n_jobs
        normal = np.zeros((size, size))
        rhs = np.zeros(size)
        for key, x, var, share, job in rows:
            k = self.keys.index(key)
            row = np.zeros(size)
            row[k], row[n_keys + k] = 1.0, share - self.centre[key]
            row[knots] = _hat(share)
            if job is not None:
                row[knots.stop + self.jobs.index(job)] = 1.0
            normal += np.outer(row, row) / var
            rhs += row * x / var
        prior = np.zeros(size)
        prior[:n_keys], prior[n_keys:2 * n_keys] = prior_sd ** -2, DRIFT ** -2
        prior[knots], prior[knots.stop:] = BIAS_SD ** -2, JOB_LEVEL_SD ** -2
        normal += np.diag(prior)
        second = np.zeros((KNOTS - 2, size))
        for j in range(KNOTS - 2):
            second[j, 2 * n_keys + j:2 * n_keys + j + 3] = (1.0, -2.0, 1.0)
        normal += second.T @ second / SMOOTHNESS ** 2
        self.covariance = np.linalg.inv(normal)
        self.theta = self.covariance @ rhs

    def share(self, loss: float) -> float:
        """How much of the way from the first loss to the target ``loss`` lies (0 to 1)."""
        way = self.first_loss - self.target_loss
        return min(1.0, max(0.0, (self.first_loss - loss) / way)) if way > 0 else 0.0

    def at(self, key: Any, loss: float) -> Speed:
        """log ρ̃ of ``key`` at ``loss``; for a key without a clear stint, the measured keys' mean give or take
        their spread (the reference's own pace, 0, when none is measured). Not the reference's pace once keys
        are measured: the reference is off by b (rule 5), and an unmeasured key at 0 would look faster than
        every measured one when b is positive (at the paper's scale in simulation, the tuner "exploited" such
        keys, 100% sure, and lost)."""
        if key not in self.keys:
            level = float(np.mean(self.theta[:len(self.keys)])) if self.keys else 0.0
            return Speed(level, self.spread ** 2)
        k, n_keys = self.keys.index(key), len(self.keys)
        row = np.zeros(len(self.theta))
        row[k], row[n_keys + k] = 1.0, self.share(loss) - self.centre[key]
        return Speed(float(row @ self.theta), float(row @ self.covariance @ row))


def _stints(keys: Sequence[Any], slopes: Sequence[SegmentSlope | None], reference: Reference):
    """Runs of consecutive segments of one key (of one job: the key then holds it), each segment as (speed, its
    standard error, its mean loss)."""
    key_before, stint = object(), []
    for key, s in zip(keys, slopes):
        rate = reference.rate(s.loss_mid) if s is not None else None
        if rate is None or not s.slope_se > 0:
            continue
        if key != key_before and stint:
            yield key_before, stint
            stint = []
        key_before = key
        stint.append((-s.slope / rate, s.slope_se / rate, s.loss_mid))
    if stint:
        yield key_before, stint


def _pooled(stint: list[tuple[float, float, float]]) -> tuple[float, float, float]:
    """A stint's inverse-variance mean speed, its standard error, and its weighted mean loss."""
    weights = np.array([se ** -2 for _, se, _ in stint])
    speeds, losses = np.array([s for s, _, _ in stint]), np.array([l for _, _, l in stint])
    total = weights.sum()
    return float(weights @ speeds / total), float(total ** -0.5), float(weights @ losses / total)


def _hat(share: float) -> np.ndarray:
    """Piecewise-linear (hat) basis on :data:`KNOTS` evenly spaced knots over [0, 1], at ``share``."""
    position = min(max(share, 0.0), 1.0) * (KNOTS - 1)
    basis = np.zeros(KNOTS)
    low = min(int(position), KNOTS - 2)
    basis[low], basis[low + 1] = low + 1 - position, position - low
    return basis
