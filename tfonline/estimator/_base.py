"""The contract of a progress estimator, and the clean-up every estimator shares."""

from __future__ import annotations

import abc
import logging
import math
from typing import Sequence

import numpy as np

from tfonline.exceptions import ConfigurationError

logger = logging.getLogger("tfonline")

OUTLIER_WINDOW = 7
OUTLIER_Z = 3.5
MIN_RELATIVE_DECREASE = 0.01


def shows_progress(losses: np.ndarray) -> bool:
    """Whether a segment's loss went down: the median of its last third is
    at least :data:`MIN_RELATIVE_DECREASE` below the median of its first third.

    Without this, a flat, noisy segment fits a tiny positive rate, and the
    estimate of iterations left becomes a huge number that means nothing.
    """
    third = max(1, losses.size // 3)
    return float(np.median(losses[-third:])) < (1 - MIN_RELATIVE_DECREASE) * float(np.median(losses[:third]))


def clean_segment(steps: Sequence[float], losses: Sequence[float]) -> tuple[np.ndarray, np.ndarray, int]:
    """Validates a segment and drops unusable and outlying points.

    - A loss that is NaN, infinite or negative is dropped with a logged
      warning: it says nothing about progress.
    - Steps must strictly increase: anything else is a caller's bug, and an
      error.
    - Outliers are removed with a Hampel filter: a loss more than
      ``OUTLIER_Z`` robust standard deviations (1.4826 x the median absolute
      deviation) away from the median of the ``OUTLIER_WINDOW`` points around
      it is dropped. SGD's occasional bad minibatch (a spike) goes; a steady
      trend stays, because the median follows it.

    Returns:
        ``(steps, losses, dropped)``: the kept points and how many were dropped.
    """
    steps = np.asarray(steps, dtype=float)
    losses = np.asarray(losses, dtype=float)
    if steps.shape != losses.shape or steps.ndim != 1:
        raise ConfigurationError(
            f"steps and losses must be 1-D sequences of one length, got {steps.shape} and {losses.shape}"
        )
    if steps.size > 1 and not np.all(np.diff(steps) > 0):
        i = int(np.argmax(np.diff(steps) <= 0))
        raise ConfigurationError(f"steps must strictly increase, got {steps[i + 1]:g} after {steps[i]:g}")
    usable = np.isfinite(losses) & (losses >= 0)
    if not usable.all():
        logger.warning("ignoring %d loss(es) that are NaN, infinite or negative", int((~usable).sum()))
    steps, losses = steps[usable], losses[usable]
    keep = np.ones(losses.size, dtype=bool)
    half = OUTLIER_WINDOW // 2
    for i in range(losses.size):
        window = losses[max(0, i - half): i + half + 1]
        if window.size < 3:
            continue
        median = np.median(window)
        mad = 1.4826 * np.median(np.abs(window - median))
        if mad > 0 and abs(losses[i] - median) > OUTLIER_Z * mad:
            keep[i] = False
    dropped = int((~usable).sum() + (~keep).sum())
    return steps[keep], losses[keep], dropped


def check_loss(name: str, value: float) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float, np.floating)) or not math.isfinite(value):
        raise ConfigurationError(f"{name} must be a finite number, got {value!r}")
    if value <= 0:
        raise ConfigurationError(f"{name} must be > 0, got {value!r}")
    return float(value)


class BaseEstimator(abc.ABC):
    """Estimates how many more iterations a job needs under one setting.

    An estimator is fitted on one *segment*: the iterations run under one
    setting, starting after step ``start_step`` from loss ``start_loss``.
    It then answers :meth:`remaining_iterations` for a current loss and a
    target. When it cannot answer (too few points, no progress seen, a
    target it thinks unreachable) it returns None and says why in
    :attr:`reason`; it never returns a negative number or NaN.

    Subclasses implement :meth:`_fit` and :meth:`_remaining`.
    """

    name: str = ""
    min_points: int = 5

    def __init__(self) -> None:
        self.fitted = False
        self.reason: str | None = "not fitted yet"
        self.points = 0
        self.dropped = 0

    def fit(self, steps: Sequence[float], losses: Sequence[float], start_step: float | None = None,
            start_loss: float | None = None) -> BaseEstimator:
        """Fits the estimator on one segment; returns self.

        Args:
            steps: global steps of the segment's iterations, increasing.
            losses: the loss after each of those steps.
            start_step: the step before the segment (j); defaults to the
                step before the first one.
            start_loss: the loss at ``start_step`` (l_j); defaults to the
                first loss.
        """
        steps, losses, self.dropped = clean_segment(steps, losses)
        self.points = int(steps.size)
        self.fitted = False
        if self.points < self.min_points:
            self.reason = f"need at least {self.min_points} usable points, got {self.points}"
            return self
        j = float(steps[0] - 1 if start_step is None else start_step)
        if start_step is not None and steps[0] <= j:
            raise ConfigurationError(f"start_step must be before the segment's first step {steps[0]:g}, got {j:g}")
        lj = float(losses[0] if start_loss is None else start_loss)
        if not math.isfinite(lj) or lj < 0:
            raise ConfigurationError(f"start_loss must be a finite number >= 0, got {start_loss!r}")
        if not shows_progress(losses):
            self.reason = "the segment shows no decrease of the loss"
            return self
        self.reason = self._fit(steps - j, losses, lj)
        self.fitted = self.reason is None
        return self

    def remaining_iterations(self, current_loss: float, target_loss: float) -> float | None:
        """Iterations still needed to go from ``current_loss`` to ``target_loss``.

        Returns 0 when the target is already reached, None (with
        :attr:`reason`) when the fit cannot say.
        """
        current_loss = check_loss("current_loss", current_loss)
        target_loss = check_loss("target_loss", target_loss)
        if target_loss >= current_loss:
            return 0.0
        if not self.fitted:
            return None
        remaining, reason = self._remaining(current_loss, target_loss)
        if remaining is None or not math.isfinite(remaining):
            self.reason = reason or "the fit gives no finite answer"
            return None
        return max(0.0, float(remaining))

    @abc.abstractmethod
    def _fit(self, t: np.ndarray, losses: np.ndarray, start_loss: float) -> str | None:
        """Fits on iterations ``t`` since the segment start; returns why it cannot, or None."""

    @abc.abstractmethod
    def _remaining(self, current_loss: float, target_loss: float) -> tuple[float | None, str | None]:
        """The remaining iterations, or None and the reason."""
