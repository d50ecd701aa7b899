"""The paper's estimator: the Hogwild! convergence bound, fitted online (DESIGN §4)."""

from __future__ import annotations

import math

import numpy as np

from tfonline.estimator._base import BaseEstimator, Segment, fit_rate, fit_slope, smooth
from tfonline.exceptions import ConfigurationError

CURVE_SHARE = 0.5  # the later half of the job so far gives the curve's exponent
CURVE_MIN_POINTS = 100  # points in the later half, at least 5 per bin
CURVE_BINS = 20
MIN_EXPONENT = 0.05
EXPONENT_T = 3.0  # standard errors the fitted exponent must be from the bound's 1 to replace it


class HogwildEstimator(BaseEstimator):
    """``k − j ≈ α·(g(l_k) − g(l_j))`` with ``g(l) = log(β/l)/l``; remaining ``T = α·(g(ε) − g(l))``.

    This is the paper's Eq. 3–5 with two changes, both measured on real
    LogR runs (NOTES.md) to remove a large underestimate:

    - **β from the job, when the caller gives the job's history.** β is the
      largest smoothed loss of the job so far (normally its first), capped by
      2κ·l_0 when a condition number κ = L/c is given. The bound then
      describes the run from its start (β = L·D0 with D0 the distance of the
      *initial* model), so the curvature seen so far constrains it. Without
      history, β is the segment's largest smoothed loss, capped by 2κ·l_j
      (the paper's rule). A segment-local β makes the curve nearly a straight
      line over the segment, and the estimate a linear extrapolation that
      ignores the slow-down to come.
    - **α from regressing g(l_k) on k − j**, not k − j on g(l_k). The
      iterations are exact and the noise is in the loss; the paper's
      direction suffers regression dilution and shrinks α (so T) towards 0.
      g is taken on losses smoothed by a centred moving average of
      :data:`~tfonline.estimator._base.SMOOTHING_WINDOW` points (after the
      outlier filter), and the slope is fitted with an intercept, so a noisy
      l_j does not anchor the curve; with history, the segment's slope is
      combined with the job's (:func:`~tfonline.estimator._base.fit_rate`).
      α is the inverse slope; a slope that is not clearly positive means no
      progress, and the estimator says so (None).

    And one change measured on the benchmark's runs (NOTES.md, 2026-11-25):

    - **The curve's exponent from the job.** The bound has g grow linearly in
      the iterations; on real jobs it slows down: on the benchmark's LogR, g
      grew as k^0.41-0.51 (k: the job's iterations) over every stretch
      measured, and the line, extrapolated from a quarter of the run, said
      44% too few iterations were left (its job-wide rate comes mostly from
      the fast start). With history, g = A·k^p is fitted over
      the later :data:`CURVE_SHARE` of the job (:meth:`_fit_power`) and the
      remaining iterations are k(ε) − k(l) along it. The exponent replaces
      the bound's 1 only when it is at least :data:`EXPONENT_T` standard
      errors from it, and never above 1 (an exponent above 1, seen while a
      CNN's loss first drops, would extrapolate an acceleration); otherwise
      the line above stands.

    Args:
        condition_number: κ = L/c of the problem, when known.
    """

    name = "hogwild"

    def __init__(self, condition_number: float | None = None):
        super().__init__()
        if condition_number is not None and not (isinstance(condition_number, (int, float))
                                                 and not isinstance(condition_number, bool) and condition_number >= 1):
            raise ConfigurationError(f"condition_number must be a number >= 1 or None, got {condition_number!r}")
        self.condition_number = condition_number
        self.alpha = math.nan
        self.beta = math.nan
        self.exponent = 1.0
        self.scale = math.nan  # A of g = A·k^p, with k the job's iterations; NaN: the paper's line

    def _fit(self, segment: Segment) -> str | None:
        smoothed = smooth(segment.losses)
        if segment.history_losses.size:
            beta = float(smooth(segment.job_losses).max())
            first_loss = float(segment.history_losses[0])
        else:
            beta = float(smoothed.max())
            first_loss = segment.start_loss
        if self.condition_number is not None:
            beta = min(beta, 2.0 * self.condition_number * first_loss)
        if beta <= 0:
            return "every loss of the segment is 0"
        self.beta = beta
        rate, reason = fit_rate(segment, self._g)
        if rate is None:
            return reason
        self.alpha = 1.0 / rate
        self.exponent, self.scale = 1.0, math.nan
        if segment.history_t.size:
            self._fit_power(segment)
        return None

    def _fit_power(self, segment: Segment) -> None:
        """g = A·k^p over the later half of the job (k: its iterations from its first), when p is clearly below 1.

        g is taken of the mean loss in each of :data:`CURVE_BINS` bins of equal width in log k, so the
        noise is averaged before g bends it; p is the least-squares slope of log g on log k.
        """
        t, losses = segment.job_t, segment.job_losses
        k = t - t[0] + 1.0
        later = k >= k[-1] * (1.0 - CURVE_SHARE)
        if later.sum() < CURVE_MIN_POINTS:
            return
        logk = np.log(k[later])
        edges = np.linspace(logk[0], logk[-1], CURVE_BINS + 1)
        which = np.clip(np.searchsorted(edges, logk, side="right") - 1, 0, CURVE_BINS - 1)
        counts = np.bincount(which, minlength=CURVE_BINS)
        full = counts > 0
        x = np.bincount(which, logk, CURVE_BINS)[full] / counts[full]
        g = self._g(np.bincount(which, losses[later], CURVE_BINS)[full] / counts[full])
        usable = np.isfinite(g) & (g > 0)
        if usable.sum() < CURVE_BINS // 2:
            return
        p, stderr = fit_slope(x[usable], np.log(g[usable]))
        if not (p > 0 and 1.0 - p >= EXPONENT_T * stderr):
            return  # not rising, not told apart from the bound's own exponent 1, or above it
        self.exponent = float(max(p, MIN_EXPONENT))
        self.scale = float(math.exp(np.mean(np.log(g[usable])) - self.exponent * np.mean(x[usable])))

    def _g(self, loss):
        with np.errstate(divide="ignore", invalid="ignore"):
            return np.log(self.beta / loss) / loss

    def iterations_to(self, loss: float) -> float:
        """The fitted line's iterations from where its g is 0 (the loss β) to ``loss``."""
        return self.alpha * float(self._g(loss))

    def trend_iterations(self, current_loss: float, target_loss: float) -> float | None:
        """Along g = A·k^p, the job's own curve, when its exponent was told apart from 1; else the line's."""
        remaining = self.remaining_iterations(current_loss, target_loss)
        if not remaining or math.isnan(self.scale):
            return remaining
        k = [(max(float(self._g(loss)), 0.0) / self.scale) ** (1.0 / self.exponent)
             for loss in (target_loss, min(current_loss, math.e * self.beta))]
        return max(0.0, k[0] - k[1]) if math.isfinite(k[0]) else None

    def _remaining(self, current_loss, target_loss):
        # g falls with the loss only below e·β; above that, count from there.
        current_loss = min(current_loss, math.e * self.beta)
        return self.iterations_to(target_loss) - self.iterations_to(current_loss), None
