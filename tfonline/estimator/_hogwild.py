"""The paper's estimator: the Hogwild! convergence bound, fitted online (DESIGN §4)."""

from __future__ import annotations

import math

import numpy as np

from tfonline.estimator._base import BaseEstimator

SMOOTHING_WINDOW = 5


def smooth(losses: np.ndarray, window: int = SMOOTHING_WINDOW) -> np.ndarray:
    """Centred moving average over ``window`` points (shorter at the ends)."""
    if losses.size <= 2 or window <= 1:
        return losses.copy()
    half = window // 2
    cumsum = np.concatenate([[0.0], np.cumsum(losses)])
    idx = np.arange(losses.size)
    lo, hi = np.maximum(0, idx - half), np.minimum(losses.size, idx + half + 1)
    return (cumsum[hi] - cumsum[lo]) / (hi - lo)


class HogwildEstimator(BaseEstimator):
    """``k - j ≈ (α/l_k)·log(β/l_k)``; remaining ``T = (α/ε)log(β/ε) − (α/l)log(β/l)``.

    The rule implemented (DESIGN §4, paper Eq. 3–5):

    - Losses are cleaned (see :func:`clean_segment`), then smoothed by a
      centred moving average of :data:`SMOOTHING_WINDOW` points.
    - β is the largest smoothed loss of the segment, so every log term is
      ≥ 0 and the curve starts near the segment's start. With a condition
      number κ = L/c it is capped by the bound 2κ·l_j.
    - α is the least-squares fit through the origin of ``y = k − j`` on
      ``x = log(β/l_k)/l_k``: α = Σxy / Σx², clipped at 0. An α of 0 means
      the segment showed no progress, and the estimator then says so
      (None) instead of claiming zero iterations left.

    Args:
        condition_number: κ = L/c of the problem, when known.
    """

    name = "hogwild"

    def __init__(self, condition_number: float | None = None):
        super().__init__()
        if condition_number is not None and not (isinstance(condition_number, (int, float))
                                                 and condition_number >= 1):
            from tfonline.exceptions import ConfigurationError

            raise ConfigurationError(f"condition_number must be a number >= 1 or None, got {condition_number!r}")
        self.condition_number = condition_number
        self.alpha = math.nan
        self.beta = math.nan

    def _fit(self, t, losses, start_loss):
        smoothed = smooth(losses)
        beta = float(smoothed.max())
        if self.condition_number is not None:
            beta = min(beta, 2.0 * self.condition_number * start_loss)
        if beta <= 0:
            return "every loss of the segment is 0"
        positive = smoothed > 0
        x = np.log(beta / smoothed[positive]) / smoothed[positive]
        y = t[positive]
        denominator = float(np.dot(x, x))
        alpha = max(0.0, float(np.dot(x, y)) / denominator) if denominator > 0 else 0.0
        self.alpha, self.beta = alpha, beta
        if alpha == 0.0:
            return "the segment shows no decrease of the loss"
        return None

    def iterations_to(self, loss: float) -> float:
        """The fitted curve's iterations from the segment start to ``loss``."""
        return self.alpha / loss * math.log(self.beta / loss)

    def _remaining(self, current_loss, target_loss):
        return self.iterations_to(target_loss) - self.iterations_to(current_loss), None
