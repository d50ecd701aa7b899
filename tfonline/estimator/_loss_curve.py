"""Optimus's estimator: ``l(k) = 1/(β0·k + β1) + β2`` fitted to the loss curve (DESIGN §4)."""

from __future__ import annotations

import math

import numpy as np
from scipy.optimize import least_squares

from tfonline.estimator._base import BaseEstimator


class LossCurveEstimator(BaseEstimator):
    """Fits ``l(t) = 1/(β0·t + β1) + β2``, all β ≥ 0, on a segment.

    Losses are cleaned (see :func:`clean_segment`) and divided by their
    largest value before a bounded non-linear least-squares fit (scipy's
    trust-region reflective method). From the closed form, the iterations to
    reach loss ``x`` are ``k(x) = (1/(x − β2) − β1)/β0``; the remaining
    iterations are ``k(ε) − k(l)``. When the target is at or below the
    fitted floor β2 it is unreachable under this fit: the estimator returns
    None and says so in :attr:`reason`.
    """

    name = "loss-curve"

    def __init__(self) -> None:
        super().__init__()
        self.beta = (math.nan, math.nan, math.nan)
        self.scale = math.nan

    def _fit(self, t, losses, start_loss):
        scale = float(losses.max())
        if scale <= 0:
            return "every loss of the segment is 0"
        y = losses / scale

        def residuals(b):
            return 1.0 / (b[0] * t + b[1]) + b[2] - y

        floor = 0.5 * float(y.min())
        first = max(float(y[0]) - floor, 1e-3)
        last = max(float(y[-1]) - floor, 1e-3)
        slope = max((1.0 / last - 1.0 / first) / max(float(t[-1] - t[0]), 1.0), 1e-9)
        guess = np.array([slope, 1.0 / first, floor])
        fit = least_squares(residuals, guess, bounds=([0.0, 1e-9, 0.0], [np.inf, np.inf, np.inf]), method="trf")
        b0, b1, b2 = (float(v) for v in fit.x)
        self.beta, self.scale = (b0, b1, b2), scale
        if b0 <= 0:
            return "the segment shows no decrease of the loss"
        return None

    def iterations_to(self, loss: float) -> float:
        """The fitted curve's iterations from the segment start to ``loss`` (inf at or below the floor)."""
        b0, b1, b2 = self.beta
        x = loss / self.scale
        if x <= b2:
            return math.inf
        return (1.0 / (x - b2) - b1) / b0

    def _remaining(self, current_loss, target_loss):
        floor = self.beta[2] * self.scale
        if target_loss <= floor:
            return None, f"target {target_loss:g} is at or below the fitted floor {floor:.4g}: unreachable under this fit"
        return self.iterations_to(target_loss) - max(0.0, self.iterations_to(current_loss)), None
