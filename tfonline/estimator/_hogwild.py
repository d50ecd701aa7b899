"""The paper's estimator: the Hogwild! convergence bound, fitted online (DESIGN §4)."""

from __future__ import annotations

import math

import numpy as np

from tfonline.estimator._base import BaseEstimator, Segment, fit_rate, smooth
from tfonline.exceptions import ConfigurationError


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
        return None

    def _g(self, loss):
        with np.errstate(divide="ignore", invalid="ignore"):
            return np.log(self.beta / loss) / loss

    def iterations_to(self, loss: float) -> float:
        """The fitted curve's iterations from where its g is 0 (the loss β) to ``loss``."""
        return self.alpha * float(self._g(loss))

    def _remaining(self, current_loss, target_loss):
        # g falls with the loss only below e·β; above that, count from there.
        current_loss = min(current_loss, math.e * self.beta)
        return self.iterations_to(target_loss) - self.iterations_to(current_loss), None
