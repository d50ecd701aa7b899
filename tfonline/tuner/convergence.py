"""Each setting's convergence speed, relative to the job's own loss curve: progress per second, per setting.

The tuner's remaining time for a setting ``s`` at loss ``l`` is

    R̂(s, l) = t(s) × N(l) / ρ(s, l)

- ``t(s)``: the setting's time per iteration, measured on its segments;
- ``N(l)``: the iterations left from ``l`` to the target on the job's
  *reference curve*, the progress estimator fitted to the whole job so far
  (:class:`Reference`);
- ``ρ(s, l)``: the setting's progress per iteration relative to that curve,
  from its own segments (:func:`relative_speeds`). Asynchronous staleness, a
  synchronous job's larger batch, anything that changes how many iterations
  a setting needs, shows here: a setting whose loss falls half as fast per
  iteration as the curve at the same loss has ρ = 0.5, and needs twice the
  iterations.

Rules (plug-in estimators, no fitted model beyond the reference curve):

1. **A segment's speed.** The slope of its losses on its iterations (least
   squares with an intercept, the estimators' outlier filter first,
   :func:`segment_slope`), divided by the reference curve's slope at the
   segment's mean loss. Its standard error comes from the regression.
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
3. **A segment's speed ρ̃.** The inverse-variance mean of a prior,
   ρ = 1 (the job's own pace) with standard deviation :data:`PRIOR_SD`, and
   every segment that shares its speed, each with its variance plus
   (:data:`DRIFT` × their distance in the share of the loss's way)²: a
   setting's speed may change as the loss falls, so segments at distant
   losses count less. A short, noisy segment leans on the prior and on its
   setting's other segments; a long clear one speaks for itself.
4. ρ̃ is at least :data:`MIN_SPEED`: a setting whose loss does not fall
   is 1/MIN_SPEED times slower, not infinitely.
5. **The reference's own error.** The estimator's curve is not the job's:
   its pace may be right at one loss and 30% off at another, and a setting
   run only late would then look slower than one run only early. Each
   measured speed is divided by a factor common to every setting in its
   band of the loss's way (:meth:`Speeds._bias`, a two-way model fitted by
   weighted least squares), so that settings are compared with each other
   near the same loss, and the reference only carries a speed across bands.

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
# How much a setting's log speed may change over the loss's whole way from the first loss to the target.
DRIFT = 0.5
MIN_SPEED = 0.05
# A segment measures a speed when its loss falls by at least this many standard errors.
CLEAR_T = 2.0
# The reference's error along the loss's way (rule 5): knots, and how much its slope may change between knots.
KNOTS = 11
SMOOTHNESS = 0.1
# ... and how far off it may be at a knot, give or take (its level: with none, the settings' speeds would be known
# only relative to each other, and each one's variance would be the prior's).
BIAS_SD = 1.0
# A segment with fewer usable points than this has no slope of its own.
MIN_POINTS = 5


@dataclass(frozen=True)
class SegmentSlope:
    """How the loss fell in one segment: a least-squares line through its losses."""

    loss_mid: float  # the line's loss at the segment's mean iteration (the mean loss)
    slope: float  # loss per iteration: negative while the loss falls
    slope_se: float


# The knobs a setting's convergence speed depends on, besides the user's own (rule 2).
SPEED_KNOBS = ("worker",)


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
    (rule 1; segments whose loss does not fall clearly, by
    :data:`CLEAR_T` standard errors, measure nothing in logs and are left
    out), weighted by its variance:

        log ρ̂_i = θ(key_i) + θ'(key_i)·(share_i − share̅(key_i)) + b(share_i) + ε_i

    - θ: each key's log speed, prior N(0, :data:`PRIOR_SD`²);
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

    Args:
        keys: each segment's :func:`speed_key`.
        slopes: each segment's :class:`SegmentSlope`, None when it has none.
        reference: the job's curve.
        first_loss: the start of the loss's way (its end is the target).
    """

    def __init__(self, keys: Sequence[Any], slopes: Sequence[SegmentSlope | None], reference: Reference,
                 first_loss: float):
        self.first_loss, self.target_loss = first_loss, reference.target_loss
        rows = []  # (key, log ρ measured against the reference, its variance, share of the way)
        for key, s in zip(keys, slopes):
            rate = reference.rate(s.loss_mid) if s is not None else None
            if rate is not None and s.slope_se > 0 and -s.slope >= CLEAR_T * s.slope_se:
                rows.append((key, math.log(-s.slope / rate), (s.slope_se / s.slope) ** 2, self.share(s.loss_mid)))
        self.keys = sorted({row[0] for row in rows}, key=repr)
        self.centre = {k: float(np.mean([r[3] for r in rows if r[0] == k])) for k in self.keys}
        self._fit(rows)

    def _fit(self, rows) -> None:
        n_keys = len(self.keys)
        size = 2 * n_keys + KNOTS
        normal = np.zeros((size, size))
        rhs = np.zeros(size)
        for key, x, var, share in rows:
            k = self.keys.index(key)
            row = np.zeros(size)
            row[k], row[n_keys + k] = 1.0, share - self.centre[key]
            row[2 * n_keys:] = _hat(share)
            normal += np.outer(row, row) / var
            rhs += row * x / var
        prior = np.zeros(size)
        prior[:n_keys], prior[n_keys:2 * n_keys] = PRIOR_SD ** -2, DRIFT ** -2
        prior[2 * n_keys:] = BIAS_SD ** -2
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
        """log ρ̃ of ``key`` at ``loss``: the prior for a key without a clear segment."""
        if key not in self.keys:
            return Speed(0.0, PRIOR_SD ** 2)
        k, n_keys = self.keys.index(key), len(self.keys)
        row = np.zeros(len(self.theta))
        row[k], row[n_keys + k] = 1.0, self.share(loss) - self.centre[key]
        return Speed(float(row @ self.theta), float(row @ self.covariance @ row))


def _hat(share: float) -> np.ndarray:
    """Piecewise-linear (hat) basis on :data:`KNOTS` evenly spaced knots over [0, 1], at ``share``."""
    position = min(max(share, 0.0), 1.0) * (KNOTS - 1)
    basis = np.zeros(KNOTS)
    low = min(int(position), KNOTS - 2)
    basis[low], basis[low + 1] = low + 1 - position, position - low
    return basis
