"""The contract of a progress estimator, and the clean-up every estimator shares."""

from __future__ import annotations

import abc
import logging
import math
from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np

from tfonline.exceptions import ConfigurationError

logger = logging.getLogger("tfonline")

OUTLIER_WINDOW = 7
OUTLIER_Z = 3.5
PROGRESS_T = 2.0
SMOOTHING_WINDOW = 5
MAX_HISTORY_POINTS = 2000


def smooth(losses: np.ndarray, window: int = SMOOTHING_WINDOW) -> np.ndarray:
    """Centred moving average over ``window`` points (shorter at the ends)."""
    if losses.size <= 2 or window <= 1:
        return losses.copy()
    half = window // 2
    cumsum = np.concatenate([[0.0], np.cumsum(losses)])
    idx = np.arange(losses.size)
    lo, hi = np.maximum(0, idx - half), np.minimum(losses.size, idx + half + 1)
    return (cumsum[hi] - cumsum[lo]) / (hi - lo)


def fit_slope(t: np.ndarray, y: np.ndarray) -> tuple[float, float]:
    """Ordinary least-squares slope of ``y`` on ``t`` (with an intercept), and its standard error.

    ``t`` (iterations) is exact and the noise is in ``y`` (a function of the
    loss), so this regression is unbiased; regressing ``t`` on a noisy ``y``
    would shrink the slope's inverse towards 0 (regression dilution).
    """
    tc = t - t.mean()
    sxx = float(np.dot(tc, tc))
    if sxx <= 0:
        return 0.0, math.inf
    slope = float(np.dot(tc, y - y.mean())) / sxx
    if t.size <= 2:
        return slope, math.inf
    residuals = y - y.mean() - slope * tc
    return slope, math.sqrt(float(np.dot(residuals, residuals)) / (t.size - 2) / sxx)


def fit_rate(segment: "Segment", g: Callable[[np.ndarray], np.ndarray]) -> tuple[float | None, str | None]:
    """How fast ``g(loss)`` grows per iteration in a segment: the estimators' *speed*.

    ``g`` maps a loss to a quantity that the estimator's model says grows
    linearly in the iterations. It is applied to the segment's losses
    smoothed by a centred moving average of :data:`SMOOTHING_WINDOW` points,
    and the slope is fitted by :func:`fit_slope`.

    A short segment of a noisy job says little about its speed: over 60
    iterations late in a LogR run the trend moves less than one minibatch's
    noise. When the job's history is given, the segment's slope is therefore
    combined with the slope over the history, each weighted by its inverse
    squared standard error: a long, clear segment speaks for itself, a short
    noisy one leans on the job's speed so far.

    Returns:
        ``(rate, None)``, or ``(None, reason)`` when the loss does not go
        down: the slope is not positive by at least :data:`PROGRESS_T`
        standard errors. Without this rule a flat, noisy segment fits a tiny
        positive rate, and its estimate becomes a huge number that means
        nothing.
    """
    slope, stderr = _slope_of(segment.t, g(smooth(segment.losses)))
    if segment.history_t.size >= 3:
        h_slope, h_stderr = _slope_of(segment.history_t, g(smooth(segment.history_losses)))
        if math.isfinite(h_stderr) and h_stderr > 0 and math.isfinite(stderr) and stderr > 0:
            w, h_w = stderr ** -2, h_stderr ** -2
            slope, stderr = (w * slope + h_w * h_slope) / (w + h_w), (w + h_w) ** -0.5
        elif not (math.isfinite(stderr) and stderr > 0):
            slope, stderr = h_slope, h_stderr
    if not (slope > 0 and slope >= PROGRESS_T * stderr):
        return None, "the segment shows no decrease of the loss"
    return slope, None


def _slope_of(t: np.ndarray, y: np.ndarray) -> tuple[float, float]:
    """:func:`fit_slope` on smoothed values; the standard error is scaled up by
    √:data:`SMOOTHING_WINDOW`, as smoothing makes neighbouring residuals alike
    and the plain formula would count each point's noise several times."""
    usable = np.isfinite(y)
    if usable.sum() < 2:
        return 0.0, math.inf
    slope, stderr = fit_slope(t[usable], y[usable])
    return slope, stderr * math.sqrt(SMOOTHING_WINDOW)


def _hampel_keep(losses: np.ndarray) -> np.ndarray:
    """Which losses a Hampel filter keeps (see :func:`clean_segment`)."""
    keep = np.ones(losses.size, dtype=bool)
    if losses.size < 3:
        return keep
    half = OUTLIER_WINDOW // 2
    padded = np.pad(losses, half, mode="constant", constant_values=np.nan)
    windows = np.lib.stride_tricks.sliding_window_view(padded, OUTLIER_WINDOW)
    median = np.nanmedian(windows, axis=1)
    mad = 1.4826 * np.nanmedian(np.abs(windows - median[:, None]), axis=1)
    return ~((mad > 0) & (np.abs(losses - median) > OUTLIER_Z * mad))


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
    keep = _hampel_keep(losses)
    dropped = int((~usable).sum() + (~keep).sum())
    return steps[keep], losses[keep], dropped


@dataclass(frozen=True)
class Segment:
    """One cleaned segment, as an estimator's :meth:`BaseEstimator._fit` sees it.

    Attributes:
        t: iterations since the segment's start (j), all > 0.
        losses: the loss after each of them.
        start_loss: the loss at the segment's start (l_j).
        history_t: iterations of the job before the segment, relative to j
            (all <= 0); empty when the caller gave no history.
        history_losses: the losses at ``history_t``.
    """

    t: np.ndarray
    losses: np.ndarray
    start_loss: float
    history_t: np.ndarray
    history_losses: np.ndarray

    @property
    def job_t(self) -> np.ndarray:
        """Iterations of the whole job so far (history, then the segment), relative to j."""
        return np.concatenate([self.history_t, self.t])

    @property
    def job_losses(self) -> np.ndarray:
        return np.concatenate([self.history_losses, self.losses])


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
            start_loss: float | None = None,
            history: tuple[Sequence[float], Sequence[float]] | None = None) -> BaseEstimator:
        """Fits the estimator on one segment; returns self.

        Args:
            steps: global steps of the segment's iterations, increasing.
            losses: the loss after each of those steps.
            start_step: the step before the segment (j); defaults to the
                step before the first one.
            start_loss: the loss at ``start_step`` (l_j); defaults to the
                first loss.
            history: ``(steps, losses)`` of the job's iterations before the
                segment, under whatever settings ran them. The built-ins
                take the curve's *shape* from the whole job and only its
                *speed* from the segment: the problem fixes the shape, the
                setting the speed. Cleaned like the segment; evenly thinned
                to :data:`MAX_HISTORY_POINTS` when longer.
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
        history_steps, history_losses = np.empty(0), np.empty(0)
        if history is not None:
            history_steps, history_losses, _ = clean_segment(*history)
            if history_steps.size and history_steps[-1] > j:
                raise ConfigurationError(
                    f"history must end at or before the segment's start step {j:g}, got a step {history_steps[-1]:g}")
            if history_steps.size > MAX_HISTORY_POINTS:
                keep = np.linspace(0, history_steps.size - 1, MAX_HISTORY_POINTS).round().astype(int)
                history_steps, history_losses = history_steps[keep], history_losses[keep]
        self.reason = self._fit(Segment(steps - j, losses, lj, history_steps - j, history_losses))
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
    def _fit(self, segment: Segment) -> str | None:
        """Fits on a cleaned segment; returns why it cannot, or None."""

    @abc.abstractmethod
    def _remaining(self, current_loss: float, target_loss: float) -> tuple[float | None, str | None]:
        """The remaining iterations, or None and the reason."""
