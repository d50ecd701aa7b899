"""The contract of a progress estimator, and the clean-up every estimator shares."""

from __future__ import annotations

import abc
import logging
import math
from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np
from scipy.signal import lfilter

from tfonline.exceptions import ConfigurationError

logger = logging.getLogger("tfonline")

OUTLIER_WINDOW = 7
OUTLIER_Z = 3.5
PROGRESS_T = 2.0
SMOOTHING_WINDOW = 5
MAX_HISTORY_POINTS = 2000
NOISE_WINDOW = 101  # the centred moving average the losses' noise is measured around (points)
NOISE_POINTS = 1000  # the latest points of the job the noise is measured on
CROSSING_PATHS = 64  # simulated paths of the smoothed loss (seeded: the same fit gives the same answer)
CROSSING_SPAN = 4.0  # paths start where the trend is this many deviations of the average above the target
CROSSING_GRID = 200  # losses at which the trend's iterations are read
CROSSING_MAX_ITERATIONS = 50_000  # the most iterations a path is simulated for (about 0.1 s)
CROSSING_HORIZON = 1e9  # a trend further from the target than this many iterations is not simulated


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


def _window_medians(windows: np.ndarray, half: int) -> np.ndarray:
    """Each row's median, where only the first and last ``half`` rows hold NaN (the padding): the
    middle element of a partition for the rows between (the same value as :func:`numpy.nanmedian`, several
    times faster on a long job's history), :func:`numpy.nanmedian` for the rest."""
    medians = np.empty(len(windows))
    inner = slice(half, max(half, len(windows) - half))
    medians[inner] = np.partition(windows[inner], half, axis=1)[:, half]
    for edge in (slice(0, half), slice(inner.stop, len(windows))):
        medians[edge] = np.nanmedian(windows[edge], axis=1)
    return medians


def _hampel_keep(losses: np.ndarray) -> np.ndarray:
    """Which losses a Hampel filter keeps (see :func:`clean_segment`)."""
    keep = np.ones(losses.size, dtype=bool)
    if losses.size < 3:
        return keep
    half = OUTLIER_WINDOW // 2
    padded = np.pad(losses, half, mode="constant", constant_values=np.nan)
    windows = np.lib.stride_tricks.sliding_window_view(padded, OUTLIER_WINDOW)
    median = _window_medians(windows, half)
    mad = 1.4826 * _window_medians(np.abs(windows - median[:, None]), half)
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


def _scatter(losses: np.ndarray) -> np.ndarray:
    """The latest losses' relative deviations from their trend (:meth:`BaseEstimator.iterations_to_cross`):
    each of the latest :data:`NOISE_POINTS` losses (spikes kept: the smoothed loss averages them) over
    the centred moving average of :data:`NOISE_WINDOW` of them, less 1. Relative, as a loss's noise
    shrinks with it. Empty with fewer than 3 windows of points."""
    latest = losses[-NOISE_POINTS:]
    if latest.size < 3 * NOISE_WINDOW:
        return np.empty(0)
    average = smooth(latest, NOISE_WINDOW)
    return latest / average - 1.0 if np.all(average > 0) else np.empty(0)


def _first_crossing(trend: Callable[[np.ndarray], np.ndarray], begin: int, end: int, average: float, a: float,
                    scatter: np.ndarray, target: float) -> float:
    """The median over :data:`CROSSING_PATHS` paths of the iterations (from now) until an exponential
    average (weight ``a``) of ``trend(k)`` plus a deviation drawn from ``scatter``, at ``average`` after
    iteration ``begin``, first reaches ``target``; a path that does not by ``end`` counts at ``end``. The
    paths stop once more than half of them crossed: the median no longer changes."""
    rng = np.random.default_rng(0)
    state = np.full((CROSSING_PATHS, 1), (1.0 - a) * average)
    crossed = np.full(CROSSING_PATHS, float(end))
    k = begin
    while k < end and np.sum(crossed < end) <= CROSSING_PATHS // 2:  # until the median is known
        ks = np.arange(k + 1, min(end, k + 4096) + 1, dtype=float)
        x = trend(ks)[None, :] * (1.0 + scatter[rng.integers(0, scatter.size, (CROSSING_PATHS, ks.size))])
        y, state = lfilter([a], [1.0, a - 1.0], x, axis=1, zi=state)
        hit = y <= target
        crossed = np.minimum(crossed, np.where(hit.any(axis=1), ks[np.argmax(hit, axis=1)], end))
        k = int(ks[-1])
    return float(np.median(crossed))


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
        self.scatter = np.empty(0)

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
                setting the speed. Cleaned like the segment; when longer than
                :data:`MAX_HISTORY_POINTS`, cut into that many runs of
                consecutive points, each replaced by its mean (a mean keeps
                what its points say of the curve, a thinned point drops it).
        """
        raw = np.asarray(steps, dtype=float), np.asarray(losses, dtype=float)
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
        if history is not None:
            raw = tuple(np.concatenate([np.asarray(h, dtype=float), r]) for h, r in zip(history, raw))
        self.scatter = _scatter(raw[1][np.isfinite(raw[1]) & (raw[1] >= 0)])
        if history_steps.size > MAX_HISTORY_POINTS:
            size, longer = divmod(history_steps.size, MAX_HISTORY_POINTS)  # the first `longer` runs hold one more
            starts = np.arange(MAX_HISTORY_POINTS) * size + np.minimum(np.arange(MAX_HISTORY_POINTS), longer)
            sizes = np.diff(np.append(starts, history_steps.size))
            history_steps = np.add.reduceat(history_steps, starts) / sizes
            history_losses = np.add.reduceat(history_losses, starts) / sizes
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

    def trend_iterations(self, current_loss: float, target_loss: float) -> float | None:
        """Iterations the loss's trend takes from ``current_loss`` to ``target_loss`` along the curve the
        job has followed so far: :meth:`remaining_iterations` unless an estimator knows better (the
        Hogwild! estimator fits the curve's exponent)."""
        return self.remaining_iterations(current_loss, target_loss)

    def iterations_to_cross(self, smoothed_loss: float, target_loss: float,
                            smoothing_window: int | None) -> float | None:
        """Iterations until the job's smoothed loss first reaches ``target_loss``: when the job stops.

        A job stops when its smoothed loss, an exponential average over
        ``smoothing_window`` iterations, reaches the target. Noise makes that
        average dip below the loss's trend, so it crosses the target before
        the trend does: by more the flatter the curve near the target and
        the noisier the losses. (On the benchmark's LogR, the trend was 0.56
        when the smoothed loss crossed 0.54; the CNN's 0.10 when it crossed
        0.045.) The rule:

        - the trend goes from ``smoothed_loss`` along this estimator's curve
          (:meth:`trend_iterations` read at :data:`CROSSING_GRID` losses);
        - each loss is the trend times 1 plus a deviation drawn from those
          measured in the fit (:attr:`scatter`, :func:`_scatter`: the latest
          :data:`NOISE_POINTS` raw losses, spikes kept, relative to their
          centred moving average of :data:`NOISE_WINDOW` points);
        - :data:`CROSSING_PATHS` seeded paths of the average are simulated
          from ``smoothed_loss`` (from where the trend is
          :data:`CROSSING_SPAN` of the average's deviations above the target,
          as no path crosses before), and the answer is their median first
          crossing.

        Returns :meth:`trend_iterations` when no window is given, no
        noise was measured, the trend needs :data:`CROSSING_HORIZON`
        iterations or more, or most paths do not cross within
        :data:`CROSSING_MAX_ITERATIONS`; None when that is None.
        """
        remaining = self.trend_iterations(smoothed_loss, target_loss)
        if not remaining or not smoothing_window or smoothing_window <= 1 or not self.scatter.size:
            return remaining
        a = 2.0 / (smoothing_window + 1)
        # the average's deviation at the target, for independent losses
        deviation = target_loss * float(np.std(self.scatter)) * math.sqrt(a / (2.0 - a))
        losses = np.linspace(smoothed_loss, max(target_loss - 4.0 * deviation, 1e-12), CROSSING_GRID)
        ahead = []
        for loss in losses:
            k = self.trend_iterations(smoothed_loss, float(loss)) if loss < smoothed_loss else 0.0
            if k is None or not math.isfinite(k):
                break
            ahead.append(k)
        if len(ahead) < 2 or losses[len(ahead) - 1] > target_loss:
            return remaining  # the curve does not reach the target's neighbourhood: no better answer
        ahead, losses = np.maximum.accumulate(np.array(ahead)), losses[:len(ahead)]
        if not ahead[-1] < CROSSING_HORIZON:  # a flat curve's answer in the billions: simulating says no more
            return remaining
        first = float(np.interp(-(target_loss + CROSSING_SPAN * deviation), -losses, ahead))
        begin = max(0, int(first) - 3 * smoothing_window)
        end = min(float(ahead[-1]) + 4 * smoothing_window, begin + CROSSING_MAX_ITERATIONS)
        average = smoothed_loss if begin == 0 else float(np.interp(begin, ahead, losses))
        crossed = _first_crossing(lambda k: np.interp(k, ahead, losses), begin, int(end), average, a,
                                  self.scatter, target_loss)
        return crossed if crossed < int(end) else remaining  # most paths did not cross: the trend's answer

    @abc.abstractmethod
    def _fit(self, segment: Segment) -> str | None:
        """Fits on a cleaned segment; returns why it cannot, or None."""

    @abc.abstractmethod
    def _remaining(self, current_loss: float, target_loss: float) -> tuple[float | None, str | None]:
        """The remaining iterations, or None and the reason."""
