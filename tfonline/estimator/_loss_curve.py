"""Optimus's estimator: ``l(k) = 1/(β0·k + β1) + β2`` fitted to the loss curve (DESIGN §4)."""

from __future__ import annotations

import math

import numpy as np
from scipy.optimize import least_squares

from tfonline.estimator._base import BaseEstimator, Segment, fit_rate

FLOOR_Z = 2.0


def fit_curve(t: np.ndarray, losses: np.ndarray) -> tuple[tuple[float, float, float], float]:
    """Bounded least-squares fit of ``l(t)/scale = 1/(β0·t + β1) + β2``, all β ≥ 0.

    Losses are divided by their largest value (``scale``) first, as Optimus
    does, and fitted with scipy's trust-region reflective method.

    Returns:
        ``((β0, β1, β2), scale)``.
    """
    scale = float(losses.max())
    y = losses / scale
    t = t - t[0] + 1.0

    def residuals(b):
        return 1.0 / (b[0] * t + b[1]) + b[2] - y

    floor = 0.5 * float(y.min())
    first = max(float(y[0]) - floor, 1e-3)
    last = max(float(y[-1]) - floor, 1e-3)
    slope = max((1.0 / last - 1.0 / first) / max(float(t[-1] - t[0]), 1.0), 1e-9)
    guess = np.array([slope, 1.0 / first, floor])
    fit = least_squares(residuals, guess, bounds=([0.0, 1e-9, 0.0], [np.inf, np.inf, np.inf]), method="trf")
    dof = y.size - 3
    floor_stderr = math.inf
    if dof > 0:
        try:
            covariance = np.linalg.inv(fit.jac.T @ fit.jac) * (2.0 * fit.cost / dof)
            floor_stderr = float(math.sqrt(max(covariance[2, 2], 0.0)))
        except np.linalg.LinAlgError:
            pass
    return tuple(float(v) for v in fit.x), scale, floor_stderr


class LossCurveEstimator(BaseEstimator):
    """Optimus's loss curve: the floor from the job, the speed from the segment.

    - **Shape.** ``l(t) = 1/(β0·t + β1) + β2`` is fitted (:func:`fit_curve`)
      on the whole job so far when the caller gives its history, as Optimus
      does, else on the segment. Only its floor ``β2`` (in loss units,
      :attr:`floor`) is kept: the problem sets how low the loss can go.
    - **Speed.** Along that curve ``g(l) = 1/(l − floor)`` grows linearly in
      the iterations, at rate β0/scale for the setting that ran them: the
      least-squares slope of g over the segment's smoothed losses above the
      floor, combined with the job's when history is given
      (:func:`~tfonline.estimator._base.fit_rate`); a slope that is not
      clearly positive means no progress (None).
    - **Remaining.** ``(g(ε) − g(l))/β0``. When the target is at or below the
      floor it is unreachable under this fit: the estimator returns None and
      says so in :attr:`reason`.
    """

    name = "loss-curve"

    def __init__(self) -> None:
        super().__init__()
        self.beta = (math.nan, math.nan, math.nan)
        self.scale = math.nan
        self.rate = math.nan
        self.floor = math.nan
        self.floor_stderr = math.nan

    def _fit(self, segment: Segment) -> str | None:
        t, losses = (segment.job_t, segment.job_losses) if segment.history_t.size else (segment.t, segment.losses)
        if float(losses.max()) <= 0:
            return "every loss of the segment is 0"
        self.beta, self.scale, floor_stderr = fit_curve(t, losses)
        self.floor_stderr = floor_stderr * self.scale
        self.floor = max(0.0, self.beta[2] * self.scale - FLOOR_Z * self.floor_stderr)
        rate, reason = fit_rate(segment, self._g)
        if rate is None:
            return reason
        self.rate = rate
        return None

    def _g(self, loss):
        """1/(l − floor), NaN at or below the floor (those points are left out of the fit)."""
        gap = np.asarray(loss, dtype=float) - self.floor
        return np.where(gap > 0, 1.0 / np.where(gap > 0, gap, 1.0), np.nan)

    def iterations_to(self, loss: float) -> float:
        """Iterations along the fitted curve from where g is 0 to ``loss`` (inf at or below the floor)."""
        if loss <= self.floor:
            return math.inf
        return 1.0 / (loss - self.floor) / self.rate

    def _remaining(self, current_loss, target_loss):
        if target_loss <= self.floor:
            return None, (f"target {target_loss:g} is at or below the fitted floor {self.floor:.4g}: "
                          "unreachable under this fit")
        return self.iterations_to(target_loss) - self.iterations_to(current_loss), None
